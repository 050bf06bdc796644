"""How a training set is cut into optimizer updates. Pure: no torch, no Ray.

Sharding follows ``torch.utils.data.DistributedSampler(num_replicas=V, drop_last=False)``:
each epoch's permutation is padded (by repeating its head) to a multiple of V, so every virtual
rank holds ``ceil(N / V)`` indices. Each rank cuts its shard into micro-batches of
``per_worker_batch``; an update takes ``accum_grad`` micro-batches from every rank. The tail of
a shard that cannot fill a whole update is dropped, so every update has the same global batch.
"""

from __future__ import annotations

import math


def shard_size(dataset_size: int, world_size: int) -> int:
    return math.ceil(dataset_size / world_size)


def updates_per_epoch(
    dataset_size: int, world_size: int, per_worker_batch: int, accum_grad: int = 1
) -> int:
    """Full optimizer updates in one epoch; 0 when the global batch exceeds the data."""
    for name, value in (
        ("dataset_size", dataset_size),
        ("world_size", world_size),
        ("per_worker_batch", per_worker_batch),
        ("accum_grad", accum_grad),
    ):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, but got {name}={value}")
    return shard_size(dataset_size, world_size) // (per_worker_batch * accum_grad)


def global_batch(world_size: int, per_worker_batch: int, accum_grad: int = 1) -> int:
    return world_size * per_worker_batch * accum_grad
