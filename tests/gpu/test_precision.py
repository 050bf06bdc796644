"""On one CUDA GPU: bfloat16 and float16 autocast on CUDA (tests/integration/test_precision.py runs them on
CPU), under nccl DDP (P = 1, V = 4, accumulation 2) against simulate on the same GPU, with that
file's workload hooks and tolerances; and a float16 overflow skipped by CUDA's GradScaler."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from scalesweep.trainables import loop
from scalesweep.trainables.config import TrialConfig
from scalesweep.trainables.world import DistributedWorld, LocalWorld
from tests.integration.test_precision import (
    BF16_RTOL,
    FP16_RTOL,
    SGD_CLIP,
    _config,
    _Hooked,
    _losses,
    _max_rel,
    _workload_for,
)

pytestmark = pytest.mark.gpu


def _run(trial: TrialConfig, world: Any) -> tuple[list[dict[str, Any]], _Hooked]:
    workload = _workload_for(trial, 1, 0)
    reports: list[dict[str, Any]] = []
    loop.train(trial, world, on_report=lambda m, _: reports.append(m), workload=workload)
    return reports, workload


def _simulate(trial: TrialConfig, device: torch.device) -> tuple[list[dict[str, Any]], _Hooked]:
    return _run(trial.model_copy(update={"backend": "simulate"}), LocalWorld(device))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_mixed_precision_on_cuda_autocasts_and_nccl_ddp_equals_simulate(
        nccl: torch.device, dtype: str) -> None:
    trial = _config(name=f"gpu-{dtype}", backend="ddp", physical_workers=1, optimizer=SGD_CLIP,
                    grad_clip=1.0, total_updates=30, eval_every=10, dtype=dtype)
    ddp, hooked = _run(trial, DistributedWorld(nccl))
    assert hooked.model is not None
    assert {p.device.type for p in hooked.model.parameters()} == {"cuda"}
    assert hooked.forward_dtypes == {getattr(torch, dtype)}  # autocast on CUDA, really
    assert {p.dtype for p in hooked.model.parameters()} == {torch.float32}  # float32 masters
    sim, _ = _simulate(trial, nccl)
    rtol = BF16_RTOL if dtype == "bfloat16" else FP16_RTOL
    assert [m["update"] for m in ddp] == [m["update"] for m in sim] == [10, 20, 30]
    for d, s in zip(ddp, sim, strict=True):
        assert d["lr"] == s["lr"] and d["status"] == s["status"]
        assert d.get("skipped_updates") == s.get("skipped_updates")
        assert _max_rel(_losses(d), _losses(s)) < rtol, d["update"]
    twin, _ = _simulate(trial.model_copy(update={"dtype": "float32"}), nccl)
    assert _max_rel(_losses(ddp[-1]), _losses(twin[-1])) > 1e-6  # not float32 by another name


def test_a_float16_overflow_is_skipped_by_the_cuda_scaler(nccl: torch.device) -> None:
    trial = _config(name="mp-poisoned", backend="ddp", physical_workers=1, fuse="off",
                    total_updates=8, eval_every=1)  # _workload_for poisons update 3
    ddp, _ = _run(trial, DistributedWorld(nccl))
    assert [m["skipped_updates"] for m in ddp] == [0, 0, 1, 1, 1, 1, 1, 1]
    sim, _ = _simulate(trial, nccl)
    assert [m["skipped_updates"] for m in sim] == [m["skipped_updates"] for m in ddp]
