"""Which training samples each virtual rank feeds into each optimizer update.

The global batch of an update depends on the world size V alone (never on the number of
physical processes P), which is what makes ``simulate``, ``ddp`` and hybrids make the same
updates. Each rank's shard is exactly what ``DistributedSampler(num_replicas=V, rank=v,
shuffle=True, seed=seed, drop_last=False)`` yields after ``set_epoch(epoch)``; we call the
sampler itself (it needs no process group when ``num_replicas`` and ``rank`` are given) so the
order can never drift from what users of plain DDP get. Cutting follows
:mod:`scalesweep.science.batching`: update ``j`` of an epoch takes micro-batches ``j*A .. j*A+A-1`` of
``per_worker_batch`` samples from every shard, and the shard's tail that cannot fill a whole
update is dropped.

Which physical worker plays which virtual ranks (:func:`virtual_ranks`) is the only thing P
changes, and it changes no rank's samples: each worker plays a contiguous block of ranks, the
first ``V mod P`` workers one rank more than the others (V = 16 on P = 3: ranks 0-5, 6-10,
11-15), so the blocks in physical rank order are the virtual ranks in order, whatever P.
"""

from __future__ import annotations

from torch.utils.data import DistributedSampler

from scalesweep.science.batching import updates_per_epoch


def virtual_rank_counts(world_size: int, physical_workers: int) -> tuple[int, ...]:
    """How many virtual ranks each physical worker plays: ``V // P``, and one more for the first
    ``V mod P`` workers (V = 16, P = 3: (6, 5, 5)). The first workers take the extra ranks so
    that physical rank 0, which also evaluates and checkpoints, is never the one left idle."""
    _check_counts(world_size, physical_workers)
    q, r = divmod(world_size, physical_workers)
    return tuple(q + (p < r) for p in range(physical_workers))


def virtual_ranks(world_size: int, physical_workers: int, rank: int) -> range:
    """The virtual ranks physical worker ``rank`` of P plays: a contiguous block of
    :func:`virtual_rank_counts` ``[rank]`` ranks, after those of the workers before it."""
    _check_counts(world_size, physical_workers)
    if not 0 <= rank < physical_workers:
        raise ValueError(f"rank must be in [0, physical_workers), but got {rank=}, {physical_workers=}")
    q, r = divmod(world_size, physical_workers)
    start = rank * q + min(rank, r)  # the workers before it: min(rank, r) of them play q + 1
    return range(start, start + q + (rank < r))


def _check_counts(world_size: int, physical_workers: int) -> None:
    if world_size < 1 or physical_workers < 1:
        raise ValueError(f"world_size and physical_workers must be at least 1, but got "
                         f"{world_size=}, {physical_workers=}")
    if physical_workers > world_size:
        raise ValueError(f"physical_workers({physical_workers}) must be at most "
                         f"world_size({world_size}): a worker would play no virtual rank")


class _Indices:
    """A stand-in dataset: DistributedSampler only asks for ``len``."""

    def __init__(self, size: int) -> None:
        self._size = size

    def __len__(self) -> int:
        return self._size


def shard(dataset_size: int, world_size: int, rank: int, seed: int, epoch: int) -> list[int]:
    """Virtual rank ``rank``'s indices for ``epoch``, padded DistributedSampler-style."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size), but got {rank=}, {world_size=}")
    sampler: DistributedSampler[int] = DistributedSampler(
        _Indices(dataset_size),  # type: ignore[arg-type]
        num_replicas=world_size,
        rank=rank,
        shuffle=True,
        seed=seed,
        drop_last=False,
    )
    sampler.set_epoch(epoch)
    return list(sampler)


class Sharding:
    """Micro-batch indices per (update, virtual rank) for one trial's data plan.

    Updates are numbered from 1, like the schedules: update ``k`` is the ``k``-th optimizer
    step of the whole run, so it lives in epoch ``(k-1) // updates_per_epoch``.
    """

    def __init__(
        self,
        dataset_size: int,
        world_size: int,
        per_worker_batch: int,
        accum_grad: int,
        seed: int,
        *,
        first_update: int = 1,
        first_epoch: int = 0,
    ) -> None:
        # first_update/first_epoch: a stage of a batch-size ramp starts at an epoch boundary
        # part-way through the run (scalesweep.science.batch_ramp); epochs keep their global
        # numbers, so each epoch's order is the sampler's for that epoch whatever came before
        self.first_update, self.first_epoch = first_update, first_epoch
        self.updates_per_epoch = updates_per_epoch(dataset_size, world_size, per_worker_batch, accum_grad)
        if self.updates_per_epoch == 0:
            raise ValueError(
                "the global batch does not fit one shard: ceil(dataset_size / world_size) = "
                f"ceil({dataset_size} / {world_size}) < per_worker_batch({per_worker_batch}) * "
                f"accum_grad({accum_grad})"
            )
        self.dataset_size = dataset_size
        self.world_size = world_size
        self.per_worker_batch = per_worker_batch
        self.accum_grad = accum_grad
        self.seed = seed
        # One epoch's shards at a time: a run walks through epochs in order, and a resumed run
        # simply recomputes the epoch it resumes in.
        self._epoch = -1
        self._shards: dict[int, list[int]] = {}

    def position(self, update: int) -> tuple[int, int]:
        """(epoch, 0-based update within the epoch) of 1-based ``update``."""
        if update < self.first_update:
            raise ValueError(f"update must be at least {self.first_update}, but got {update=}")
        epoch, within = divmod(update - self.first_update, self.updates_per_epoch)
        return self.first_epoch + epoch, within

    def micro_batches(self, update: int, rank: int) -> list[list[int]]:
        """The ``accum_grad`` micro-batches (index lists) virtual rank ``rank`` feeds update."""
        epoch, within = self.position(update)
        if epoch != self._epoch:
            self._epoch, self._shards = epoch, {}
        indices = self._shards.get(rank)
        if indices is None:
            indices = shard(self.dataset_size, self.world_size, rank, self.seed, epoch)
            self._shards[rank] = indices
        b, a = self.per_worker_batch, self.accum_grad
        start = within * a * b
        return [indices[start + m * b : start + (m + 1) * b] for m in range(a)]
