"""Curtailment through `scalesweep run` (issue 33): the baseline trials run first and in full,
the Tune stopper ends the 16-worker trials once no later eval can change a decision, and every
decision in arms.json is the one the same sweep makes without curtailment; `run` and the report
say whether the baseline plateaued and what curtailment saved."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import RayHead
from tests.support.helpers import scalesweep

pytestmark = [pytest.mark.slow]

# 16 workers with the 2-worker warmup and lr: far slower per epoch, never reaching the target in
# 3 epochs, so each pair settles once its trial passes 1.1x its baseline seed's crossings
SWEEP = """\
name: curtail-e2e
workload: {name: mlp_regression}
reference: {world_size: 2}
target: {metric: dev_loss, relative_to_baseline: 0.10, levels: [0.1, 1.0]}
baseline: {world_size: 2, warmup_rule: fixed, scaling_rule: none}
backend: simulate
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
scheduler: {type: gradual_warmup, warmup_steps: 20}
training: {per_worker_batch: 16, epochs: 3, eval_every_epochs: 0.2}
axes:
  world_size: [2, 16]
  scaling_rule: [none]
  seed: [0, 1, 2]
curtail: true
"""


def decisions(arms_json: Path) -> dict[str, Any]:
    arms = json.loads(arms_json.read_text(encoding="utf-8"))
    return {a["arm"]: (a["decision"], [(lv["level"], lv["decision"], lv["exploratory_decision"])
                                       for lv in a["ratio_by_target"] or []]) for a in arms}


def test_curtailed_trials_stop_early_and_every_decision_stands(tmp_path: Path, ray_head: RayHead) -> None:
    sweep = tmp_path / "curtail.yaml"
    sweep.write_text(SWEEP, encoding="utf-8")
    done = scalesweep("run", str(sweep), *ray_head.args(), cwd=tmp_path, **ray_head.env())
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "ws2-warmup20-none: still falling: train longer" in out or \
        "ws2-warmup20-none: plateau reached" in out
    assert "curtailment: 3 of 6 trials stopped once no later eval could change a decision" in out
    # the baselines ran first: every 2-worker trial ended before any 16-worker trial started
    lines = [s for s in out.splitlines() if s.startswith("[")]
    ended = max(i for i, s in enumerate(lines) if "completed" in s and "ws2-" in s)
    started = min(i for i, s in enumerate(lines) if "started" in s and "ws16-" in s)
    assert ended < started, "\n".join(lines)

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("curtail-e2e")
    assert exp is not None
    runs = client.search_runs([exp.experiment_id])
    parent = next(r for r in runs if r.data.tags.get("scalesweep.role") == "parent")
    assert json.loads(parent.data.params["curtail"]) is True
    assert json.loads(parent.data.params["plateau"]) == {"metric": "dev_loss", "mode": "min",
                                                         "last_share": 0.2, "min_improvement": 0.02}
    for child in (r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id):
        epochs = [m.value for m in client.get_metric_history(child.info.run_id, "epoch")]
        if child.info.run_name.startswith("ws2-"):
            assert child.data.tags["status"] == "completed" and max(epochs) == 3.0
        else:
            assert child.data.tags["status"] == "stopped" and max(epochs) < 3.0
            assert child.info.status == "FINISHED"
    report = (tmp_path / "reports" / "curtail-e2e" / "report.html").read_text(encoding="utf-8")
    assert "Has the baseline plateaued?" in report and "curtailment: 3 of 6 trials stopped" in report

    # a resume with nothing left to run still closes the study (the rounds make their callback
    # even when no part of a round has trials) and says the same
    again = scalesweep("resume", "curtail-e2e", "--no-report", *ray_head.args(), cwd=tmp_path,
                       **ray_head.env())
    assert again.returncode == 0, again.stdout + again.stderr
    assert "6 trials already finished (left as they are); running 0" in again.stdout
    assert "curtailment: 3 of 6 trials stopped" in again.stdout

    # the uncurtailed sweep's arms.json is the one its run writes (no report needed for it)
    full = scalesweep("run", str(sweep), "--set", "curtail=false", "--set", "name=curtail-e2e-full",
                      "--no-report", *ray_head.args(), cwd=tmp_path, **ray_head.env())
    assert full.returncode == 0, full.stdout + full.stderr
    assert "curtailment" not in full.stdout
    [full_arms] = tmp_path.glob("scalesweep_runs/curtail-e2e-full-*/arms.json")
    assert decisions(tmp_path / "reports" / "curtail-e2e" / "arms.json") == decisions(full_arms)
