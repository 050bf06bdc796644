"""A fused trial whose checkpoint the disk refuses stops the sweep as a solo trial does
(trial_driver.run_fused, stop_on_full_disk): the trial reports the disk-full failed result
instead of raising (so Tune does not retry it), and the sweep's callback, given that result
from a fused trial, stops the sweep with every seed still running left open for resume.

The full disk is a real one: the stand-in for ``ray.tune.report`` persists each checkpoint's
state to ``/dev/full`` (ENOSPC on every write), as Tune persisting it to a full storage would.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path
from typing import Any

import pytest
import ray.tune

from scalesweep.mlflow_names import ERROR_TAG, STATUS_TAG
from scalesweep.trainables import checkpointing, trial_driver
from scalesweep.trainables.config import SEED_TRIAL_KEY
from scalesweep.trainables.disk_full import DISK_FULL_KEY, CheckpointUnwritable
from tests.unit.test_fused_resume import _job
from tests.unit.test_tune_callback import Sweep, _fused_trial, _result, _stops

FULL = Path("/dev/full")


class _FullTune:
    """``ray.tune.report``'s stand-in: results kept in order; a checkpoint persisted to a disk
    that is full from update ``full_at`` on (a real ENOSPC, from /dev/full)."""

    def __init__(self, full_at: int) -> None:
        self.results: list[dict[str, Any]] = []
        self.full_at = full_at

    def report(self, metrics: dict[str, Any], checkpoint: ray.tune.Checkpoint | None = None) -> None:
        if checkpoint is not None and metrics["update"] >= self.full_at:
            seed_dir = next(p for p in Path(checkpoint.path).iterdir() if p.is_dir())
            shutil.copyfile(seed_dir / checkpointing.STATE_FILE, FULL)
        self.results.append(metrics)


def test_a_fused_trial_on_a_full_disk_reports_the_disk_full_result(tmp_path: Path) -> None:
    assert FULL.exists(), "Linux's /dev/full (ENOSPC on every write) is this test's full disk"
    tune = _FullTune(full_at=4)
    trial_driver.run_fused(_job(), tune.report, own=None, sweep_dir=tmp_path)  # no raise
    *evals, last = tune.results
    # the checkpoint of update 2 was persisted; that of update 4 (with the update's last
    # report, arm-s4's) was refused, and nothing trained after it
    assert [(r[SEED_TRIAL_KEY], r["update"]) for r in evals] == [("arm-s0", 2), ("arm-s4", 2),
                                                                 ("arm-s0", 4)]
    assert last == {STATUS_TAG: "failed", DISK_FULL_KEY: str(tmp_path),
                    ERROR_TAG: f"{tmp_path}: cannot save the trial's checkpoint "
                               f"(No space left on device, {errno.errorcode[errno.ENOSPC]})"}


def test_another_error_still_fails_the_fused_trial(tmp_path: Path) -> None:
    def report(metrics: dict[str, Any], checkpoint: ray.tune.Checkpoint | None = None) -> None:
        raise FileNotFoundError(errno.ENOENT, "gone", str(tmp_path / "x"))

    with pytest.raises(FileNotFoundError):
        trial_driver.run_fused(_job(), report, own=None, sweep_dir=tmp_path)


# -- the sweep's callback, given that result from a fused trial -------------------------------

@pytest.fixture
def sweep(sqlite_uri: str, request: pytest.FixtureRequest) -> Sweep:
    from tests.unit.test_tune_callback import _sweep

    return _sweep(sqlite_uri, request.node.name)


@pytest.fixture(scope="module")
def sqlite_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


def test_a_fused_trials_full_disk_stops_the_sweep_and_leaves_its_running_seeds_open(
        sweep: Sweep, tmp_path: Path) -> None:
    (tmp_path / "sweep-dir").mkdir()
    sweep.tracker.journal = tmp_path / "sweep-dir" / "metrics.journal.jsonl"
    cb, trial = sweep.callback, _fused_trial(("arm-s0", "arm-s1", "arm-s2"))
    asked = _stops(cb)
    line = "/sweep/tune/arm-seeds0+1: cannot save the trial's checkpoint (No space left on device, ENOSPC)"
    cb.on_trial_start(0, [trial], trial)
    cb.on_trial_result(1, [trial], trial, _result(10, "diverged", seed_trial="arm-s0"))  # ended before
    cb.on_trial_result(1, [trial], trial, _result(10, seed_trial="arm-s1"))
    cb.on_trial_result(1, [trial], trial, _result(10, seed_trial="arm-s2"))
    cb.on_trial_result(2, [trial], trial, {STATUS_TAG: "failed", ERROR_TAG: line,
                                           DISK_FULL_KEY: "/sweep/tune/arm-seeds0+1"})
    cb.on_trial_complete(3, [trial], trial)
    assert asked == ["stop"] and cb.interrupted
    assert sweep.run("arm-s0").data.tags["status"] == "diverged"
    for name in ("arm-s1", "arm-s2"):  # open in MLflow, as a Ctrl-C leaves them: resume runs them
        run = sweep.run(name)
        assert run.info.status == "RUNNING" and run.data.tags["status"] == "running", name
        assert "error" not in run.data.tags and name not in cb.errors
    assert sweep.lines()[-3:] == [
        "stopped   arm-seeds0+1: the disk is full; no more trials start",
        "paused    arm-s1 (a full disk): resume goes on from its last checkpoint",
        "paused    arm-s2 (a full disk): resume goes on from its last checkpoint"]
    with pytest.raises(CheckpointUnwritable, match=r"sweep stopped at trial arm-seeds0\+1: "):
        cb.on_experiment_end([trial])
