"""Bad input for curtailment and the plateau check (issue 33): exit 2, naming the field, the
value and the rule, nothing started."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalesweep.orchestrator.cli import main

ROOT = Path(__file__).resolve().parents[2]
WENET = ROOT / "sweeps" / "wenet_4v16.yaml"


def plan(capsys: pytest.CaptureFixture[str], *sets: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(["plan", str(WENET), *[a for s in sets for a in ("--set", s)]])
    return rc, capsys.readouterr().err


def test_a_plateau_rule_on_a_metric_that_is_not_logged(capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = plan(capsys, "plateau.metric=dev_cer")
    assert rc == 2
    assert "plateau.metric = 'dev_cer': is not logged: workload mini_asr reports " \
           "['train_loss', 'dev_loss', 'dev_ter']" in err
    assert plan(capsys, "plateau.metric=dev_ter")[0] == 0  # one it logs
    rc, err = plan(capsys, "plateau.last_share=1.2")
    assert rc == 2 and "plateau.last_share" in err and "1.2" in err


def test_curtailment_on_a_study_without_levels(capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = plan(capsys, "curtail=true", "target={metric: dev_loss, value: 0.5}")
    assert rc == 2
    assert "curtail = True: needs a study with levels: a target relative to the baseline arm " \
           "(target.relative_to_baseline), not target.value: 0.5" in err
    assert plan(capsys, "curtail=true")[0] == 0  # the shipped study's relative target has levels


def test_curtailment_with_asha(capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = plan(capsys, "curtail=true", "replicates=null", "axes.seed=[0, 1]",
                   "search={type: grid, trial_scheduler: asha}")
    assert rc == 2 and "curtail = True: cannot run with search.trial_scheduler: asha" in err
