"""The physical world a trial's loop runs in: P processes, each playing a block of the V
virtual ranks (V // P or one more: :func:`scalesweep.trainables.sharding.virtual_ranks`).

The loop talks to its peers only through this interface, so the same loop runs in one process
(:class:`LocalWorld`, the ``simulate`` backend, P = 1) or as one of P DDP processes
(:class:`DistributedWorld`, inside a Ray Train worker whose process group TorchTrainer has
already set up). Ray-free on purpose: the Ray glue lives in :mod:`scalesweep.trainables.ray_train.ray_worker`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel

#: ``observe([(parameter, local gradient), ...])``: see :meth:`World.before_reduce`
GradObserver = Callable[[Sequence[tuple[torch.Tensor, torch.Tensor]]], None]


class World(Protocol):
    """What the loop needs from its physical world."""

    @property
    def rank(self) -> int:
        """This process's physical rank, 0 .. size-1."""
        ...

    @property
    def size(self) -> int:
        """P: the number of physical processes."""
        ...

    @property
    def device(self) -> torch.device: ...

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The module to train through (DDP's wrapper where gradients are all-reduced)."""
        ...

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The plain module behind ``wrap``'s result (to evaluate and checkpoint)."""
        ...

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
        """Backward passes inside accumulate locally and are not all-reduced."""
        ...

    def before_reduce(
        self, model: torch.nn.Module, observe: GradObserver
    ) -> contextlib.AbstractContextManager[None]:
        """The backward that all-reduces inside this context hands ``observe`` this process's
        accumulated gradient just before the all-reduce, as (parameter, gradient) pairs, in one
        or several calls (DDP: one per bucket). Costs no extra communication."""
        ...

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """The element-wise sum over physical ranks (every rank gets the same tensor)."""
        ...

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        """``src``'s tensor, on every rank; the others block until ``src`` sends it."""
        ...


class LocalWorld:
    """P = 1: the whole trial in this process; every collective is the identity."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self._device = torch.device(device)

    @property
    def rank(self) -> int:
        return 0

    @property
    def size(self) -> int:
        return 1

    @property
    def device(self) -> torch.device:
        return self._device

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def before_reduce(self, model: torch.nn.Module, observe: GradObserver) -> Iterator[None]:
        yield  # nothing is reduced: the gradient after the backward is the local one
        observe([(p, p.grad) for p in model.parameters() if p.grad is not None])

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        return tensor


class DistributedWorld:
    """One of P processes of an initialised ``torch.distributed`` default group.

    Collective tensors live on ``device`` because nccl only moves GPU tensors (gloo takes
    either). Gradients are all-reduced by DDP, which averages over P; the loop weights its
    losses by P / global_batch so that the average is the mean over the global batch, however
    many virtual ranks each process plays (the derivation is at ``loop._Trial.loss_weight``).
    """

    def __init__(self, device: torch.device | str) -> None:
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                "DistributedWorld needs an initialised torch.distributed process group "
                "(TorchTrainer sets one up in every Ray Train worker)"
            )
        self._device = torch.device(device)
        self._rank = dist.get_rank()
        self._size = dist.get_world_size()
        self._observe: GradObserver | None = None

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self._size

    @property
    def device(self) -> torch.device:
        return self._device

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        device_ids = [self._device] if self._device.type == "cuda" else None
        # DDP broadcasts rank 0's parameters here; every rank already built the same model
        # from the same seed, so this only guards against a workload that breaks that rule.
        ddp = DistributedDataParallel(model, device_ids=device_ids)
        # PyTorch's own allreduce hook (same arithmetic as DDP's built-in: divide by P, then
        # sum), preceded by a look at the local gradients when before_reduce asks for one.
        ddp.register_comm_hook(None, self._comm_hook)
        return ddp

    def _comm_hook(self, state, bucket):  # type: ignore[no-untyped-def]
        # Unannotated on purpose: DDP checks the hook's annotations against the real classes,
        # and `from __future__ import annotations` would make them strings.
        if self._observe is not None:
            self._observe(list(zip(bucket.parameters(), bucket.gradients(), strict=True)))
        return allreduce_hook(state, bucket)

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model.module if isinstance(model, DistributedDataParallel) else model

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
        if isinstance(model, DistributedDataParallel):
            return _no_sync(model)
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def before_reduce(self, model: torch.nn.Module, observe: GradObserver) -> Iterator[None]:
        if not isinstance(model, DistributedDataParallel):  # not wrapped: nothing is reduced
            yield
            observe([(p, p.grad) for p in model.parameters() if p.grad is not None])
            return
        self._observe = observe
        try:
            yield
        finally:
            self._observe = None

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        out = tensor.to(self._device).clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        out = tensor.to(self._device).clone()
        dist.broadcast(out, src=src)
        return out


@contextlib.contextmanager
def _no_sync(model: DistributedDataParallel) -> Iterator[None]:
    with model.no_sync():
        yield
