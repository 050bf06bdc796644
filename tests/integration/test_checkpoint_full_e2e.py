"""A full disk under a trial's checkpoints: `scalesweep run` stops launching trials, names the
checkpoint's path, the OS's error and the resume command, ends the parent run KILLED and exits 1,
with no traceback; once space is back, `scalesweep resume` finishes every trial, each eval in
MLflow once.

The disk: a 256 KB tmpfs mounted in a user namespace of the driver's own (its local Ray and
trials inside it too: tests/support/small_disk.py), filled before the sweep starts. While the
second trial is held at a gate (tests.support.gated_workload), its Tune directory, where Tune
persists its checkpoints, is swapped for a link to that tmpfs, so the first checkpoint after the
gate is refused however fast the machine is. Where no mount can be made, the held trial's own
process gets an RLIMIT_FSIZE below a checkpoint's size at the gate instead (EFBIG, on the
checkpoint it saves in its temporary directory). The resume runs outside the namespace, with the
trial's directory put back: space again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from scalesweep.mlflow_names import ROLE_TAG
from tests.support.full_checkpoint import FILL, mode
from tests.support.helpers import ROOT, SWEEPS, cli_env, scalesweep, wait_for
from tests.support.small_disk import assert_each_eval_once, on_small_disk

pytestmark = pytest.mark.slow

#: the smoke study cut to 2 arms of 2 seeds, 3 epochs, one trial at a time
SETS = ["--set", "axes.scaling_rule=[none]", "--set", "axes.seed=[0, 1]", "--set", "training.epochs=3",
        "--set", "name=smoke_ckpt_full", "--set", "resources.max_concurrent_trials=1",
        "--set", "training.checkpoint_every=64"]
TRIALS = {"ws2-warmup20-none-s0", "ws2-warmup20-none-s1", "ws4-warmup20-none-s0", "ws4-warmup20-none-s1"}
#: below an mlp_regression checkpoint's state.pt (about 30 KB), above what the trial's process
#: writes to its logs
FSIZE_LIMIT = 16 * 1024
DEADLINE_S = 600  # a hang guard only: each wait ends as soon as its condition holds


@pytest.mark.timeout(480)
def test_a_full_checkpoint_disk_stops_the_sweep_and_resume_finishes_it(tmp_path: Path) -> None:
    disk = mode()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    gate, small = tmp_path / "gate", tmp_path / "small"
    gate.mkdir()
    small.mkdir()
    limit = f", fsize_after_gate: {FSIZE_LIMIT}" if disk == "fsize" else ""
    workload = (f"workload={{name: 'tests.support.full_checkpoint:make', options: {{gate_dir: "
                f"'{gate}', gated_trial: 1, gate_eval: 4{limit}}}}}")
    cmd = [sys.executable, "-m", "scalesweep", "run", str(SWEEPS / "smoke.yaml"), *SETS,
           "--set", workload, "--tracking-uri", uri]
    if disk == "tmpfs":  # the driver and its local Ray see the full tmpfs on `small`
        cmd = on_small_disk(["sh", "-c", FILL, "sh", str(small), *cmd], small, disk)
    log = tmp_path / "driver.log"
    with log.open("wb") as out:
        driver = subprocess.Popen(cmd, cwd=tmp_path, env=cli_env(PYTHONPATH=str(ROOT)), stdout=out,
                                  stderr=subprocess.STDOUT)
    client = MlflowClient(uri)
    kept: Path | None = None
    try:
        wait_for("trial held at the gate", (gate / "waiting").exists, driver, DEADLINE_S)
        (sweep_dir,) = (tmp_path / "scalesweep_runs").glob("smoke_ckpt_full-*")
        exp = client.get_experiment_by_name("smoke_ckpt_full")
        assert exp is not None
        (held,) = [r.info.run_name for r in client.search_runs([exp.experiment_id],
                                                               "tags.status = 'running'")]
        trial_dir = sweep_dir / "tune" / str(held)
        if disk == "tmpfs":  # Tune persists the held trial's next checkpoint to the full disk
            kept = trial_dir.rename(sweep_dir / "trial.kept")
            trial_dir.symlink_to(small, target_is_directory=True)
        (gate / "release").touch()
        assert driver.wait(timeout=DEADLINE_S) == 1, log.read_text()
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        (gate / "release").touch()
    text = log.read_text()
    reason = "No space left on device, ENOSPC" if disk == "tmpfs" else "File too large, EFBIG"
    where = str(trial_dir) if disk == "tmpfs" else "/state.pt"
    assert f": cannot save the trial's checkpoint ({reason}); every trial checkpoints to this " \
           f"disk, so the sweep stopped at trial {held}" in text, text
    assert where in text, text
    assert f"Free space, then `scalesweep resume {sweep_dir}`" in text, text
    assert f"stopped   {held}: the disk is full; no more trials start" in text, text
    assert "Traceback" not in text and "Stop signal received" not in text, text
    (parent,) = client.search_runs([exp.experiment_id], f"tags.`{ROLE_TAG}` = 'parent'")
    assert parent.info.status == "KILLED"  # stopped before its end, waiting for resume
    finished = {r.info.run_name for r in client.search_runs([exp.experiment_id], "tags.status = 'completed'")}
    assert 1 <= len(finished) < len(TRIALS) and held not in finished  # no trial after it started
    assert not client.search_runs([exp.experiment_id], "tags.status = 'failed'")  # left for resume

    if kept is not None:  # space again: the trial's directory as it was before the disk filled
        trial_dir.unlink()
        kept.rename(trial_dir)
    proc = scalesweep("resume", str(sweep_dir), cwd=tmp_path, timeout=DEADLINE_S,
                      PYTHONPATH=str(ROOT))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(finished)} trials already finished" in proc.stdout
    # each eval once, none missing: the refused checkpoint's eval is made again on resume
    assert assert_each_eval_once(client, exp.experiment_id, 64) == TRIALS
