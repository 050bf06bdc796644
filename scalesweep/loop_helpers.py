"""Helpers for your own Ray Train loop, swept by scalesweep (docs/workloads.md, "Your own Ray
Train loop").

A sweep file with ``workload: {train_loop: "pkg.module:function", train_size: N}`` runs the
function as Ray Train's ``train_loop_per_worker(config)``; ``config`` is the trial's row of
``scalesweep plan --json`` (``world_size``, ``per_worker_batch``, ``accum_grad``, ``seed``,
``lr``, ``warmup_steps``, ``updates_per_epoch``, ``total_updates``, ``eval_every``, ...) with
``scheduler`` the resolved schedule spec, plus ``optimizer``, the resolved optimizer, and
``train_size``. Three helpers, each
optional, make such a loop behave exactly as the built-in one:

* :func:`lr_scheduler`: the trial's planned schedule as a torch ``LRScheduler`` (the lr of
  update k after k - 1 calls of ``step()``, to the bit the built-in loop's);
* :class:`VirtualRanks`: V virtual ranks on P <= V workers, as the built-in loop plays them
  (``DistributedSampler`` shards at V, accumulation under DDP's ``no_sync``, each sample's loss
  weighted P / global batch so that an update is the mean over the global batch);
* :func:`report`: the report dict with the contract's keys, sent with ``ray.train.report``,
  and with ``state=`` the loop's state as the trial's checkpoint; :func:`restore` gives that
  state back after a worker restart, a Tune retry or ``scalesweep resume``, and
  :func:`data_position` says where in the data the restored update left off.

The micro-batches' order, their reseed keys, the report's keys and the eval cadence are not
restated here: the built-in loop and these helpers call the same functions
(:mod:`scalesweep.trainables.stepping`).

Only :func:`report`, :func:`restore` and :func:`checkpoint_directory` need Ray (imported when
called); the rest needs torch alone.
"""

from __future__ import annotations

import contextlib
import itertools
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from scalesweep.mlflow_names import DEV_PREFIX
from scalesweep.science import schedules
from scalesweep.trainables import stepping
from scalesweep.trainables.config import loop_schedule
from scalesweep.trainables.sharding import Sharding, virtual_ranks
from scalesweep.trainables.stepping import MicroBatch

__all__ = ["STATE_FILE", "MicroBatch", "PlannedLR", "VirtualRanks", "build_report",
           "checkpoint_directory", "data_position", "eval_due", "lr_scheduler", "planned_schedule",
           "report", "restore"]

#: the file of a checkpoint :func:`report` writes from ``state``
STATE_FILE = "loop_state.pt"
#: scalesweep.trainables.user_loop.SOURCE_KEY (that module imports the planner's modules)
_SOURCE_KEY = "_scalesweep_source"


def planned_schedule(config: Mapping[str, Any]) -> schedules.Schedule:
    """The trial's schedule as a pure function of the update (``.lr(k)``, ``.betas(k)``)."""
    return schedules.build(loop_schedule(config), float(config["optimizer"]["lr"]))


class PlannedLR(torch.optim.lr_scheduler.LRScheduler):
    """The planned schedule as a torch scheduler: after construction and k - 1 calls of
    ``step()`` every param group holds ``lr(k)`` (and, for a schedule that cycles Adam's
    betas, such as DeepSpeed's OneCycle, ``betas(k)`` where the group has ``betas``), exactly
    what the built-in loop sets before update k. Call ``step()`` after ``optimizer.step()``,
    as for any torch scheduler. Its state is the update count alone."""

    def __init__(self, optimizer: torch.optim.Optimizer, schedule: schedules.Schedule,
                 last_epoch: int = -1) -> None:
        self.schedule = schedule  # set first: the base class steps once while it initialises
        #: called with the updates done after each step (the adapters' check of their callback)
        self.after_step: Callable[[int], None] | None = None
        super().__init__(optimizer, last_epoch)

    def lr_at(self, update: int) -> float:
        """The lr update ``update`` (1-based) runs with."""
        return float(self.schedule.lr(update))

    def get_lr(self) -> list[float | torch.Tensor]:
        return [self.lr_at(self.last_epoch + 1) for _ in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float | torch.Tensor]:
        return self.get_lr()

    def step(self, epoch: int | None = None) -> None:
        super().step(epoch)
        stepping.set_betas(self.optimizer, self.schedule.betas(self.last_epoch + 1))
        if self.after_step is not None:
            self.after_step(self.last_epoch)

    def state_dict(self) -> dict[str, Any]:
        # the schedule is rebuilt from the config, the hook by the adapter; only the count is state
        return {k: v for k, v in super().state_dict().items() if k not in ("schedule", "after_step")}


