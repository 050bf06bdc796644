"""A user's loop that breaks the report contract the way every trial will (its reports carry no
``lr``) stops a real sweep at its first trial: `scalesweep run` starts no other trial, says the
loop's error once with `scalesweep resume`, and exits 1; the trial is left open in MLflow, and
once the loop is fixed, `scalesweep resume` runs every trial to the end, that one in its own
run. (A failure of one trial alone, a diverged loss or an lr off the plan, leaves the others to
run: test_user_loop_e2e.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import RayHead
from tests.support.helpers import ROOT, scalesweep

pytestmark = pytest.mark.slow

SWEEP = """
name: contract-stop
workload:
  train_loop: "tests.support.user_loops:lr_until_fixed"
  train_size: 64
  options: {{fixed: "{fixed}"}}
target: {{metric: dev_loss, value: 0.5}}
optimizer: {{type: sgd, lr: 0.1}}
scheduler: {{type: warmuplr, warmup_steps: 8}}
training: {{per_worker_batch: 8, max_updates: 24, eval_every: 4}}
resources: {{cpus_per_worker: 0.5, max_concurrent_trials: 1}}
axes: {{world_size: [1], seed: [0, 1]}}
"""
TRIALS = {"ws1-warmup8-none-s0", "ws1-warmup8-none-s1"}
NO_LR = "reported update 4 without 'lr': every report needs the lr its update ran with"
DEADLINE_S = 400  # a hang guard only


def test_a_contract_break_every_trial_shares_stops_the_sweep_and_resume_finishes_it(
        tmp_path: Path, ray_head: RayHead) -> None:
    fixed = tmp_path / "fixed"
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(SWEEP.format(fixed=fixed), encoding="utf-8")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {"PYTHONPATH": str(ROOT), **ray_head.env()}
    proc = scalesweep("run", str(sweep), "--tracking-uri", uri, *ray_head.args(), cwd=tmp_path,
                      timeout=DEADLINE_S, **env)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 1, text
    (sweep_dir,) = (tmp_path / "scalesweep_runs").glob("contract-stop-*")
    assert text.count(NO_LR) == 1, text  # the message, once
    assert f"then `scalesweep resume {sweep_dir}` runs the rest" in text
    assert "Traceback" not in text, text
    started = [ln.split()[-1] for ln in proc.stdout.splitlines() if "] started " in ln]
    assert len(started) == 1 and started[0] in TRIALS, text  # no second trial started
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("contract-stop")
    assert exp is not None
    (first,) = client.search_runs([exp.experiment_id], "tags.mlflow.parentRunId != ''")
    # left open for resume, not closed as failed
    assert first.info.run_name == started[0] and first.info.status == "RUNNING"
    assert first.data.tags["status"] == "running" and "error" not in first.data.tags

    fixed.touch()  # the loop fixed: it reports the lr
    proc = scalesweep("resume", str(sweep_dir), *ray_head.args(), cwd=tmp_path,
                      timeout=DEADLINE_S, **env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = json.loads((sweep_dir / "summary.json").read_text())
    assert {t["name"]: t["status"] for t in trials} == dict.fromkeys(TRIALS, "completed")
    children = client.search_runs([exp.experiment_id], "tags.mlflow.parentRunId != ''")
    assert sorted(c.info.run_name for c in children) == sorted(TRIALS)  # the first in its own run
    assert first.info.run_id in {c.info.run_id for c in children}
    for child in children:
        assert child.info.status == "FINISHED" and child.data.tags["status"] == "completed"
        steps = [m.step for m in client.get_metric_history(child.info.run_id, "dev_loss")]
        assert steps == [4, 8, 12, 16, 20, 24], child.info.run_name
