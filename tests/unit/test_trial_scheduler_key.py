"""search.trial_scheduler (Tune's trial scheduler, fifo|asha) is the key; search.scheduler, its
old name, still works for one release with a warning naming the new key (issue 49, item 3)."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

from scalesweep.orchestrator.spec.errors import InputError
from scalesweep.orchestrator.spec.load import load_sweep
from tests.support.helpers import SCALESWEEP

SMOKE = Path(__file__).resolve().parents[2] / "sweeps" / "smoke.yaml"


def _load(caplog: pytest.LogCaptureFixture, *sets: str) -> tuple[str, list[str]]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="scalesweep"):
        sweep = load_sweep(SMOKE, list(sets))
    return sweep.spec.search.trial_scheduler, [r.getMessage() for r in caplog.records]


def test_the_new_key_sets_tunes_trial_scheduler_without_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    assert _load(caplog) == ("fifo", [])
    assert _load(caplog, "search.trial_scheduler=asha") == ("asha", [])


def test_the_old_key_still_works_and_warns_once_naming_the_new_one(
        caplog: pytest.LogCaptureFixture) -> None:
    value, seen = _load(caplog, "search.scheduler=asha")
    assert value == "asha"
    assert len(seen) == 1
    assert "search.scheduler is deprecated" in seen[0] and "use search.trial_scheduler" in seen[0]
    assert seen[0].startswith(str(SMOKE))


def test_both_keys_are_refused_by_name() -> None:
    with pytest.raises(InputError) as caught:
        load_sweep(SMOKE, ["search.scheduler=fifo", "search.trial_scheduler=asha"])
    assert "give trial_scheduler only: scheduler is its deprecated name" in str(caught.value)
    assert any(p.path == "search" for p in caught.value.problems)


def test_the_console_script_prints_the_warning_once_and_plans(tmp_path: Path) -> None:
    proc = subprocess.run([str(SCALESWEEP), "plan", str(SMOKE), "--json", "--set",
                           "search.scheduler=asha"], cwd=tmp_path, capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("search.scheduler is deprecated") == 1
    assert "use search.trial_scheduler" in proc.stderr
    assert proc.stdout.lstrip().startswith("[")  # stdout is still the plan's JSON alone
