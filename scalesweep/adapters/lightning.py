"""PyTorch Lightning under a scalesweep trial (docs/workloads.md, "Lightning"). Four pieces,
for a ``train_loop`` that builds a plain ``pytorch_lightning.Trainer``:

* :func:`trainer_arguments`: the ``Trainer``'s keyword arguments from the trial's config
  (``max_steps`` = total_updates, validation every ``eval_every`` updates, accumulation,
  gradient clipping as planned; no ``ModelCheckpoint``, loggers or sanity check) and, in a
  Ray Train worker, Ray's ``RayDDPStrategy`` and ``RayLightningEnvironment`` (``ray.train.lightning``),
  which join the process group Ray Train's ``TorchTrainer`` made; pass the built ``Trainer``
  through ``ray.train.lightning.prepare_trainer`` as Ray documents;
* :func:`configure_optimizers`: what ``LightningModule.configure_optimizers`` returns: the
  sweep's optimizer with the planned schedule stepped every update (``interval: "step"``), so
  the trial's lr and warmup replace the module's;
* :class:`ReportCallback`: at the end of every validation, the logged ``val_loss`` reported with
  update = ``trainer.global_step`` and the lr that update ran with, and the ``Trainer``'s
  checkpoint of that moment as the trial's checkpoint;
* :func:`last_checkpoint`: the trial's latest checkpoint for ``trainer.fit(..., ckpt_path=...)``
  after a lost worker, a retry or ``scalesweep resume``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

import pytorch_lightning as pl
import torch
import torch.distributed as dist
from pytorch_lightning.trainer.states import TrainerFn

from scalesweep import loop_helpers
from scalesweep.adapters._common import (
    AdapterConfigError,
    LrRecord,
    Send,
    callback_started,
    require_callback,
    require_real_ranks,
    require_world,
    uses,
    with_plan,
)
from scalesweep.trainables.stepping import build_optimizer

__all__ = ["CHECKPOINT_FILE", "ReportCallback", "configure_optimizers", "last_checkpoint",
           "lr_scheduler_config", "trainer_arguments"]

#: the file of the ``Trainer``'s checkpoint in each checkpoint :class:`ReportCallback` reports
CHECKPOINT_FILE = "lightning.ckpt"
#: the train loss among the values averaged over ranks: no logged name starts so
TRAIN_LOSS = "scalesweep.train_loss"
#: how many batches that loss sums; both are sent by every rank, so the reduced tensor has the
#: same length on every rank even where one has run no batch since the last report
TRAIN_LOSS_BATCHES = "scalesweep.train_loss_batches"


def trainer_arguments(config: Mapping[str, Any], *, ray_train: bool | None = None,
                      **overrides: Any) -> dict[str, Any]:
    """``pl.Trainer(**trainer_arguments(config))``. ``ray_train``: add Ray's strategy and
    cluster environment (default: when ``torch.distributed`` is initialised, as in a Ray Train
    worker). ``overrides`` are passed on; one that would change what the plan counts (steps,
    validation cadence, accumulation, clipping) is refused."""
    require_real_ranks(config, "Lightning")
    uses("lightning")
    accum = int(config.get("accum_grad", 1))
    planned: dict[str, Any] = {
        "max_steps": int(config["total_updates"]),
        "max_epochs": -1,  # max_steps ends the fit, not Lightning's default of 1000 epochs
        # an int val_check_interval counts batches across epochs (check_val_every_n_epoch=None)
        "val_check_interval": int(config["eval_every"]) * accum,
        "check_val_every_n_epoch": None,
        "accumulate_grad_batches": accum,
        "gradient_clip_val": config.get("grad_clip"),
        "num_sanity_val_steps": 0,  # a validation before update 1 is no report of an update
    }
    defaults: dict[str, Any] = {"enable_checkpointing": False, "logger": False,
                                "enable_progress_bar": False, "enable_model_summary": False}
    if ray_train if ray_train is not None else (dist.is_available() and dist.is_initialized()):
        from ray.train.lightning import RayDDPStrategy, RayLightningEnvironment

        defaults.update(strategy=RayDDPStrategy(), plugins=[RayLightningEnvironment()],
                        devices="auto", accelerator="auto")
    return with_plan("trainer_arguments", defaults, overrides, planned)


def lr_scheduler_config(optimizer: torch.optim.Optimizer, config: Mapping[str, Any]
                        ) -> dict[str, Any]:
    """Lightning's scheduler config for the planned schedule on ``optimizer``: stepped after
    every optimizer update, so update k runs with the schedule's lr(k)."""
    scheduler = loop_helpers.lr_scheduler(optimizer, config)
    require_callback(scheduler, "lightning")
    return {"scheduler": scheduler, "interval": "step", "frequency": 1}


def configure_optimizers(module: torch.nn.Module, config: Mapping[str, Any]) -> dict[str, Any]:
    """What ``configure_optimizers`` returns: the sweep's optimizer (``config["optimizer"]``,
    its lr the trial's ``lr``) over the module's parameters, with :func:`lr_scheduler_config`."""
    optimizer = build_optimizer(iter(module.parameters()), config["optimizer"])
    return {"optimizer": optimizer, "lr_scheduler": lr_scheduler_config(optimizer, config)}


