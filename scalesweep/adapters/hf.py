"""Hugging Face ``transformers.Trainer`` under a scalesweep trial (docs/workloads.md, "Hugging
Face Trainer"). Four pieces, for a ``train_loop`` that builds a plain ``Trainer``:

* :func:`training_arguments`: ``TrainingArguments`` from the trial's config (batch, accumulation,
  ``max_steps`` = total_updates, eval every ``eval_every`` updates, seed, lr, gradient clipping
  as planned; a save at every evaluation; no reporting, no warmup or schedule of HF's own);
* :func:`optimizers`: ``(optimizer, scheduler)`` for ``Trainer(optimizers=...)``: the sweep's
  optimizer and the planned schedule, so the trial's lr and warmup replace the script's
  (:func:`lr_scheduler` alone for an optimizer of your own);
* :class:`ReportCallback`: at every evaluation, ``eval_loss`` reported with update =
  ``state.global_step`` and the lr that update ran with, and the Trainer's checkpoint of that
  step as the trial's checkpoint;
* :func:`last_checkpoint`: the trial's latest checkpoint for ``trainer.train(
  resume_from_checkpoint=...)`` after a lost worker, a retry or ``scalesweep resume``.

Under Ray Train's ``TorchTrainer`` the process group is already initialised (gloo on CPU, nccl
on GPU) and RANK / WORLD_SIZE / LOCAL_RANK are set; the Trainer (through accelerate) joins that
group instead of starting its own, wraps the model in DDP and shards its DataLoaders by rank
(on CPU only with ``use_cpu=True``, which :func:`training_arguments` sets where no GPU is
visible), so nothing Ray-specific is needed beyond the reports (``ray.train.huggingface.transformers.
prepare_trainer`` only matters for Ray Data datasets).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from scalesweep import loop_helpers
from scalesweep.adapters._common import (
    AdapterConfigError,
    LrRecord,
    Send,
    require_real_ranks,
    require_world,
    with_plan,
)
from scalesweep.trainables.loop import build_optimizer

__all__ = ["ReportCallback", "last_checkpoint", "lr_scheduler", "optimizers", "training_arguments"]


def training_arguments(config: Mapping[str, Any], output_dir: str | None = None,
                       **overrides: Any) -> TrainingArguments:
    """The trial's ``TrainingArguments``. ``output_dir``: a fresh temporary directory unless
    given (the Trainer saves its checkpoints there; Ray Train copies each to the sweep's
    storage). The Trainer saves at every evaluation (``save_steps`` = ``eval_every``; give a
    multiple of it to save less often, or ``save_strategy="no"``); it keeps one local copy.
    ``overrides`` are passed on (dataloader workers, dtype, ...); one that would change what
    the plan counts (batch, steps, evals, seed, lr, warmup, clipping) is refused."""
    require_real_ranks(config, "Hugging Face Trainer")
    planned: dict[str, Any] = {
        "per_device_train_batch_size": int(config["per_worker_batch"]),
        "gradient_accumulation_steps": int(config.get("accum_grad", 1)),
        "max_steps": int(config["total_updates"]),
        "eval_strategy": "steps",
        "eval_steps": int(config["eval_every"]),
        "seed": int(config["seed"]),
        "learning_rate": float(config["lr"]),
        # HF clips at 1.0 unless told; the plan's grad_clip (none: 0, off) is the trial's
        "max_grad_norm": float(config.get("grad_clip") or 0.0),
        "warmup_steps": 0,
        "lr_scheduler_type": "constant",  # unused: optimizers() hands the Trainer its scheduler
        # every update is a full global batch, as the plan counts them
        "dataloader_drop_last": True,
    }
    defaults: dict[str, Any] = {
        # a checkpoint with every report: ReportCallback hands the save of an eval's step to
        # Ray Train; the Trainer's own copies are only the way there
        "save_strategy": "steps", "save_steps": int(config["eval_every"]), "save_total_limit": 1,
        "report_to": "none", "disable_tqdm": True, "logging_strategy": "no",
        # accelerate takes RANK/WORLD_SIZE as a CPU process group only when told the run is on
        # CPU; otherwise a CPU worker trains alone (ReportCallback refuses that at train start)
        "use_cpu": not torch.cuda.is_available(),
    }
    if output_dir is None:  # not the worker's cwd, which several trials may share
        output_dir = tempfile.mkdtemp(prefix="scalesweep-hf-")
    arguments = with_plan("training_arguments", defaults, overrides, planned)
    if arguments["save_strategy"] == "steps" and int(arguments["save_steps"]) % int(config["eval_every"]):
        # a checkpoint travels with a report, and reports come with evaluations
        raise AdapterConfigError(
            f"training_arguments save_steps={arguments['save_steps']!r}: must be a multiple of "
            f"the trial's eval_every ({config['eval_every']}), so that every save comes with an "
            "evaluation's report")
    return TrainingArguments(output_dir=output_dir, **arguments)


@contextlib.contextmanager
def last_checkpoint() -> Iterator[str | None]:
    """The directory of the trial's latest checkpoint (the Trainer's ``checkpoint-<step>``,
    as :class:`ReportCallback` reported it), or None on a first start: pass it to
    ``trainer.train(resume_from_checkpoint=...)``, which restores the model, the optimizer, the
    planned schedule's update count, the RNG and the data position."""
    with loop_helpers.checkpoint_directory() as directory:
        yield directory


