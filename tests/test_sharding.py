"""Sharding must be DistributedSampler's, cut into updates as trainables.batching counts them."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch.utils.data import DistributedSampler

from trainables.batching import updates_per_epoch
from trainables.sharding import Sharding, shard


def _reference(n: int, world: int, rank: int, seed: int, epoch: int) -> list[int]:
    sampler: DistributedSampler[int] = DistributedSampler(
        torch.arange(n),  # type: ignore[arg-type]
        num_replicas=world,
        rank=rank,
        shuffle=True,
        seed=seed,
        drop_last=False,
    )
    sampler.set_epoch(epoch)
    return list(sampler)


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="rank"):
        shard(10, 4, 4, 0, 0)
    with pytest.raises(ValueError, match="global batch"):
        Sharding(dataset_size=10, world_size=4, per_worker_batch=2, accum_grad=2, seed=0)
    with pytest.raises(ValueError, match="update"):
        Sharding(100, 4, 2, 1, 0).position(0)


@pytest.mark.parametrize(("n", "world"), [(100, 4), (103, 4), (7, 16), (1000, 3)])
@pytest.mark.parametrize("epoch", [0, 3])
def test_shard_is_distributed_sampler(n: int, world: int, epoch: int) -> None:
    shards = [shard(n, world, r, seed=5, epoch=epoch) for r in range(world)]
    assert shards == [_reference(n, world, r, 5, epoch) for r in range(world)]
    # padded by repeating the head: every sample appears, the surplus at most once more
    counts = Counter(i for s in shards for i in s)
    assert set(counts) == set(range(n))
    assert sum(counts.values()) - n == -n % world


@pytest.mark.parametrize(("n", "world", "batch", "accum"), [(103, 4, 5, 1), (103, 4, 3, 2), (64, 16, 1, 2)])
def test_updates_walk_shards_and_drop_the_tail(n: int, world: int, batch: int, accum: int) -> None:
    plan = Sharding(n, world, batch, accum, seed=1)
    upe = updates_per_epoch(n, world, batch, accum)
    assert plan.updates_per_epoch == upe
    for epoch in (0, 1):
        for rank in range(world):
            ref = _reference(n, world, rank, 1, epoch)
            got: list[int] = []
            for j in range(upe):
                mbs = plan.micro_batches(epoch * upe + j + 1, rank)
                assert len(mbs) == accum and all(len(mb) == batch for mb in mbs)
                got += [i for mb in mbs for i in mb]
            # exactly the sampler's order, minus the tail that cannot fill a whole update
            assert got == ref[: upe * batch * accum]


def test_position_and_epochs_differ() -> None:
    plan = Sharding(100, 4, 5, 1, seed=0)  # 25 per shard -> 5 updates per epoch
    assert plan.position(1) == (0, 0)
    assert plan.position(5) == (0, 4)
    assert plan.position(6) == (1, 0)
    assert plan.micro_batches(1, 0) != plan.micro_batches(6, 0)
    assert plan.micro_batches(1, 0) == plan.micro_batches(1, 0)


def test_global_batch_depends_on_world_size_only() -> None:
    """A P-process run asks for its own ranks; the union per update is the same for any P."""
    plan_a, plan_b = Sharding(200, 8, 4, 2, seed=3), Sharding(200, 8, 4, 2, seed=3)
    for update in (1, 7, 13):
        everyone = [plan_a.micro_batches(update, r) for r in range(8)]
        # physical worker 1 of P = 2 plays virtual ranks 4..7, in any order of asking
        half = [plan_b.micro_batches(update, r) for r in reversed(range(4, 8))][::-1]
        assert everyone[4:] == half
