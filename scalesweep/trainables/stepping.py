"""How a trial steps, in one place: which micro-batches a worker runs for an update and in which
order, the RNG key of each pass, the keys every report starts with, when a report is due, and
the optimizer a spec names.

The built-in loop (:mod:`scalesweep.trainables.loop`) and the helpers for users' own loops
(:mod:`scalesweep.loop_helpers`, and through them the adapters) both call these, so a loop
written with the helpers steps as the built-in one by construction, not only by test
(docs/design.md §1.5).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from scalesweep.mlflow_names import DEV_PREFIX, STEP_KEY
from scalesweep.science.batch_ramp import eval_due
from scalesweep.science.optimizers import OptimizerSpec
from scalesweep.trainables.sharding import Sharding

__all__ = ["EVAL_STREAM", "TRAIN_STREAM", "MicroBatch", "build_optimizer", "dev_key", "eval_due",
           "micro_batches", "report_due", "report_keys", "reseed", "reseed_eval", "reseed_pass",
           "set_betas"]

#: the word after the seed in a reseed key: training passes and evaluation draw apart
TRAIN_STREAM, EVAL_STREAM = 0, 1


@dataclass(frozen=True)
class MicroBatch:
    """One forward/backward pass of an update: a virtual rank's micro-batch."""

    indices: list[int]  # training-set indices, in the order DistributedSampler gives them
    virtual_rank: int
    index: int  # which of the virtual rank's accum_grad micro-batches
    last: bool  # this worker's last pass of the update: the one whose backward all-reduces


def micro_batches(sharding: Sharding, virtual_ranks: Sequence[int], update: int) -> list[MicroBatch]:
    """This worker's passes of 1-based ``update``: each of its virtual ranks in turn, each
    rank's ``accum_grad`` micro-batches in order (what real DDP ranks would run)."""
    steps = [(v, m, mb) for v in virtual_ranks for m, mb in enumerate(sharding.micro_batches(update, v))]
    return [MicroBatch(indices=mb, virtual_rank=v, index=m, last=i == len(steps) - 1)
            for i, (v, m, mb) in enumerate(steps)]


def reseed(device: torch.device, *key: int) -> None:
    """Seed torch's global RNG (CPU, and ``device``'s if a GPU) from a tuple of ints.

    SeedSequence mixes the ints thoroughly. Not ``torch.manual_seed``: on a CPU-only build it
    queues lazy CUDA seeding with a stack trace each call, ~1 ms, paid V*accum_grad times per
    update.
    """
    words = [k & 0xFFFF_FFFF_FFFF_FFFF for k in key]  # SeedSequence takes no negatives
    seed = int(np.random.SeedSequence(words).generate_state(1, np.uint64)[0])
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.manual_seed(seed)  # the current device, which is this worker's


def reseed_pass(device: torch.device, seed: int, update: int, mb: MicroBatch) -> None:
    """Before a training pass: its draws (dropout) depend on V and the update only, never on
    which worker plays the virtual rank."""
    reseed(device, seed, TRAIN_STREAM, update, mb.virtual_rank, mb.index)


def reseed_eval(device: torch.device, seed: int, update: int) -> None:
    """Before an evaluation (which draws nothing by contract, but a workload might)."""
    reseed(device, seed, EVAL_STREAM, update)


def report_due(update: int, *, eval_every: int, total_updates: int, first_update: int = 1) -> bool:
    """Whether a trial reports, with an evaluation, after ``update``: at every
    ``eval_every``-th update counted from ``first_update`` (a batch-size ramp's stage counts
    from its own start) and after the last."""
    return eval_due(update, eval_every, first_update) or update == total_updates


def report_keys(update: int, *, samples_seen: float, epoch: float) -> dict[str, Any]:
    """The keys every report starts with: where in training it is (docs/workloads.md's report
    contract)."""
    return {STEP_KEY: update, "samples_seen": samples_seen, "epoch": epoch}


def dev_key(name: str) -> str:
    """A dev-set metric's report key."""
    return f"{DEV_PREFIX}{name}"


def build_optimizer(params: Iterator[torch.nn.Parameter],
                    spec: OptimizerSpec | Mapping[str, Any]) -> torch.optim.Optimizer:
    """The trial's optimizer (science.optimizers' table names its torch class); a plain mapping,
    a user loop's ``config["optimizer"]``, is its JSON form."""
    if not isinstance(spec, OptimizerSpec):
        spec = OptimizerSpec.from_json(spec)
    optimizer_class: type[torch.optim.Optimizer] = getattr(torch.optim, spec.kind.torch_class)
    return optimizer_class(params, **spec.torch_kwargs())


def set_betas(optimizer: torch.optim.Optimizer, betas: tuple[float, float] | None) -> float | None:
    """A schedule's (beta1, beta2) on every param group that has betas (as DeepSpeed: nothing
    for SGD); returns the beta1 set, None when none was."""
    applied = None
    for group in optimizer.param_groups:
        if betas is not None and "betas" in group:
            group["betas"] = betas
            applied = betas[0]
    return applied
