"""Fused virtual ranks: one process runs all the micro-batches of an update in a few passes.

An update's gradient is the weighted sum of its samples' loss gradients, whatever passes
they are grouped in, provided a sample's loss does not depend on the other samples of its
pass and ``loss`` draws no randomness (else the per-micro-batch reseeding, which fixes the
masks, would be needed). A workload promises both with ``fusable = True``; then the loop may
run the v_p * accum_grad micro-batches a process holds per update (v_p: its virtual ranks,
V/P or, when P does not divide V, V // P or one more) as
``ceil(samples / budget)`` passes, and, where the workload offers ``sample_lengths``, group
those samples by length first so that each pass pads to a length close to its own samples'
(the gradient is the same sum; only float summation order differs).

Measured (mini_asr, 256 samples of one V = 16 update, 1 thread, CPU seconds per update on
the 2-core benchmark machine): 16 passes of 16: 0.315; the same 256 unsorted in 1 pass:
0.242, in 2: 0.217; sorted by length and cut into 2, 4, 8, 16 passes: 0.192, 0.184, 0.209,
0.274. Hence the CPU budget below: 64 samples a pass (4 passes at V = 16), and more passes
are not always slower, because padding falls as the passes get more uniform in length.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch

from scalesweep.trainables.config import TrialConfig
from scalesweep.trainables.workloads.base import Workload

#: samples per fused pass on a CPU when ``fuse_max_samples`` is not given (see module doc)
CPU_PASS_SAMPLES = 64


def fusable(workload: Workload) -> bool:
    """Whether ``workload`` promises per-sample losses independent of their pass and no
    randomness in ``loss`` (an optional member: user workloads default to not fusable)."""
    return getattr(workload, "fusable", False) is True


def sample_lengths(workload: Workload, indices: Sequence[int]) -> list[int] | None:
    """The workload's cheap per-sample lengths of these training samples, or None when it
    offers none (then passes keep the sharding's order)."""
    lengths = getattr(workload, "sample_lengths", None)
    if not callable(lengths):
        return None
    out = [int(n) for n in lengths(indices)]
    if len(out) != len(indices):
        raise ValueError(f"sample_lengths returned {len(out)} lengths for {len(indices)} samples")
    return out


def fuses(config: TrialConfig, workload: Workload) -> bool:
    """Whether this trial runs fused updates. A property of the trial, never of P or the
    device, so every backend agrees on it (and so on the noise-scale cadence it sets)."""
    return config.fuse == "auto" and fusable(workload)


def pass_budget(config: TrialConfig, device: torch.device) -> int:
    """Most samples in one fused pass: ``fuse_max_samples``, else from the device.

    CPU: :data:`CPU_PASS_SAMPLES` (the measured best for mini_asr; memory is no limit there),
    and never below ``per_worker_batch``. GPU: ``per_worker_batch``, the pass size the user
    has shown to fit in memory (gradient accumulation usually exists because a bigger one
    does not); fused passes there only regroup samples by length. Give ``fuse_max_samples``
    to go bigger on a GPU with memory to spare.
    """
    if config.fuse_max_samples is not None:
        return config.fuse_max_samples
    if device.type == "cpu":
        return max(CPU_PASS_SAMPLES, config.per_worker_batch)
    return config.per_worker_batch


def plan_passes(
    indices: Sequence[int], max_samples: int, lengths: Sequence[int] | None = None
) -> list[list[int]]:
    """Cut ``indices`` into the fewest passes of at most ``max_samples``, sizes as equal as
    possible; with ``lengths``, sorted by length first (stable, so ties keep their order)."""
    if max_samples < 1:
        raise ValueError(f"max_samples must be at least 1, but got {max_samples=}")
    order = list(indices)
    if lengths is not None:
        ranked = sorted(range(len(order)), key=lengths.__getitem__)
        order = [order[i] for i in ranked]
    count = math.ceil(len(order) / max_samples)
    if not count:
        return []
    cuts = [len(order) * k // count for k in range(count + 1)]
    return [order[a:b] for a, b in itertools.pairwise(cuts)]
