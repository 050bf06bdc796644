"""A full disk under a real sweep's journal: `scalesweep run` stops with the journal's path,
the OS's error and the resume command (exit 1), the trials it stopped left for resume; once
space is back, `scalesweep resume` finishes every trial with each eval in MLflow once.

The full disk is /dev/full (every write: ENOSPC) put in the journal's place while a trial is
held at a gate (tests.support.gated_workload), so the first eval after the gate opens is the
first one refused, however fast the machine is; the journal is put back before the resume."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from scalesweep.mlflow_names import ROLE_TAG
from tests.conftest import RayHead
from tests.support.helpers import ROOT, SWEEPS, cli_env, scalesweep, wait_for
from tests.support.small_disk import assert_each_eval_once

pytestmark = pytest.mark.slow

#: the smoke study cut to 2 arms of 2 seeds, 3 epochs, one trial at a time
SETS = ["--set", "axes.scaling_rule=[none]", "--set", "axes.seed=[0, 1]", "--set", "training.epochs=3",
        "--set", "name=smoke_full", "--set", "resources.max_concurrent_trials=1",
        "--set", "training.checkpoint_every=64"]
TRIALS = {"ws2-warmup20-none-s0", "ws2-warmup20-none-s1", "ws4-warmup20-none-s0", "ws4-warmup20-none-s1"}
DEADLINE_S = 600  # a hang guard only: each wait ends as soon as its condition holds


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_a_full_journal_stops_the_sweep_and_resume_finishes_it(tmp_path: Path, ray_head: RayHead) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    gate = tmp_path / "gate"
    gate.mkdir()
    workload = (f"workload={{name: 'tests.support.gated_workload:make', options: {{gate_dir: '{gate}', "
                "gated_trial: 1, gate_eval: 4}}")
    log = tmp_path / "driver.log"
    with log.open("wb") as out:
        driver = subprocess.Popen(
            [sys.executable, "-m", "scalesweep", "run", str(SWEEPS / "smoke.yaml"), *SETS,
             "--set", workload, "--tracking-uri", uri, *ray_head.args()],
            cwd=tmp_path, env=cli_env(PYTHONPATH=str(ROOT), **ray_head.env()), stdout=out,
            stderr=subprocess.STDOUT)
    try:
        wait_for("trial held at the gate", (gate / "waiting").exists, driver, DEADLINE_S)
        (sweep_dir,) = (tmp_path / "scalesweep_runs").glob("smoke_full-*")
        journal = sweep_dir / "metrics.journal.jsonl"
        kept = journal.rename(sweep_dir / "journal.kept")
        journal.symlink_to("/dev/full")  # the disk is full from here on
        (gate / "release").touch()
        assert driver.wait(timeout=DEADLINE_S) == 1, log.read_text()
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        (gate / "release").touch()
    text = log.read_text()
    assert f"{journal}: cannot append an eval (No space left on device, ENOSPC)" in text, text
    assert f"Free space, then `scalesweep resume {sweep_dir}`" in text
    assert "Traceback" not in text, text
    # Tune was stopped by the sweep's own stopper, not by the signal a Ctrl-C sends
    assert "Stop signal received" not in text, text
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("smoke_full")
    assert exp is not None
    (parent,) = client.search_runs([exp.experiment_id], f"tags.`{ROLE_TAG}` = 'parent'")
    assert parent.info.status == "KILLED"  # stopped before its end, waiting for resume
    finished = {r.info.run_name for r in client.search_runs([exp.experiment_id], "tags.status = 'completed'")}
    assert 1 <= len(finished) < len(TRIALS)  # the first trial finished, the held one did not

    journal.unlink()  # space again: the journal as it was before the disk filled
    kept.rename(journal)
    proc = scalesweep("resume", str(sweep_dir), *ray_head.args(), cwd=tmp_path, timeout=DEADLINE_S,
                      PYTHONPATH=str(ROOT), **ray_head.env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(finished)} trials already finished" in proc.stdout
    # each eval once, none missing: the refused one reached MLflow through the buffer
    assert assert_each_eval_once(client, exp.experiment_id, 64) == TRIALS
