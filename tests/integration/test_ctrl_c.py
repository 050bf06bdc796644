"""Ctrl-C during `scalesweep run`, as a terminal sends it (SIGINT to the process group), at a
point a gate fixes (tests.support.gated_workload holds the second trial at its 3rd eval; no clock).

The first Ctrl-C stops the sweep cleanly: the finished trial is kept, the held trial is left
open (not failed) with its checkpoints, the trial not started gets no MLflow run, the parent is
KILLED and the message says to resume; `scalesweep resume` then finishes every trial with no
step logged twice. A second Ctrl-C stops at once and leaves the same resumable state.

Three trials, the fewest that hold each state (one finished, one held, one not started). The
single press runs the sweep on a local Ray of its own (the quick start's setting), which the
terminal's SIGINT reaches too, trials included; the double press, whose subject is the driver's
second handler, joins the session's Ray head (no start-up), as `run --address` does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import RayHead
from tests.support.gated_workload import eval_counts
from tests.support.helpers import ROOT, SWEEPS, cli_env, scalesweep, wait_for

pytestmark = [pytest.mark.slow]
DEADLINE_S = 600
#: world sizes 2 and 4 under two lr rules: three trials (at the reference world size the rules
#: are one trial), run one at a time, of one epoch each; the held ws4 trial (32 updates, an eval
#: every 8) has its checkpoints at updates 8 and 16 before its 3rd eval (update 24), and work
#: left after it
SETS = ["--set", "axes.scaling_rule=[none, linear]", "--set", "resources.max_concurrent_trials=1",
        "--set", "training.epochs=1", "--set", "training.eval_every_epochs=0.25",
        "--set", "training.checkpoint_every=8"]


def _runs(db: Path) -> list[object]:
    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("smoke")
    return [] if exp is None else list(client.search_runs([exp.experiment_id]))


def _completed(db: Path) -> int:
    return sum(1 for r in _runs(db) if r.data.tags.get("status") == "completed")  # type: ignore[attr-defined]


@pytest.mark.parametrize("presses", [pytest.param(1, marks=pytest.mark.local_ray), 2])
def test_ctrl_c_leaves_a_sweep_that_resume_finishes(tmp_path: Path, presses: int,
                                                    ray_head: RayHead) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    workload = (f"workload={{name: 'tests.support.gated_workload:make', options: {{gate_dir: '{gate}', "
                "gated_trial: 1, gate_eval: 3}}")
    head = [] if presses == 1 else ray_head.args()  # one press: a local Ray of the sweep's own
    driver = subprocess.Popen(
        [sys.executable, "-m", "scalesweep", "run", "--no-report", str(SWEEPS / "smoke.yaml"), *SETS,
         "--set", workload, *head],
        cwd=tmp_path, env=cli_env(PYTHONPATH=str(ROOT), **(ray_head.env() if head else {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True)
    db = tmp_path / "mlflow.db"
    try:
        wait_for("trial held at the gate", (gate / "waiting").exists, driver, DEADLINE_S)
        wait_for("the first trial finished in MLflow", lambda: _completed(db) >= 1, driver, DEADLINE_S)
        for _ in range(presses):
            os.killpg(driver.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
            time.sleep(0.5 if presses > 1 else 0)
        out, _ = driver.communicate(timeout=DEADLINE_S)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(timeout=60)
        (gate / "release").touch()
    assert driver.returncode == 1, out
    assert "Ctrl-C: stopping the sweep" in out and "scalesweep resume" in out
    if not head:  # a Ray of the sweep's own, in Ray's default token mode, named: no warning
        assert "Token authentication is enabled" not in out, out[:2000]
    runs = _runs(db)
    parent = next(r for r in runs if r.data.tags.get("scalesweep.role") == "parent")  # type: ignore[attr-defined]
    assert parent.info.status == "KILLED"  # type: ignore[attr-defined]
    trials = {r.info.run_name: r for r in runs if r.data.tags.get("scalesweep.role") == "trial"}  # type: ignore[attr-defined]
    statuses = sorted(r.data.tags.get("status") for r in trials.values())  # type: ignore[attr-defined]
    # one finished, one held when Ctrl-C came (left running, not failed); none made for the rest
    assert statuses == ["completed", "running"], statuses

    # the resume, whose subject is the state the interrupted run left, joins the session's head
    done = scalesweep("resume", "--no-report", "smoke", *ray_head.args(), cwd=tmp_path, PYTHONPATH=str(ROOT),
                      **ray_head.env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 trials already finished" in done.stdout
    client = MlflowClient(f"sqlite:///{db}")
    runs = _runs(db)
    trials = {r.info.run_name: r for r in runs if r.data.tags.get("scalesweep.role") == "trial"}  # type: ignore[attr-defined]
    assert len(trials) == 3
    reports = {}
    for name, run in trials.items():
        assert run.data.tags["status"] == "completed", name  # type: ignore[attr-defined]
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "dev_loss")]  # type: ignore[attr-defined]
        assert steps == sorted(set(steps)), f"{name}: a step was logged twice"
        reports[name] = len(steps)
    # the two trials built after the first run (builds 0 and 1 were its finished trial and the
    # held one) are the 4-worker ones, which report the same evals; the resumed one made only
    # those after its newest checkpoint (update 16, its 2nd eval): its 3rd and 4th. From the
    # older one (update 8) it would make 3, from update 0 all 4.
    (evals,) = {n for name, n in reports.items() if name.startswith("ws4-")}
    after = sorted(n for build, n in eval_counts(gate).items() if build >= 2)
    assert evals == 4 and len(after) == 2 and after == [evals - 2, evals], (after, evals)