def lr_scheduler(optimizer: torch.optim.Optimizer, config: Mapping[str, Any]) -> PlannedLR:
    """The trial's planned lr schedule on ``optimizer`` (see :class:`PlannedLR`)."""
    return PlannedLR(optimizer, planned_schedule(config))


class VirtualRanks:
    """The virtual ranks this worker plays and their micro-batches, as the built-in loop
    (``scalesweep.trainables.loop``) plays them.

    V = ``config["world_size"]``; P and this worker's rank come from ``torch.distributed``
    (Ray Train's ``TorchTrainer`` initialises it) unless given. Each worker plays a contiguous
    block of V // P or V // P + 1 virtual ranks (``sharding.virtual_ranks``); virtual rank v
    feeds update k the micro-batches ``DistributedSampler(num_replicas=V, rank=v,
    shuffle=True, seed=seed, drop_last=False)`` gives it (``sharding.Sharding``). Weight each
    sample's loss by :attr:`loss_weight` (P / global batch) and sum: DDP's mean over the P
    workers is then the mean over the global batch, whatever the split.
    """

    def __init__(self, config: Mapping[str, Any], *, rank: int | None = None,
                 physical_workers: int | None = None) -> None:
        initialised = dist.is_available() and dist.is_initialized()
        self.physical_workers = physical_workers or (dist.get_world_size() if initialised else 1)
        self.rank = rank if rank is not None else (dist.get_rank() if initialised else 0)
        self.world_size = int(config["world_size"])
        self.accum_grad = int(config.get("accum_grad", 1))
        self.seed = int(config["seed"])
        self.sharding = Sharding(int(config["train_size"]), self.world_size,
                                 int(config["per_worker_batch"]), self.accum_grad, self.seed)
        self.virtual_ranks = virtual_ranks(self.world_size, self.physical_workers, self.rank)
        self.global_batch = self.world_size * int(config["per_worker_batch"]) * self.accum_grad
        #: every sample's loss times this, summed: the update is the global batch's mean
        self.loss_weight = self.physical_workers / self.global_batch

    def micro_batches(self, update: int) -> list[MicroBatch]:
        """This worker's passes of 1-based ``update``, in the built-in loop's order (the same
        function makes them)."""
        return stepping.micro_batches(self.sharding, self.virtual_ranks, update)

    def passes(self, model: torch.nn.Module, update: int, *, reseed: bool = True,
               device: torch.device | str | None = None) -> Iterator[MicroBatch]:
        """:meth:`micro_batches`, each yielded while its forward and backward may run: all but
        the last under ``model.no_sync()`` (a DDP model all-reduces once per update); with
        ``reseed``, torch's global RNG (dropout) seeded per micro-batch from (seed, update,
        virtual rank, micro-batch), as the built-in loop does: the CPU's generator and, for a
        model on a GPU, that GPU's (the current CUDA device, which Ray Train sets to the
        worker's). ``device``: where the model runs; by default its parameters' device."""
        where = torch.device(device) if device is not None else _model_device(model)
        for mb in self.micro_batches(update):
            if reseed:
                stepping.reseed_pass(where, self.seed, update, mb)
            with _no_sync(model) if not mb.last else contextlib.nullcontext():
                yield mb


def _model_device(model: torch.nn.Module) -> torch.device:
    """The device ``model`` runs on: its first parameter's (or buffer's); the CPU for a model
    that holds neither."""
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        return tensor.device
    return torch.device("cpu")


