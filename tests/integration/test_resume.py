"""`scalesweep resume` after the sweep driver is killed with SIGKILL mid-sweep.

The kill point does not depend on the machine's speed: the sweep's second trial is held at its
third evaluation by ``tests.support.gated_workload`` until the test opens the gate, and the test kills
the driver while it is held, once the first trial is finished in MLflow (read through MLflow's
public client, never its private tables).

Three trials, the fewest that hold each state at the kill (one finished, one held, one not
started). The killed run and the resume join the session's Ray head (no start-up each): the
driver's death ends the trials it owns there, as it ends a local Ray.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import RayHead
from tests.support.gated_workload import eval_counts
from tests.support.helpers import ROOT, SWEEPS, cli_env, scalesweep, wait_for

# the wait for the first trial (DEADLINE_S) and the resume (600 s) bound it
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]
#: world sizes 2 and 4 under two lr rules: three trials (at the reference world size the rules
#: are one trial), run one at a time, of one epoch each; the held ws4 trial (32 updates, an eval
#: every 8) has its checkpoints at updates 8 and 16 before its 3rd eval (update 24), and work
#: left after it
SETS = ["--set", "axes.scaling_rule=[none, linear]", "--set", "resources.max_concurrent_trials=1",
        "--set", "training.epochs=1", "--set", "training.eval_every_epochs=0.25",
        "--set", "training.checkpoint_every=8"]
#: a hang guard only: each wait below ends as soon as its condition holds
DEADLINE_S = 600


def _completed_children(db: Path) -> int:
    if not db.exists():
        return 0
    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("smoke")
    if exp is None:
        return 0
    return len(client.search_runs([exp.experiment_id], "tags.status = 'completed'"))


def test_resume_finishes_only_unfinished_trials_without_duplicates(tmp_path: Path,
                                                                  ray_head: RayHead) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    workload = (f"workload={{name: 'tests.support.gated_workload:make', options: {{gate_dir: '{gate}', "
                "gated_trial: 1, gate_eval: 3}}")
    env = cli_env(PYTHONPATH=str(ROOT), **ray_head.env())
    driver = subprocess.Popen(
        [sys.executable, "-m", "scalesweep", "run", "--no-report", str(SWEEPS / "smoke.yaml"), *SETS,
         "--set", workload, *ray_head.args()],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = tmp_path / "mlflow.db"
    try:
        wait_for("trial held at the gate", (gate / "waiting").exists, driver, DEADLINE_S)
        wait_for("finished first trial in MLflow", lambda: _completed_children(db) >= 1, driver, DEADLINE_S)
        os.kill(driver.pid, signal.SIGKILL)
    finally:
        if driver.poll() is None:
            driver.kill()
        driver.wait(timeout=60)
        (gate / "release").touch()  # the orphaned trial (if still alive) and the resumed ones run on

    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("smoke")
    assert exp is not None
    before = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])
              if r.data.tags.get("status") == "completed"}
    assert before

    proc = scalesweep("resume", "--no-report", "smoke", *ray_head.args(), cwd=tmp_path, timeout=600,
                      PYTHONPATH=str(ROOT), **ray_head.env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(before)} trials already finished" in proc.stdout

    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("scalesweep.role") == "parent"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    names = [c.info.run_name for c in children]
    assert sorted(names) == sorted(set(names)) and len(names) == 3  # exactly one per trial
    for child in children:
        assert child.info.status == "FINISHED" and child.data.tags["status"] == "completed"
        total = int(child.data.params["total_updates"])
        every = int(child.data.params["eval_every"])
        steps = [m.step for m in client.get_metric_history(child.info.run_id, "dev_loss")]
        assert steps == sorted(set(steps)), f"{child.info.run_name}: a step was logged twice"
        # the loop evaluates at every eval_every and at every checkpoint (checkpoint_every=8)
        expected = sorted({*range(every, total + 1, every), *range(8, total + 1, 8), total})
        assert steps == expected, f"{child.info.run_name}: evals missing"
        if child.info.run_name in before:  # finished work is left exactly as it was
            assert child.info.end_time == before[child.info.run_name].info.end_time
    # the trials built after the kill (builds 0 and 1 were the killed run's: its finished trial
    # and the held one) are the 4-worker ones, which report the same evals; the resumed one made
    # only those after its newest checkpoint, where a restart from update 0 would make them all
    (evals,) = {len(client.get_metric_history(c.info.run_id, "dev_loss")) for c in children
                if c.info.run_name.startswith("ws4-")}
    after = sorted(n for build, n in eval_counts(gate).items() if build >= 2)
    assert len(after) == 2 and after[1:] == [evals] and 0 < after[0] < evals, (after, evals)
