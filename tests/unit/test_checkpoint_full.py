"""A checkpoint the disk cannot take (issue 50, item 3): a checkpoint saved to a real small
filesystem names its file; the trial driver finds the error behind what Ray wraps it in (each
error pickled as it crosses from the actor that raised it); and the sweep's callback stops the
sweep on it, leaving the trial open for resume and raising the error once at the end (a real
SweepCallback and tracker on sqlite MLflow; tests/unit/test_tune_callback.py's stand-in trials).
The whole path, a real sweep on a full tmpfs: tests/integration/test_checkpoint_full_e2e.py."""

from __future__ import annotations

import errno
import json
import pickle
import sys
from pathlib import Path

import pytest
from ray.exceptions import RayTaskError
from ray.train.v2._internal.exceptions import UserExceptionWithTraceback
from ray.train.v2.api.exceptions import ControllerError, WorkerGroupError

from scalesweep.mlflow_names import ERROR_TAG, STATUS_TAG
from scalesweep.trainables.config import TrialConfig
from scalesweep.trainables.disk_full import DISK_FULL_KEY, CheckpointUnwritable, disk_full
from scalesweep.trainables.trial_driver import failed_result
from tests.support.helpers import ROOT, bounded_run, cli_env
from tests.support.small_disk import on_small_disk
from tests.unit.test_tune_callback import FakeTrial, Sweep, _result, _stops

ENOSPC = OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device")
RUN_DIR = "/storage/sweep/train/ws4-s0-abc_00000"

#: a checkpoint of a real model saved into DIR, which the disk cannot take: what is raised
SAVE = """
import contextlib, json, resource, sys, torch
from pathlib import Path
from scalesweep.trainables import checkpointing
from scalesweep.trainables.checkpointing import Progress
from scalesweep.trainables.config import TrialConfig
directory, mode = Path(sys.argv[1]), sys.argv[2]
config = TrialConfig.model_validate(json.loads(sys.argv[3]))
model = torch.nn.Linear(100, 100)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
if mode == "tmpfs":
    with contextlib.suppress(OSError), (directory / "filler").open("wb") as f:
        while True:
            f.write(bytes(65536))
            f.flush()
else:  # CPython ignores SIGXFSZ: a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (8192, resource.RLIM_INFINITY))
try:
    checkpointing.save(directory, config=config, model=model, optimizer=optimizer,
                       progress=Progress())
except OSError as exc:
    print(json.dumps({"errno": exc.errno, "filename": exc.filename,
                      "files": sorted(p.name for p in directory.iterdir() if p.name != "filler")}))
"""


@pytest.mark.parametrize(("mode", "code"), [("tmpfs", errno.ENOSPC), ("fsize", errno.EFBIG)])
def test_a_checkpoint_the_disk_cannot_take_names_its_file(tmp_path: Path, mode: str,
                                                          code: int) -> None:
    # torch.save turns the file's OSError into a RuntimeError of its own: the save gives it back
    small = tmp_path / "small"
    small.mkdir()
    config = TrialConfig.model_validate({
        "name": "t", "workload": "mlp_regression", "world_size": 1, "physical_workers": 1,
        "per_worker_batch": 8, "optimizer": {"type": "sgd", "lr": 0.1},
        "scheduler": {"type": "constant"}, "total_updates": 4, "eval_every": 2}).model_dump_json()
    cmd = on_small_disk([sys.executable, "-c", SAVE, str(small), mode, config], small, mode)
    done = bounded_run(cmd, cwd=ROOT, env=cli_env(), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"errno": code, "filename": str(small / "state.pt"), "files": []}  # no .tmp


def _crossed(error: BaseException) -> BaseException:
    crossed: BaseException = pickle.loads(pickle.dumps(error))
    return crossed


def test_the_trial_driver_finds_a_full_disk_behind_ray_trains_failure() -> None:
    named = OSError(errno.EDQUOT, "Disk quota exceeded", "/scratch/ckpt/state.pt")
    worker = UserExceptionWithTraceback(ENOSPC, "Traceback ...\nOSError: [Errno 28] ...")
    task = RayTaskError("train", "Traceback ...", ENOSPC)
    for failure, where in ((WorkerGroupError("rank 0 failed", {0: worker}), RUN_DIR),
                           (WorkerGroupError("rank 1 failed", {1: task}), RUN_DIR),
                           (ControllerError(named), "/scratch/ckpt/state.pt"),
                           # only text made it across: the OS's errno in its words
                           (WorkerGroupError("OSError: [Errno 28] No space left on device", {}),
                            RUN_DIR)):
        crossed = _crossed(failure)
        assert disk_full(crossed) is not None, failure
        result = failed_result(crossed, RUN_DIR)
        code = "EDQUOT" if where != RUN_DIR else "ENOSPC"
        words = "Disk quota exceeded" if where != RUN_DIR else "No space left on device"
        assert result == {STATUS_TAG: "failed", DISK_FULL_KEY: where,
                          ERROR_TAG: f"{where}: cannot save the trial's checkpoint ({words}, {code})"}