#: the planned schedule on ``optimizer``; the Trainer steps it after every update, so update k
#: runs with the schedule's lr(k)
lr_scheduler = loop_helpers.lr_scheduler


def optimizers(model: torch.nn.Module, config: Mapping[str, Any]
               ) -> tuple[torch.optim.Optimizer, loop_helpers.PlannedLR]:
    """``(optimizer, scheduler)`` for ``Trainer(optimizers=...)``: the sweep's optimizer
    (``config["optimizer"]``, its lr after the lr rule) over every parameter, and the planned
    schedule."""
    optimizer = build_optimizer(iter(model.parameters()), config["optimizer"])
    return optimizer, lr_scheduler(optimizer, config)


class ReportCallback(TrainerCallback):
    """Reports ``eval_loss`` of every evaluation with update = ``state.global_step``, plus the
    lr that update ran with and every other ``eval_<name>`` metric as ``dev_<name>``. Every rank
    evaluates and reports (Ray Train V2 wants as many reports from each worker; rank 0's is
    logged). When the Trainer saves at that step, the report waits for the save and rank 0
    sends the Trainer's ``checkpoint-<step>`` with it (a ``ray.train.Checkpoint``). ``send`` is
    :func:`scalesweep.loop_helpers.report`; give another to use the callback outside a
    trial."""

    def __init__(self, config: Mapping[str, Any], send: Send = loop_helpers.report) -> None:
        self.config, self.send = dict(config), send
        self.lrs = LrRecord()
        self.reports: list[dict[str, float]] = []
        self._pending: dict[str, Any] | None = None

    def on_train_begin(self, args: TrainingArguments, state: TrainerState,
                       control: TrainerControl, **kwargs: Any) -> None:
        require_world(self.config, int(args.world_size), "the Hugging Face Trainer")

    def on_pre_optimizer_step(self, args: TrainingArguments, state: TrainerState,
                              control: TrainerControl, **kwargs: Any) -> None:
        self.lrs.before_step(kwargs["optimizer"], state.global_step)

    def on_evaluate(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    metrics: Mapping[str, float] | None = None, **kwargs: Any) -> None:
        metrics = metrics or {}
        if "eval_loss" not in metrics:
            raise KeyError(f"evaluation at update {state.global_step} gave no eval_loss (metrics: "
                           f"{sorted(metrics)}): the model must return a loss, with labels in "
                           "the eval dataset")
        update = int(state.global_step)
        extra = {name.removeprefix("eval_"): float(value) for name, value in metrics.items()
                 if name.startswith("eval_") and name != "eval_loss"
                 and isinstance(value, int | float) and not name.endswith(("_runtime", "_per_second"))}
        # send's keyword arguments (loop_helpers.report), not metric names
        report: dict[str, Any] = dict(update=update, dev_loss=float(metrics["eval_loss"]),
                                      lr=self.lrs.at(update), **extra)
        if control.should_save:  # the Trainer saves this step next: report with its checkpoint
            self._pending = report
        else:
            self.reports.append(self.send(self.config, **report))

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                **kwargs: Any) -> None:
        if self._pending is None:  # a save without an evaluation: training_arguments refuses it
            return
        report, self._pending = self._pending, None
        if not state.is_world_process_zero:  # rank 0's output_dir holds the checkpoint
            self.reports.append(self.send(self.config, **report))
            return
        import ray.train

        directory = os.path.join(str(args.output_dir), f"checkpoint-{state.global_step}")
        self.reports.append(self.send(self.config, **report,
                                      checkpoint=ray.train.Checkpoint.from_directory(directory)))