def _no_sync(model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
    """DDP's ``no_sync``; nothing to hold back for a model that is not wrapped (P = 1)."""
    if isinstance(model, DistributedDataParallel):
        return model.no_sync()
    return contextlib.nullcontext()


def eval_due(config: Mapping[str, Any], update: int) -> bool:
    """Whether the built-in loop reports after ``update``: every ``eval_every`` updates and
    after the last."""
    return stepping.report_due(update, eval_every=int(config["eval_every"]),
                               total_updates=int(config["total_updates"]))


def build_report(config: Mapping[str, Any], *, update: int, dev_loss: float,
                 train_loss: float | None = None, lr: float | None = None,
                 **dev_metrics: float) -> dict[str, float]:
    """The report of ``update`` with the contract's keys: ``update``, ``epoch`` (update /
    updates_per_epoch), ``samples_seen`` (update x global_batch), ``dev_loss``, each of
    ``dev_metrics`` as ``dev_<name>``, and ``train_loss`` and ``lr`` when given."""
    out: dict[str, float] = {
        **stepping.report_keys(update, samples_seen=float(update * int(config["global_batch"])),
                               epoch=update / int(config["updates_per_epoch"])),
        stepping.dev_key("loss"): float(dev_loss),
    }
    for name, value in dev_metrics.items():
        out[name if name.startswith(DEV_PREFIX) else stepping.dev_key(name)] = float(value)
    if train_loss is not None:
        out["train_loss"] = float(train_loss)
    if lr is not None:
        out["lr"] = float(lr)
    return out


def report(config: Mapping[str, Any], *, update: int, dev_loss: float,
           train_loss: float | None = None, lr: float | None = None,
           checkpoint: Any = None, state: Mapping[str, Any] | None = None,
           source: str = "loop_helpers", **dev_metrics: float) -> dict[str, float]:
    """:func:`build_report`, sent with ``ray.train.report``. Call it on every worker at the
    same updates: Ray Train V2 wants as many reports from each; rank 0's is the one logged.

    ``state`` (state dicts, the update count, anything ``torch.save`` writes with tensors and
    plain types) becomes the trial's checkpoint: rank 0 saves it to a temporary directory that
    Ray Train copies to the sweep's storage before this returns; :func:`restore` reads it back.
    Or pass your own ``ray.train.Checkpoint`` as ``checkpoint``.

    ``lr`` is the lr the update ran with: the sweep checks it against the planned schedule's
    (and ``update`` against the planned total); a report without it fails the trial.
    ``source`` names the sender for the hint of such a failure (the adapters give theirs)."""
    import ray.train

    if state is not None and checkpoint is not None:
        raise ValueError("report: give state= (saved for you) or checkpoint= (your own "
                         "ray.train.Checkpoint), not both")
    metrics = build_report(config, update=update, dev_loss=dev_loss, train_loss=train_loss,
                           lr=lr, **dev_metrics)
    # what the sweep's report checker reads and takes off (trainables.user_loop.SOURCE_KEY)
    sent = {**metrics, _SOURCE_KEY: source}
    if state is None or ray.train.get_context().get_world_rank() != 0:
        # the other ranks hold the same state under DDP: one copy is the checkpoint
        ray.train.report(sent, checkpoint=checkpoint)
        return metrics
    with tempfile.TemporaryDirectory(prefix="scalesweep-loop-state-") as directory:
        torch.save(dict(state), Path(directory) / STATE_FILE)
        ray.train.report(sent, checkpoint=ray.train.Checkpoint.from_directory(directory))
    return metrics


def restore() -> dict[str, Any] | None:
    """The ``state`` of the trial's latest checkpoint (see :func:`report`), or None when the
    trial has none yet: a first start. After a worker restart, a Tune retry or ``scalesweep
    resume``, Ray Train hands every worker the latest checkpoint rank 0 reported; a checkpoint
    of another shape is refused by name."""
    with checkpoint_directory() as directory:
        if directory is None:
            return None
        path = Path(directory) / STATE_FILE
        if not path.is_file():
            raise FileNotFoundError(
                f"restore: checkpoint {directory} has no {STATE_FILE} (it holds "
                f"{sorted(p.name for p in Path(directory).iterdir())}): restore reads what "
                "report(state=...) saved; read a checkpoint of your own with "
                "checkpoint_directory() or ray.train.get_checkpoint()")
        loaded: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
        return loaded


@contextlib.contextmanager
def checkpoint_directory() -> Iterator[str | None]:
    """A local directory holding the trial's latest checkpoint (``ray.train.get_checkpoint()``,
    there while the context lasts), or None on a first start: for a loop that writes its
    checkpoints its own way (the adapters' ``last_checkpoint`` use it)."""
    import ray.train

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        yield None
        return
    with checkpoint.as_directory() as directory:
        yield directory


def data_position(config: Mapping[str, Any], update: int) -> tuple[int, int]:
    """``(epoch, batches)``: after ``update`` updates the loop is ``batches`` updates into
    epoch ``epoch`` (0-based). A restored loop calls ``sampler.set_epoch(epoch)`` and skips
    ``batches`` updates' worth of its loader, so that it sees the data an uninterrupted trial
    would."""
    epoch, batches = divmod(int(update), int(config["updates_per_epoch"]))
    return epoch, batches