def test_another_os_error_is_the_trials_own_failure() -> None:
    for failure in (WorkerGroupError("rank 0 failed", {0: FileNotFoundError(2, "gone", "/x")}),
                    WorkerGroupError("rank 0 failed", {0: RuntimeError("CUDA out of memory")})):
        crossed = _crossed(failure)
        assert disk_full(crossed) is None
        result = failed_result(crossed, RUN_DIR)
        assert result[STATUS_TAG] == "failed" and DISK_FULL_KEY not in result


# -- the sweep's callback ---------------------------------------------------------------------

LINE = f"{RUN_DIR}: cannot save the trial's checkpoint (No space left on device, ENOSPC)"


@pytest.fixture
def sweep(sqlite_uri: str, request: pytest.FixtureRequest) -> Sweep:
    from tests.unit.test_tune_callback import _sweep

    return _sweep(sqlite_uri, request.node.name)


@pytest.fixture(scope="module")
def sqlite_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


def _stop_message(trial: str, sweep_dir: Path) -> str:
    return (f"{LINE}; every trial checkpoints to this disk, so the sweep stopped at trial {trial}: "
            "finished trials are kept, the others go on from their last whole checkpoint. Free "
            f"space, then `scalesweep resume {sweep_dir}`")


def test_a_full_checkpoint_disk_stops_the_sweep_and_leaves_the_trial_for_resume(
        sweep: Sweep, tmp_path: Path) -> None:
    (tmp_path / "sweep-dir").mkdir()
    sweep.tracker.journal = tmp_path / "sweep-dir" / "metrics.journal.jsonl"
    cb, t0, t1, t2 = sweep.callback, FakeTrial("t0"), FakeTrial("t1"), FakeTrial("t2")
    asked = _stops(cb)
    cb.on_trial_start(0, [t0, t1], t0)
    cb.on_trial_result(1, [t0, t1], t0, _result(40, "completed"))  # finished before: kept
    cb.on_trial_complete(2, [t0, t1], t0)
    cb.on_trial_start(3, [t0, t1, t2], t1)
    cb.on_trial_start(3, [t0, t1, t2], t2)
    cb.on_trial_result(4, [t0, t1, t2], t1, _result(10))
    cb.on_trial_result(5, [t0, t1, t2], t1, {STATUS_TAG: "failed", ERROR_TAG: LINE,
                                             DISK_FULL_KEY: RUN_DIR})
    cb.on_trial_result(5, [t0, t1, t2], t2, {STATUS_TAG: "failed", ERROR_TAG: LINE,
                                             DISK_FULL_KEY: RUN_DIR})  # the same disk, stopping
    cb.on_trial_complete(6, [t0, t1, t2], t1)
    cb.on_trial_complete(6, [t0, t1, t2], t2)
    assert asked == ["stop"] and cb.interrupted
    assert sweep.run("t0").info.status == "FINISHED"
    for name in ("t1", "t2"):  # open in MLflow, as a Ctrl-C leaves them: resume runs them
        run = sweep.run(name)
        assert run.info.status == "RUNNING" and run.data.tags["status"] == "running", name
        assert "error" not in run.data.tags and name not in cb.errors
    assert sweep.lines()[-2:] == [
        "stopped   t1: the disk is full; no more trials start",
        "paused    t2 (a full disk): resume goes on from its last checkpoint"]
    with pytest.raises(CheckpointUnwritable) as info:
        cb.on_experiment_end([t0, t1, t2])
    assert str(info.value) == _stop_message("t1", tmp_path / "sweep-dir")


def test_a_trial_tune_failed_on_a_full_disk_stops_the_sweep_too(sweep: Sweep, tmp_path: Path) -> None:
    # the error as Tune keeps it (its error file's traceback), not a result of the trial's
    sweep.tracker.journal = tmp_path / "sweep-dir" / "metrics.journal.jsonl"
    cb = sweep.callback
    t0 = FakeTrial("t0", error="Traceback (most recent call last):\n  File \"x.py\"\n"
                               "OSError: [Errno 28] No space left on device: '/sweep/tune/t0'")
    asked = _stops(cb)
    cb.on_trial_start(0, [t0], t0)
    cb.on_trial_error(1, [t0], t0)
    assert asked == ["stop"] and cb.status["t0"] == "running"
    assert sweep.run("t0").info.status == "RUNNING"
    with pytest.raises(CheckpointUnwritable, match=r"^OSError: \[Errno 28\] No space left on "
                                                   r"device: '/sweep/tune/t0'; every trial"):
        cb.on_experiment_end([t0])

