"""On one CUDA GPU: the built-in loop under nccl DDP makes simulate's updates, and a loop of the
user's written with loop_helpers.VirtualRanks draws the built-in loop's dropout masks.

nccl takes one GPU per rank, so one GPU runs P = 1 (tests/gpu/conftest.py's ``nccl``) playing
V = 4 or 16 virtual ranks: DDP's wrapper, its comm hook and the nccl all-reduce are the real
ones; what P > 1 adds is covered on CPU by tests/integration/test_equivalence_ddp.py (gloo). Tolerances
are that file's (float32 differs by summation order only)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from scalesweep import loop_helpers
from scalesweep.science.batching import updates_per_epoch
from scalesweep.trainables import loop, workloads
from scalesweep.trainables.config import TrialConfig
from scalesweep.trainables.world import DistributedWorld, LocalWorld
from tests.integration.test_equivalence_ddp import (
    ADAM_ONECYCLE,
    FLOAT32_RTOL,
    SGD_WARMUP,
    _assert_same,
    _assert_same_losses,
    _dropout_trial,
    _fused_asr_trial,
    _trial,
)
from tests.unit.test_loop_helpers import _loop_config

pytestmark = pytest.mark.gpu


def _run(trial: TrialConfig, world: Any) -> list[dict[str, Any]]:
    reports: list[dict[str, Any]] = []
    loop.train(trial, world, on_report=lambda m, _: reports.append(m))
    return reports


def _simulate(trial: TrialConfig, device: torch.device | str) -> list[dict[str, Any]]:
    return _run(trial.model_copy(update={"backend": "simulate"}), LocalWorld(device))


def test_nccl_ddp_equals_simulate(nccl: torch.device) -> None:
    cases = [
        _trial(4, 1, 2, ADAM_ONECYCLE, "float64"),
        _trial(4, 1, 1, SGD_WARMUP, "float32"),
        _dropout_trial(1),  # the masks come from reseeding the CUDA generator per micro-batch
        _fused_asr_trial(16, 1, 1, 6),  # fused passes on the GPU, V = 16
    ]
    world = DistributedWorld(nccl)
    for case in cases:
        ddp, sim = _run(case, world), _simulate(case, nccl)
        _assert_same(ddp, sim, case)
        if case.name == _trial(4, 1, 2, ADAM_ONECYCLE, "float64").name:
            # float64 on the GPU is the CPU's computation up to summation order
            _assert_same_losses(ddp, _simulate(case, "cpu"), case)


def _helper_losses(trial: TrialConfig, config: dict[str, Any], device: torch.device) -> list[float]:
    """A user's loop with VirtualRanks around the trial's workload on ``device``: each update's
    mean train loss over the global batch (the built-in loop's train_loss)."""
    workload = workloads.make(trial.workload, trial.workload_options)
    torch.manual_seed(trial.seed)  # the built-in loop's initial model
    model = workload.build_model().to(device)
    optimizer = loop.build_optimizer(model.parameters(), trial.optimizer)
    scheduler = loop_helpers.lr_scheduler(optimizer, config)
    ranks = loop_helpers.VirtualRanks(config, rank=0, physical_workers=1)
    losses = []
    for update in range(1, trial.total_updates + 1):
        optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), dtype=torch.float64, device=device)
        for mb in ranks.passes(model, update):  # no device given: the model's, the GPU
            # the CUDA generator, which draws the dropout masks, got the CPU's seed
            assert torch.cuda.initial_seed() == torch.initial_seed()
            per_sample = workload.loss(model, loop._to_device(workload.train_batch(mb.indices), device))
            (per_sample.sum() * ranks.loss_weight).backward()
            total += per_sample.detach().double().sum()
        optimizer.step()
        scheduler.step()
        losses.append(float(total) / trial.global_batch)
    return losses


def test_a_helper_loop_on_the_gpu_draws_the_builtin_loops_dropout_masks() -> None:
    device = torch.device("cuda", 0)
    trial = _dropout_trial(1).model_copy(update={"backend": "simulate", "dtype": "float32",
                                                 "total_updates": 4})
    size = int(trial.workload_options["train_size"])
    config = {**_loop_config(trial), "train_size": size,
              "updates_per_epoch": updates_per_epoch(size, trial.world_size, trial.per_worker_batch,
                                                     trial.accum_grad)}
    builtin = [m["train_loss"] for m in _simulate(trial, device)]
    helper = _helper_losses(trial, config, device)
    assert helper == pytest.approx(builtin, rel=FLOAT32_RTOL)
    # dropout matters here: without it the losses move by far more than the tolerance
    plain = trial.model_copy(update={"workload_options": {**trial.workload_options, "dropout": 0.0}})
    assert [m["train_loss"] for m in _simulate(plain, device)] != pytest.approx(builtin, rel=1e-3)
