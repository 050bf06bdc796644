"""Faults around checkpoints, through the real CLI: a torn newest checkpoint of an interrupted
sweep (resume goes on from the previous one, and says so), and a failed trial run again by
`resume --retry-failed` once its cause is gone (its first sweep: a trial that fails every time is
failed with its error after its retries, and the sweep goes on).

Kill points come from a gate the trial waits at (tests.support.gated_workload), never from a clock.
Every sweep here joins the session's Ray head (no start-up each); a killed driver's trials end
with it there, as they do on a local Ray.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import RayHead
from tests.support.helpers import ROOT, SWEEPS, cli_env, scalesweep

pytestmark = [pytest.mark.slow]
DEADLINE_S = 600
#: one trial (every lr rule is the same trial at the reference world size) of one epoch (64
#: updates, an eval every 16), checkpoints every 8 updates (each evaluated too): the trial is
#: held at its 4th eval (update 32, whose checkpoint is made after that eval), by when it has
#: written checkpoints at 8, 16 and 24; Tune keeps two
ONE_TRIAL = ["--set", "axes.world_size=[2]", "--set", "training.epochs=1",
             "--set", "training.eval_every_epochs=0.25", "--set", "training.checkpoint_every=8"]


def _children(db: Path, experiment: str) -> dict[str, object]:
    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    runs = client.search_runs([exp.experiment_id])
    return {r.info.run_name: r for r in runs if r.data.tags.get("scalesweep.role") == "trial"}


def _steps_once(db: Path, run_id: str) -> list[int]:
    steps = [m.step for m in MlflowClient(f"sqlite:///{db}").get_metric_history(run_id, "dev_loss")]
    assert steps == sorted(set(steps)), "a step was logged twice"
    return steps


def test_a_torn_newest_checkpoint_is_passed_over_for_the_previous_one(tmp_path: Path,
                                                                      ray_head: RayHead) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    workload = (f"workload={{name: 'tests.support.gated_workload:make', options: {{gate_dir: '{gate}', "
                "gated_trial: 0, gate_eval: 4}}")
    driver = subprocess.Popen(
        [sys.executable, "-m", "scalesweep", "run", "--no-report", str(SWEEPS / "smoke.yaml"), *ONE_TRIAL,
         "--set", workload, *ray_head.args()], cwd=tmp_path,
        env=cli_env(PYTHONPATH=str(ROOT), **ray_head.env()),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not (gate / "waiting").exists():
            assert driver.poll() is None, "the sweep ended before its trial reached the gate"
            assert time.monotonic() < deadline, f"no trial at the gate in {DEADLINE_S} s"
            time.sleep(0.3)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the driver; the held trial ends with it
        driver.wait(timeout=60)
    try:
        kept = sorted((tmp_path / "scalesweep_runs").glob("smoke-*/tune/*/checkpoint_*"),
                      key=lambda p: p.stat().st_mtime)
        assert len(kept) == 2, kept
        newest, previous = kept[1], kept[0]
        state = newest / "state.pt"
        state.write_bytes(state.read_bytes()[:100])  # a copy cut short

        done = scalesweep("resume", "--no-report", "smoke", *ray_head.args(), cwd=tmp_path,
                          PYTHONPATH=str(ROOT), **ray_head.env())
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"torn checkpoint {newest}" in done.stderr
        assert f"resuming from the previous one, {previous}" in done.stderr
        (trial,) = _children(tmp_path / "mlflow.db", "smoke").values()
        assert trial.data.tags["status"] == "completed"  # type: ignore[attr-defined]
        steps = _steps_once(tmp_path / "mlflow.db", trial.info.run_id)  # type: ignore[attr-defined]
        # every eval (16, 32, ...) and every checkpoint (8, 16, ...) once, to the last update
        assert steps[-1] == 64 and {*range(16, 65, 16), *range(8, 65, 8)} <= set(steps)
    finally:  # the killed run's trial, if Ray has not ended it yet, goes on and ends
        (gate / "release").touch()


def test_resume_retry_failed_runs_a_failed_trial_again(tmp_path: Path, ray_head: RayHead) -> None:
    # three CLI sweeps that all end by themselves: they share the session's Ray head
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return scalesweep(*args, *ray_head.args(), cwd=tmp_path, PYTHONPATH=str(ROOT),
                          **ray_head.env())

    cause = tmp_path / "broken"
    cause.touch()
    workload = (f"workload={{name: 'tests.support.faulty_workload:make', options: {{fail_seed: 1, "
                f"fail_while: '{cause}'}}}}")
    # the first sweep is also the one of a trial failing every time: it is failed with its
    # error after its one retry (max_failures=1), and the sweep goes on
    sets = [*ONE_TRIAL, "--set", "axes.seed=[0, 1]", "--set", "max_failures=1", "--set", workload]
    first = cli("run", "--no-report", str(SWEEPS / "smoke.yaml"), *sets, "--summary-json", "s.json")
    assert first.returncode == 1, first.stdout + first.stderr  # some trial failed
    assert "Traceback" not in first.stdout
    assert "retrying ws2-warmup20-none-s1 from its last checkpoint" in first.stdout  # its one retry
    trials = {t["seed"]: t for t in json.loads((tmp_path / "s.json").read_text())}
    assert trials[0]["status"] == "completed" and trials[0]["best_dev_loss"] is not None
    assert trials[1]["status"] == "failed"
    assert "injected failure for seed 1" in (trials[1]["error"] or "")
    before = _children(tmp_path / "mlflow.db", "smoke")
    failed = before["ws2-warmup20-none-s1"]
    assert failed.info.run_id == trials[1]["mlflow_run_id"]  # type: ignore[attr-defined]
    assert failed.data.tags["status"] == "failed" and failed.info.status == "FAILED"  # type: ignore[attr-defined]
    assert "injected failure" in failed.data.tags["error"]  # type: ignore[attr-defined]

    plain = cli("resume", "--no-report", "smoke")
    assert plain.returncode == 1 and "2 trials already finished" in plain.stdout  # not retried

    cause.unlink()  # the user fixes the cause
    again = cli("resume", "--no-report", "smoke", "--retry-failed")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "retrying 1 failed trial(s):" in again.stdout
    assert "ws2-warmup20-none-s1: RuntimeError" in again.stdout and "injected failure" in again.stdout
    after = _children(tmp_path / "mlflow.db", "smoke")
    assert set(after) == set(before)  # the same runs, one per trial
    retried = after["ws2-warmup20-none-s1"]
    assert retried.info.run_id == before["ws2-warmup20-none-s1"].info.run_id  # type: ignore[attr-defined]
    assert retried.data.tags["status"] == "completed" and retried.info.status == "FINISHED"  # type: ignore[attr-defined]
    _steps_once(tmp_path / "mlflow.db", retried.info.run_id)  # type: ignore[attr-defined]
