"""A trial held to ``resources.memory_per_worker`` (trainables/memory_limit.py): Ray reserves it
for each worker, and the loop ends the trial naming memory once its process holds more. The
limits here are set from this process's own resident memory, read before, so the outcome does
not depend on the machine."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from scalesweep.orchestrator.plan.cluster import ClusterInfo
from scalesweep.orchestrator.plan.placement import feasible
from scalesweep.orchestrator.spec.load import load_sweep
from scalesweep.orchestrator.tracking.callback import MEMORY_HINT, memory_note
from scalesweep.trainables import trial_driver
from scalesweep.trainables.config import TrialConfig
from scalesweep.trainables.loop import train
from scalesweep.trainables.memory_limit import GIB, MemoryLimit, WorkerOutOfMemoryError, resident_bytes
from scalesweep.trainables.world import LocalWorld
from tests.support.helpers import SWEEPS

MIB = 2**20


def _resident() -> int:
    held = resident_bytes()
    assert held is not None, "no /proc/self/statm on this machine"
    return held


def test_resident_memory_grows_with_what_the_process_touches() -> None:
    before = _resident()
    ballast = torch.ones(64 * MIB // 4)  # 64 MiB written: every page resident
    assert _resident() - before >= 60 * MIB
    del ballast


def test_the_limit_bites_past_what_is_held_and_not_below() -> None:
    held = _resident()
    MemoryLimit((held + 256 * MIB) / GIB, "roomy").check()
    MemoryLimit(None, "unlimited").check()
    with pytest.raises(WorkerOutOfMemoryError, match=r"trial tight's worker holds .* GiB resident, "
                                                     r"past resources.memory_per_worker \(0.001 GiB\)"):
        MemoryLimit(0.001, "tight").check()


def _trial(**changes: Any) -> TrialConfig:
    base: dict[str, Any] = {
        "name": "ws2-mem", "workload": "mlp_regression", "world_size": 2, "physical_workers": 1,
        "per_worker_batch": 8, "optimizer": {"type": "sgd", "lr": 0.05},
        "scheduler": {"type": "warmuplr", "warmup_steps": 2}, "total_updates": 6, "eval_every": 3,
    }  # fmt: skip
    return TrialConfig(**{**base, **changes})


def test_the_loop_ends_a_trial_past_its_memory_at_its_first_update() -> None:
    reports: list[dict[str, Any]] = []
    with pytest.raises(WorkerOutOfMemoryError, match="trial ws2-mem's worker"):
        train(_trial(memory_per_worker_gb=0.001), LocalWorld("cpu"),
              on_report=lambda metrics, _: reports.append(metrics))
    assert reports == []  # not one eval: it ended at update 1
    roomy = (_resident() + GIB) / GIB
    final = train(_trial(memory_per_worker_gb=roomy), LocalWorld("cpu"), on_report=lambda m, _: None)
    assert final["status"] == "completed"


def test_ray_reserves_the_memory_for_each_worker() -> None:
    simulate = _trial(memory_per_worker_gb=1.5)
    (bundle,) = trial_driver.trial_resources(simulate, 1.0).bundles
    assert bundle == {"CPU": 1.0, "memory": 1.5 * GIB}
    ddp = _trial(memory_per_worker_gb=2.0, backend="ddp", physical_workers=2)
    assert trial_driver.worker_group_resources(ddp, 2.0) == {"CPU": 2.0, "memory": 2.0 * GIB}
    (plain,) = trial_driver.trial_resources(_trial(), 1.0).bundles
    assert plain == {"CPU": 1.0}  # none asked, none reserved


def test_the_plan_sets_it_and_refuses_what_no_node_holds() -> None:
    sweep = load_sweep(str(SWEEPS / "smoke.yaml"), ["resources.memory_per_worker=3"])
    from scalesweep.orchestrator.plan.rows import make_plan

    assert {row.trial.memory_per_worker_gb for row in make_plan(sweep).rows} == {3.0}
    small = ClusterInfo(cpus=8, gpus=0, memory_gb=8.0, where="the cluster at x")
    assert feasible(sweep.spec, "ddp", 2, small) == (True, None)
    assert feasible(sweep.spec, "ddp", 4, small) == (
        False, "physical_workers(4) * memory_per_worker(3) = 12 GiB > 8.0 GiB on the cluster at x")
    big = load_sweep(str(SWEEPS / "smoke.yaml"), ["resources.memory_per_worker=9"]).spec
    assert feasible(big, "simulate", 1, small) == (
        False, "memory_per_worker(9) GiB > 8.0 GiB on the cluster at x")


def test_the_failure_says_to_raise_the_setting_it_went_past() -> None:
    line = "WorkerOutOfMemoryError: trial ws2-mem's worker holds 1.62 GiB resident, past ..."
    note = memory_note(line, line, "1 process (simulate), cpus_per_worker 1, memory_per_worker 1.5 GiB")
    assert note.startswith(f"{MEMORY_HINT} ({line}): the trial's resources were 1 process")
    assert "raise resources.memory_per_worker" in note and "places trials by CPU" not in note
