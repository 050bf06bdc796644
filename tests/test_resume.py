"""`scalesweep resume` after the sweep driver is killed with SIGKILL mid-sweep."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers import SWEEPS, cli_env, scalesweep

pytestmark = pytest.mark.slow
SETS = ["--set", "training.epochs=40", "--set", "resources.max_concurrent_trials=1",
        "--set", "training.checkpoint_every=40"]


def _progress(db: Path) -> tuple[int, int]:
    """(finished children, evals logged for running children), read straight from sqlite."""
    if not db.exists():
        return 0, 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        finished = con.execute(
            "SELECT count(*) FROM tags t JOIN runs r ON r.run_uuid = t.run_uuid "
            "WHERE t.key = 'status' AND t.value = 'completed'").fetchone()[0]
        running = con.execute(
            "SELECT count(*) FROM metrics m JOIN tags t ON t.run_uuid = m.run_uuid "
            "WHERE m.key = 'dev_loss' AND t.key = 'status' AND t.value = 'running'").fetchone()[0]
        return int(finished), int(running)
    except sqlite3.Error:
        return 0, 0
    finally:
        con.close()


def test_resume_finishes_only_unfinished_trials_without_duplicates(tmp_path: Path) -> None:
    driver = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", str(SWEEPS / "smoke.yaml"), *SETS],
        cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    db = tmp_path / "mlflow.db"
    deadline = time.monotonic() + 400
    try:
        while True:
            finished, running_evals = _progress(db)
            if finished >= 1 and running_evals >= 6:
                break
            assert driver.poll() is None, "the sweep ended before it could be interrupted"
            assert time.monotonic() < deadline, "sweep made no progress"
            time.sleep(0.3)
        os.kill(driver.pid, signal.SIGKILL)
    finally:
        driver.wait(timeout=60)
        if driver.stdout:
            driver.stdout.close()
    time.sleep(3)  # let the orphaned local Ray notice its driver is gone

    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("smoke")
    assert exp is not None
    before = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])
              if r.data.tags.get("status") == "completed"}
    assert before

    proc = scalesweep("resume", "smoke", cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(before)} trials already finished" in proc.stdout

    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("scalesweep.role") == "parent"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    names = [c.info.run_name for c in children]
    assert sorted(names) == sorted(set(names)) and len(names) == 4  # exactly one per trial
    for child in children:
        assert child.info.status == "FINISHED" and child.data.tags["status"] == "completed"
        total = int(child.data.params["total_updates"])
        every = int(child.data.params["eval_every"])
        steps = [m.step for m in client.get_metric_history(child.info.run_id, "dev_loss")]
        assert steps == sorted(set(steps)), f"{child.info.run_name}: a step was logged twice"
        # the loop evaluates at every eval_every and at every checkpoint (checkpoint_every=40)
        expected = sorted({*range(every, total + 1, every), *range(40, total + 1, 40), total})
        assert steps == expected, f"{child.info.run_name}: evals missing"
        if child.info.run_name in before:  # finished work is left exactly as it was
            assert child.info.end_time == before[child.info.run_name].info.end_time
