"""Sharding must be DistributedSampler's, cut into updates as scalesweep.science.batching counts them, and
the samples of an update must not depend on the number of physical processes P (any P up to V,
dividing V or not).

scalesweep.trainables.sharding calls DistributedSampler itself, so comparing it with another
DistributedSampler call would test nothing: the reference here is DistributedSampler's algorithm
written out (torch/utils/data/distributed.py: a randperm seeded with ``seed + epoch``, padded
with its own head to a multiple of the world size, then every ``world_size``-th index from
``rank``), checked once against a real sampler over a real dataset.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from torch.utils.data import DistributedSampler, TensorDataset

from scalesweep.science.batching import updates_per_epoch
from scalesweep.trainables.sharding import Sharding, shard, virtual_rank_counts, virtual_ranks


def _sampler_order(n: int, world: int, rank: int, seed: int, epoch: int) -> list[int]:
    """DistributedSampler(shuffle=True, drop_last=False) after set_epoch(epoch), by hand."""
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    order = torch.randperm(n, generator=g).tolist()
    total = math.ceil(n / world) * world
    padded = (order * math.ceil(total / n))[:total]  # the head again, as often as needed
    return padded[rank:total:world]


def _virtual_ranks(world: int, physical: int, p: int) -> range:
    """The virtual ranks physical worker ``p`` of ``physical`` plays: what the loop plays
    (scalesweep.trainables.loop._Trial); tests/integration/test_uneven_ranks.py checks it by hand."""
    return virtual_ranks(world, physical, p)


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="rank"):
        shard(10, 4, 4, 0, 0)
    with pytest.raises(ValueError, match="rank"):
        shard(10, 4, -1, 0, 0)
    with pytest.raises(ValueError, match="global batch"):
        Sharding(dataset_size=10, world_size=4, per_worker_batch=2, accum_grad=2, seed=0)
    with pytest.raises(ValueError, match="update"):
        Sharding(100, 4, 2, 1, 0).position(0)


def test_the_written_out_reference_is_what_a_real_sampler_yields() -> None:
    data = TensorDataset(torch.arange(23.0))
    for world, rank, epoch in ((4, 1, 0), (4, 3, 2), (16, 9, 1), (5, 0, 7)):
        sampler: DistributedSampler[tuple[torch.Tensor, ...]] = DistributedSampler(
            data, num_replicas=world, rank=rank, shuffle=True, seed=11, drop_last=False)
        sampler.set_epoch(epoch)
        assert list(sampler) == _sampler_order(23, world, rank, 11, epoch)


@pytest.mark.parametrize(("n", "world"), [(100, 4), (103, 4), (7, 16), (1000, 3), (5, 2)])
@pytest.mark.parametrize(("seed", "epoch"), [(5, 0), (5, 3), (0, 1)])
def test_shard_follows_distributed_sampler(n: int, world: int, seed: int, epoch: int) -> None:
    shards = [shard(n, world, r, seed=seed, epoch=epoch) for r in range(world)]
    assert shards == [_sampler_order(n, world, r, seed, epoch) for r in range(world)]
    assert {len(s) for s in shards} == {math.ceil(n / world)}
    # padded with the head of the permutation: every sample once, the surplus once more
    counts = Counter(i for s in shards for i in s)
    assert set(counts) == set(range(n))
    surplus = sum(counts.values()) - n
    assert surplus == -n % world
    # interleaved: rank r holds positions r, r + V, ... of one permutation (padding repeats it)
    flat = [shards[k % world][k // world] for k in range(world * len(shards[0]))]
    assert sorted(set(flat[:n])) == list(range(n))


def test_epochs_and_seeds_reshuffle_and_nothing_else_does() -> None:
    base = shard(64, 4, 1, seed=3, epoch=0)
    assert shard(64, 4, 1, seed=3, epoch=0) == base
    assert shard(64, 4, 1, seed=3, epoch=1) != base
    assert shard(64, 4, 1, seed=4, epoch=0) != base
    # the sampler seeds with seed + epoch: (3, 1) and (4, 0) draw the same permutation
    assert shard(64, 4, 1, seed=3, epoch=1) == shard(64, 4, 1, seed=4, epoch=0)


@pytest.mark.parametrize(("n", "world", "batch", "accum"),
                         [(103, 4, 5, 1), (103, 4, 3, 2), (64, 16, 1, 2), (50, 3, 4, 1)])
def test_updates_walk_each_shard_in_order_and_drop_its_tail(n: int, world: int, batch: int,
                                                            accum: int) -> None:
    plan = Sharding(n, world, batch, accum, seed=1)
    upe = updates_per_epoch(n, world, batch, accum)
    assert plan.updates_per_epoch == upe == math.ceil(n / world) // (batch * accum)
    for epoch in (0, 1, 2):
        for rank in range(world):
            got: list[int] = []
            for j in range(upe):
                assert plan.position(epoch * upe + j + 1) == (epoch, j)
                mbs = plan.micro_batches(epoch * upe + j + 1, rank)
                assert len(mbs) == accum and all(len(mb) == batch for mb in mbs)
                got += [i for mb in mbs for i in mb]
            # the sampler's order, minus the tail that cannot fill a whole update
            assert got == _sampler_order(n, world, rank, 1, epoch)[: upe * batch * accum]
        # within an epoch no sample is fed twice except the sampler's padding
        fed = Counter(i for r in range(world) for j in range(upe)
                      for mb in plan.micro_batches(epoch * upe + j + 1, r) for i in mb)
        assert sum(c - 1 for c in fed.values()) <= -n % world


def _per_worker(world: int, physical: int, update_range: range, *, batch: int, accum: int,
                n: int, seed: int) -> list[list[list[int]]]:
    """For each update, what each physical worker feeds, in the loop's order (virtual rank,
    then micro-batch); each worker has its own Sharding, as each process does."""
    workers = [Sharding(n, world, batch, accum, seed) for _ in range(physical)]
    return [[[i for v in _virtual_ranks(world, physical, p)
              for mb in workers[p].micro_batches(update, v) for i in mb]
             for p in range(physical)]
            for update in update_range]


@pytest.mark.parametrize(("world", "batch", "accum", "n"),
                         [(4, 3, 2, 103), (8, 2, 1, 200), (12, 1, 3, 150), (6, 4, 1, 97)])
def test_any_number_of_physical_workers_feeds_the_same_updates(world: int, batch: int,
                                                               accum: int, n: int) -> None:
    seed = 7
    upe = updates_per_epoch(n, world, batch, accum)
    updates = range(1, 2 * upe + 2)  # across two epoch boundaries
    alone = _per_worker(world, 1, updates, batch=batch, accum=accum, n=n, seed=seed)
    global_batch = world * batch * accum
    for k, update in enumerate(updates):
        epoch, j = divmod(update - 1, upe)
        span = slice(j * batch * accum, (j + 1) * batch * accum)
        # P = 1 against the sampler: every virtual rank's next slice, in rank order
        assert alone[k][0] == [i for v in range(world)
                               for i in _sampler_order(n, world, v, seed, epoch)[span]]
        assert len(alone[k][0]) == global_batch
    # every P up to V, dividing V or not
    for physical in range(2, world + 1):
        split = _per_worker(world, physical, updates, batch=batch, accum=accum, n=n, seed=seed)
        per_rank = batch * accum
        for k in range(len(updates)):
            # each worker feeds its virtual ranks' samples (V/P ranks, or V // P and one more),
            # and together, in physical rank order, exactly what one process feeds: the same
            # samples in the same order
            assert [len(part) for part in split[k]] == [
                c * per_rank for c in virtual_rank_counts(world, physical)]
            assert [i for part in split[k] for i in part] == alone[k][0], (physical, k)


def test_a_worker_asked_out_of_order_feeds_the_sampler_order() -> None:
    """A resumed process asks for a later epoch first, and an eval-free jump may go back: the
    per-epoch cache must never serve another epoch's shards."""
    plan = Sharding(120, 4, 3, 2, seed=2)
    upe = plan.updates_per_epoch
    for update in (2 * upe + 1, 1, upe + 2, 2 * upe + 1):
        epoch, j = plan.position(update)
        for v in (3, 0):
            mbs = plan.micro_batches(update, v)
            order = _sampler_order(120, 4, v, 2, epoch)
            assert [i for mb in mbs for i in mb] == order[j * 6 : (j + 1) * 6]
