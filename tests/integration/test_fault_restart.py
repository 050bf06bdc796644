"""A ddp trial whose worker is SIGKILLed mid-run is restarted by Ray Train from its checkpoint
and ends exactly where an uninterrupted run ends, without re-reporting earlier evaluations.

The production path, both backends side by side in one Tuner, with the entry point and
resources the sweep runner hands Tune (``trial_driver.trainable``; ddp: Tune trial ->
LeanTorchTrainer -> TuneReportCallback; simulate: the loop in the Tune trial): every report of
each equals simulate's run outside Ray (losses and noise scale to 1e-9 relative, the same lr,
samples, epoch and status), and the checkpoints lie where the sweep finds them. (P = V and
hybrid ddp without Tune against simulate: tests/integration/test_equivalence_ddp.py.)"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from ray import tune

from scalesweep.trainables import loop, trial_driver
from scalesweep.trainables.config import TrialConfig
from scalesweep.trainables.world import LocalWorld

pytestmark = pytest.mark.slow

UPDATES, EVERY = 300, 50
RTOL = 1e-9  # float64: summation order alone (test_equivalence_ddp.py)


def _train_worker_pids() -> set[int]:
    """Ray Train workers of the cluster this test started: descendants of this process (its
    raylet forks them) whose process title names Ray Train's worker actor."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [os.getpid()]
    while todo:
        for pid in children.get(todo.pop(), []):
            todo.append(pid)
            try:
                title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if title.startswith(b"ray::RayTrainWorker"):
                found.add(pid)
    return found


class _Killer(threading.Thread):
    """SIGKILLs one worker once two checkpoints exist, then watches the group restart.

    Two, not one: a checkpoint directory appears while it is being uploaded, and only once the
    next one appears is the first surely registered (reports are sequential)."""

    def __init__(self, storage: Path) -> None:
        super().__init__(daemon=True)
        self.storage = storage
        self.killed: int | None = None
        self.killed_after: list[str] = []
        self.pids_at_kill: set[int] = set()
        self.restarted_pids: set[int] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set() and self.killed is None:
            checkpoints = sorted(p.name for p in self.storage.glob("*/checkpoint_0*"))
            # the walk of /proc costs far more than the glob: only once there is a worker to kill
            pids = _train_worker_pids() if len(checkpoints) >= 2 else set()
            if pids:
                self.killed, self.killed_after, self.pids_at_kill = max(pids), checkpoints, pids
                os.kill(self.killed, signal.SIGKILL)
            time.sleep(0.05)
        while not self.stop.is_set() and not self.restarted_pids:
            self.restarted_pids = _train_worker_pids() - self.pids_at_kill
            time.sleep(0.2)


def test_killed_worker_is_restarted_from_checkpoint(ray_cluster: None, tmp_path: Path) -> None:
    trial = TrialConfig(
        name="fault-v4-p2",
        workload="mlp_regression",
        workload_options={"train_size": 512, "dev_size": 160},
        world_size=4,
        physical_workers=2,
        backend="ddp",
        per_worker_batch=8,
        optimizer={"type": "adam", "lr": 1e-3},
        scheduler={"type": "warmuplr", "warmup_steps": 40},
        total_updates=UPDATES,
        eval_every=EVERY,
        checkpoint_every=EVERY,
        dtype="float64",
    )
    sim = trial.model_copy(update={"name": "fault-simulate", "backend": "simulate"})
    storage = tmp_path / "train"
    killer = _Killer(storage)
    killer.start()
    configs = [
        {"trial": t.model_dump(mode="json"), "storage_path": str(storage), "max_failures": 1,
         "cpus_per_worker": 1.0, "gpus_per_worker": 0.0}
        for t in (trial, sim)
    ]  # fmt: skip
    try:
        results = tune.Tuner(
            tune.with_resources(trial_driver.trainable, trial_driver.resources),
            param_space={"trial_config": tune.grid_search(configs)},
            # ddp holds 2 CPUs in its worker group (driver: none), simulate 1: both fit in 4
            tune_config=tune.TuneConfig(max_concurrent_trials=2),
            run_config=tune.RunConfig(name="fault", storage_path=str(tmp_path / "tune"), verbose=0),
        ).fit()
    finally:
        killer.stop.set()
        killer.join(timeout=10)

    assert killer.killed is not None, "no worker to kill: did the run start?"
    print(f"\nkilled worker {killer.killed} after {killer.killed_after[-1]}; "
          f"restarted as {sorted(killer.restarted_pids)}")  # fmt: skip
    assert killer.restarted_pids, "Ray Train did not restart the worker group"
    assert not results.errors
    by_backend = {(results[i].config or {})["trial_config"]["trial"]["backend"]: results[i]
                  for i in range(len(results))}
    killed_at = int(killer.killed_after[-1].rsplit("_", 1)[1])
    assert killed_at < UPDATES, "the run had finished before the kill"
    # the same reports as an uninterrupted run outside Ray (simulate: equal to ddp, see the
    # equivalence test); ddp's every evaluation once: checkpoints coincide with evaluations,
    # and the resumed run goes on after its checkpoint instead of reporting it again
    reference: list[dict[str, Any]] = []
    loop.train(trial, LocalWorld(), on_report=lambda m, _: reference.append(m))
    for backend, result in by_backend.items():
        assert result.error is None and result.metrics_dataframe is not None, backend
        history: list[dict[str, Any]] = result.metrics_dataframe.to_dict("records")
        assert [m["update"] for m in history] == list(range(EVERY, UPDATES + 1, EVERY)), backend
        for got, want in zip(history, reference, strict=True):
            for key in [k for k in want if k == "train_loss" or k.startswith("dev_")]:
                assert got[key] == pytest.approx(want[key], rel=RTOL), (backend, key, got["update"])
            # NaN on both sides before a fused trial's first measurement
            assert got["noise_scale"] == pytest.approx(want["noise_scale"], rel=RTOL, nan_ok=True), (
                backend, got["update"])
            for key in ("samples_seen", "epoch", "lr", "status"):
                assert got[key] == want[key], (backend, key, got["update"])
        assert history[-1]["status"] == "completed"
    # simulate: Tune holds the checkpoint of the last report
    final = by_backend["simulate"].checkpoint
    assert final is not None and (Path(final.path) / "state.pt").exists()
    # ddp: rank 0's checkpoints under <storage_path>/<trial name>-<trial id>/checkpoint_<update>,
    # the newest 2 (trial_driver's default), after the restart as before
    metrics = by_backend["ddp"].metrics
    assert metrics is not None
    runs = list(storage.glob(f"{trial.name}-*"))
    assert len(runs) == 1 and runs[0].name.endswith(metrics["trial_id"])
    assert sorted(p.name for p in runs[0].glob("checkpoint_0*")) == [
        f"checkpoint_{UPDATES - EVERY:09d}", f"checkpoint_{UPDATES:09d}"]
    assert metrics["checkpoint_path"].endswith(f"checkpoint_{UPDATES:09d}")