@contextlib.contextmanager
def last_checkpoint() -> Iterator[str | None]:
    """The path of the trial's latest Lightning checkpoint (as :class:`ReportCallback`
    reported it), or None on a first start: pass it to ``trainer.fit(..., ckpt_path=...)``,
    which restores the module, the optimizer, the planned schedule's update count and the
    loops' progress. The data position within an epoch is restored only for a stateful
    DataLoader (Lightning's rule), so a restored trial may see the start of that epoch again."""
    with loop_helpers.checkpoint_directory() as directory:
        yield None if directory is None else os.path.join(directory, CHECKPOINT_FILE)


def _mean_over_ranks(values: Mapping[str, float]) -> dict[str, float]:
    """``values`` averaged over the process group's ranks (each rank's validation mean over its
    equal shard: their mean is the whole dev set's at any world size). A value logged with
    ``sync_dist=True`` is the same on every rank already and stays; one logged without would
    be rank 0's shard alone. Every rank calls it with the same names (the module logs them)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return dict(values)
    names = sorted(values)
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" \
        else torch.device("cpu")  # nccl reduces CUDA tensors only
    total = torch.tensor([values[n] for n in names], dtype=torch.float64, device=device)
    dist.all_reduce(total)
    return {n: float(v) / dist.get_world_size() for n, v in zip(names, total.tolist(), strict=True)}


class ReportCallback(pl.Callback):
    """Reports ``monitor`` (``val_loss``, as the module logs it in ``validation_step``), averaged over
    the ranks so that it is the whole dev set's mean at every world size whether or not it was
    logged with ``sync_dist=True``, at the end of every validation, update =
    ``trainer.global_step``, with the lr that update ran with, ``train_loss`` (the mean of
    ``training_step``'s loss over the updates since the last report and over the ranks) and every
    other logged ``val_<name>`` as ``dev_<name>``. Every rank reports (Ray Train V2 wants as many
    reports from each worker; rank 0's is logged). With ``checkpoint`` (the default) every rank
    saves the ``Trainer``'s checkpoint first (``trainer.save_checkpoint``, which rank 0 writes) and
    rank 0 sends it with its report (a ``ray.train.Checkpoint`` holding :data:`CHECKPOINT_FILE`).
    ``send`` is :func:`scalesweep.loop_helpers.report`; give another to use the callback outside a
    trial."""

    def __init__(self, config: Mapping[str, Any], monitor: str = "val_loss",
                 send: Send | None = None, checkpoint: bool = True) -> None:
        self.config, self.monitor = dict(config), monitor
        # loop_helpers.report naming this adapter, for the hint of a report that strays
        self.send = send or functools.partial(loop_helpers.report, source="lightning")
        self.checkpoint = checkpoint
        self.lrs = LrRecord()
        self.reports: list[dict[str, float]] = []
        # training_step's losses since the last report, summed on their device (a float()
        # per batch would wait for the GPU), and how many batches they are
        self._loss_sum: torch.Tensor | None = None
        self._loss_batches = 0

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        require_world(self.config, int(trainer.world_size), "the Lightning Trainer")
        callback_started("lightning")

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                 optimizer: torch.optim.Optimizer) -> None:
        self.lrs.before_step(optimizer, trainer.global_step)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if isinstance(loss, torch.Tensor):
            # automatic optimization hands over the loss divided by accumulate_grad_batches
            scale = trainer.accumulate_grad_batches if pl_module.automatic_optimization else 1
            loss = loss.detach().double() * scale
            self._loss_sum = loss if self._loss_sum is None else self._loss_sum + loss
            self._loss_batches += 1
        # Lightning validates at max_steps only when it is a multiple of val_check_interval;
        # asking it to stop makes it validate once more first, so the last update is reported
        if trainer.global_step >= int(self.config["total_updates"]):
            trainer.should_stop = True

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING:
            return  # a validation before update 1, or trainer.validate(): no update's report
        metrics = trainer.callback_metrics
        if self.monitor not in metrics:
            raise AdapterConfigError(
                f"ReportCallback monitor={self.monitor!r}: must be logged in validation_step "
                f"(self.log({self.monitor!r}, loss, sync_dist=True)); logged: {sorted(metrics)}")
        update = int(trainer.global_step)
        prefix = self.monitor.split("_")[0] + "_"
        values = {name: float(value) for name, value in metrics.items() if name.startswith(prefix)}
        values[TRAIN_LOSS] = 0.0 if self._loss_sum is None else float(self._loss_sum)
        values[TRAIN_LOSS_BATCHES] = float(self._loss_batches)
        self._loss_sum, self._loss_batches = None, 0
        logged = _mean_over_ranks(values)
        loss_sum, batches = logged.pop(TRAIN_LOSS), logged.pop(TRAIN_LOSS_BATCHES)
        train_loss = loss_sum / batches if batches > 0 else None
        extra = {name.removeprefix(prefix): value for name, value in logged.items()
                 if name != self.monitor}
        # send's keyword arguments (loop_helpers.report), not metric names
        report: dict[str, Any] = dict(update=update, dev_loss=logged[self.monitor],
                                      lr=self.lrs.at(update), train_loss=train_loss, **extra)
        if not self.checkpoint:
            self.reports.append(self.send(self.config, **report))
            return
        import ray.train

        with tempfile.TemporaryDirectory(prefix="scalesweep-lightning-") as directory:
            trainer.save_checkpoint(os.path.join(directory, CHECKPOINT_FILE))  # every rank calls it
            if trainer.global_rank != 0:  # rank 0 wrote the checkpoint
                self.reports.append(self.send(self.config, **report))
                return
            self.reports.append(self.send(
                self.config, **report, checkpoint=ray.train.Checkpoint.from_directory(directory)))
