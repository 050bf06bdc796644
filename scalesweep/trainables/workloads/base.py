"""The interface between the training loop and a workload.

A workload is made by a factory ``make(options: Mapping[str, Any]) -> Workload``. Built-in
factories are listed in :mod:`scalesweep.trainables.workloads`; a user's own is named in the sweep file as
``"package.module:function"``.

Contract (the loop and the equivalence tests rely on every point):

* ``make`` validates ``options`` and raises ``WorkloadOptionError`` naming the bad option.
  Data is generated deterministically from the options alone (never from the trial seed), and
  nothing is downloaded.
* ``train_size()`` / ``dev_size()`` are cheap: the planner calls them to count updates per epoch.
  Data may be generated lazily, on first use; a workload that does so can offer
  ``prepare()`` (optional, no arguments) to generate it now: a ddp trial makes its workload
  once, calls ``prepare()``, and hands its workers pickled copies through Ray's object store
  (an unpicklable workload is instead made by each worker).
* ``build_model()`` is called after the loop has seeded torch and set the default dtype; it
  returns a fresh model with no side effects beyond consuming torch's global RNG.
* ``train_batch(indices)`` collates the training samples with those indices (in that order)
  into a batch, in the current default dtype.
* ``loss(model, batch)`` returns the per-sample losses, shape ``[n]``. The loop weights and sums
  them so the update's gradient is the mean over the global batch.
* ``evaluate(model, batch)`` returns per-sample values ``[n]`` for each name in ``metrics``
  (``"loss"`` always among them); the loop averages them over the whole dev set and reports
  them as ``dev_<name>``.
* Any randomness inside ``loss`` (dropout, augmentation) must come from torch's global RNG,
  which the loop reseeds per micro-batch from (seed, update, virtual rank, micro-batch) so that
  every backend draws the same numbers.

Optional members (the loop reads them with ``getattr``; a workload without them is valid):

* ``fusable: bool`` (default False): the workload promises that a sample's loss does not depend
  on the other samples of its batch (padding masked, no batch statistics) and that ``loss``
  draws no randomness. Then one process may run all the micro-batches of an update in a few
  bigger passes (:mod:`scalesweep.trainables.fusion`); the gradient is the same sum. May depend on the
  options (``mini_asr`` is fusable only without dropout), so make it a property if it does.
* ``sample_lengths(indices) -> Sequence[int]``: a cheap length per training sample (frames,
  tokens): fused passes group samples of similar length to cut padding.
* ``place(device: torch.device) -> None``: keep the data on the trial's device from now on.
  The loop calls it once per trial, after setting the default dtype and before building the
  model (it must draw no randomness); afterwards ``train_batch`` and ``dev_batches`` return
  batches whose tensors are on ``device``, and the loop moves nothing. Without it, the loop
  copies every batch to the device (a GPU trial's host then makes every batch and copies it
  over). A placed batch should be made without reading device values on the host (keep
  offsets and lengths in numpy, gather on the device): such a read waits for the device.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from scalesweep.errors import ScalesweepError

if TYPE_CHECKING:  # the planner reads workloads (sizes, metrics) without importing torch
    import torch

Direction = Literal["min", "max"]


class WorkloadOptionError(ScalesweepError, ValueError):
    """A workload option is invalid. Carries the option name, its value and the rule."""

    def __init__(self, option: str, value: Any, rule: str) -> None:
        super().__init__(f"workload option {option}={value!r}: {rule}")
        self.option = option
        self.value = value
        self.rule = rule


@runtime_checkable
class Workload(Protocol):
    #: dev metrics and whether lower or higher is better; must contain "loss".
    metrics: Mapping[str, Direction]
    #: defaults in the sweep file's own form, e.g.
    #: {"optimizer": {"type": "adam", "lr": 2e-3}, "scheduler": {"type": "warmuplr",
    #:  "warmup_steps": 500}, "per_worker_batch": 16}
    defaults: Mapping[str, Any]

    def train_size(self) -> int: ...

    def dev_size(self) -> int: ...

    def build_model(self) -> torch.nn.Module: ...

    def train_batch(self, indices: Sequence[int]) -> Any: ...

    def dev_batches(self, batch_size: int) -> Iterator[Any]: ...

    def loss(self, model: torch.nn.Module, batch: Any) -> torch.Tensor: ...

    def evaluate(self, model: torch.nn.Module, batch: Any) -> Mapping[str, torch.Tensor]: ...
