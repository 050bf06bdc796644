"""On one CUDA GPU: fused virtual ranks (scalesweep.trainables.fusion) make the passes of a V = 16
update at least 5x faster than one pass per micro-batch.

What is timed is the update's forward and backward passes (batches already on the GPU,
``torch.cuda.synchronize`` around each), as benchmarks/fusion.py's table 2 on CPU: the loop as
a whole also measures the noise scale unfused at every NOISE_EVERY-th (4th) update, which by
itself bounds the loop's gain at 16 / (3/4 + 16/4) ~ 3.4x at V = 16. The fused budget is
``fuse_max_samples`` = the update's 256 samples, through ``fusion.pass_budget``: on a GPU the
default budget is ``per_worker_batch``, which regroups the samples by length but makes no
fewer passes. The ratio is taken within one run, variants interleaved, median of 7.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import pytest
import torch

from scalesweep.trainables import fusion, loop, workloads
from scalesweep.trainables.config import TrialConfig
from scalesweep.trainables.sharding import Sharding

pytestmark = pytest.mark.gpu
WORLD, BATCH, REPEATS = 16, 16, 7


def test_fused_virtual_ranks_are_5x_faster_than_unfused_at_v16() -> None:
    device = torch.device("cuda", 0)
    options = {"train_size": 1024}
    trial = TrialConfig(name="fusion-gpu", workload="mini_asr", workload_options=options,
                        world_size=WORLD, physical_workers=1, per_worker_batch=BATCH,
                        optimizer={"type": "adam", "lr": 2e-3},
                        scheduler={"type": "warmuplr", "warmup_steps": 8},
                        total_updates=1, eval_every=1, fuse_max_samples=WORLD * BATCH)
    workload = workloads.make("mini_asr", options)
    assert fusion.fusable(workload)
    torch.manual_seed(0)
    model = workload.build_model().to(device)
    sharding = Sharding(workload.train_size(), WORLD, BATCH, 1, 0)
    micro = [list(mb) for v in range(WORLD) for mb in sharding.micro_batches(1, v)]
    indices = [i for mb in micro for i in mb]
    budget = fusion.pass_budget(trial, device)
    fused = fusion.plan_passes(indices, budget, fusion.sample_lengths(workload, indices))
    assert (len(micro), len(fused)) == (16, 1)

    def update(passes: list[list[int]]) -> Callable[[], float]:
        batches = [loop._to_device(workload.train_batch(p), device) for p in passes]

        def run() -> float:
            model.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for batch in batches:
                (workload.loss(model, batch).sum() / len(indices)).backward()
            torch.cuda.synchronize()
            return time.perf_counter() - start

        return run

    variants = {"unfused": update(micro), "fused": update(fused)}
    for run in variants.values():  # warm-up: cuDNN's choices, the allocator, lazy inits
        run(), run()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for rep in range(REPEATS):
        for name in sorted(variants, reverse=rep % 2 == 1):  # interleaved, alternating order
            times[name].append(variants[name]())
    ratio = statistics.median(u / f for u, f in zip(times["unfused"], times["fused"], strict=True))
    print(f"\nV={WORLD} x {BATCH}: unfused {statistics.median(times['unfused']) * 1e3:.1f} ms, "
          f"fused {statistics.median(times['fused']) * 1e3:.1f} ms per update: {ratio:.1f}x")
    assert ratio >= 5.0
