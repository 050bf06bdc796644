"""Hugging Face ``transformers.Trainer`` under a scalesweep trial (docs/workloads.md, "Hugging
Face Trainer"). Four pieces, for a ``train_loop`` that builds a plain ``Trainer``:

* :func:`training_arguments`: ``TrainingArguments`` from the trial's config (batch, accumulation,
  ``max_steps`` = total_updates, eval every ``eval_every`` updates, seed, lr, gradient clipping
  as planned; a save at every evaluation; no reporting, no warmup or schedule of HF's own),
  and the loss made to mean the same at every world size for the given model
  (:func:`loss_counts_items`);
* :func:`optimizers`: ``(optimizer, scheduler)`` for ``Trainer(optimizers=...)``: the sweep's
  optimizer (weight decay on the parameters HF's Trainer decays) and the planned schedule, so
  the trial's lr and warmup replace the script's (:func:`lr_scheduler` alone for an optimizer
  of your own);
* :class:`ReportCallback`: at every evaluation, ``eval_loss`` reported with update =
  ``state.global_step``, the lr that update ran with and the training loss, and the Trainer's
  checkpoint of that step as the trial's checkpoint;
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
import functools
import inspect
import os
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from typing import Any, cast

import torch
from transformers import (
    Trainer,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)

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

__all__ = ["ReportCallback", "last_checkpoint", "loss_counts_items", "lr_scheduler", "optimizers",
           "training_arguments"]

#: what ``Trainer`` passes a model whose forward takes loss kwargs: the labels counted over
#: the update's global batch
ITEMS_KWARG = "num_items_in_batch"


def _trainer_passes_item_count(model: torch.nn.Module) -> bool:
    """The Trainer's own rule (``Trainer.__init__``, ``model_accepts_loss_kwargs``): the model's
    ``accepts_loss_kwargs`` where it has one, else whether its ``forward`` takes ``**kwargs``."""
    if hasattr(model, "accepts_loss_kwargs"):
        return bool(model.accepts_loss_kwargs)
    return any(p.kind == inspect.Parameter.VAR_KEYWORD
               for p in inspect.signature(model.forward).parameters.values())


def _probe_item_count(model: torch.nn.Module) -> bool | None:
    """Whether the model's loss on its own ``dummy_inputs`` changes with ``num_items_in_batch``
    (token-level labels tried first, then one label per sequence), or None when no forward
    with labels runs. Eval mode without gradients: no dropout draws, no state changed."""
    inputs = getattr(model, "dummy_inputs", None)
    if not isinstance(inputs, dict) or "input_ids" not in inputs:
        return None
    device = next(model.parameters()).device
    ids = inputs["input_ids"].to(device)
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    if not isinstance(vocab, int) or int(ids.max()) >= vocab:
        return None
    rows = ids.shape[0]
    candidates = [ids, torch.zeros(rows, dtype=torch.long, device=device),
                  torch.zeros(rows, dtype=torch.float, device=device)]
    training = model.training
    model.eval()
    try:
        # a candidate of the wrong shape may warn (broadcasting) before it fails or runs
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for labels in candidates:
                try:
                    losses = [model(input_ids=ids, labels=labels,
                                    **{ITEMS_KWARG: torch.tensor(n, device=device)}).loss
                              for n in (7, 14)]
                except Exception:  # labels of another shape or type: the next candidate
                    continue
                if all(isinstance(loss, torch.Tensor) for loss in losses):
                    return not torch.allclose(losses[0], losses[1])
    finally:
        model.train(training)
    return None


def loss_counts_items(model: torch.nn.Module) -> bool:
    """Whether the Trainer will hand ``model`` ``num_items_in_batch`` and its loss divides by
    it (a causal LM's token-level loss). The Trainer then scales the loss by the number of
    processes (``average_tokens_across_devices``) and does not divide it by the accumulation
    steps: right for such a loss, which sums over its tokens, and a loss ``world_size x accum_grad``
    times too large for one that is a mean of its own (``BertForSequenceClassification``,
    whose ``forward`` takes ``**kwargs`` but whose loss ignores them).

    Decided as the Trainer decides whether to pass it (``accepts_loss_kwargs``, else
    ``**kwargs`` in ``forward``; an explicit ``accepts_loss_kwargs`` is taken as the model's
    word), then by a forward on the model's ``dummy_inputs`` with two item counts; refused by
    name when neither tells."""
    if not _trainer_passes_item_count(model):
        return False
    if "accepts_loss_kwargs" in vars(model) or hasattr(type(model), "accepts_loss_kwargs"):
        return True  # declared True: the model (or its author) says its loss uses the count
    probed = _probe_item_count(model)
    if probed is None:
        raise AdapterConfigError(
            f"training_arguments model={type(model).__name__}: cannot tell whether its loss "
            f"divides by {ITEMS_KWARG} (its forward takes **kwargs, and no forward on its "
            "dummy_inputs with labels ran); the Trainer scales such a loss by the number of "
            "processes, so say which it is before training_arguments: "
            "model.accepts_loss_kwargs = True (the loss sums and divides by the count, as a "
            "causal LM's) or False (the loss is a mean of its own)")
    return probed


def _name_causal_loss(model: torch.nn.Module) -> None:
    """A model whose class name maps to no loss (``GPT2LMHeadModel``: ``loss_type`` None) still
    computes transformers' causal LM loss, which shifts its labels; the Trainer counts the
    items of the shifted labels only when ``loss_type`` names that loss, and otherwise divides
    the sum over L - 1 positions by L. Naming it makes the loss the model's own token mean."""
    from transformers.loss.loss_utils import ForCausalLMLoss

    config = getattr(model, "config", None)
    if (getattr(model, "loss_type", "") is None and not getattr(config, "is_encoder_decoder", False)
            and getattr(model, "loss_function", None) is ForCausalLMLoss):
        cast(Any, model).loss_type = "ForCausalLM"


def training_arguments(config: Mapping[str, Any], model: torch.nn.Module,
                       output_dir: str | None = None, **overrides: Any) -> TrainingArguments:
    """The trial's ``TrainingArguments`` for training ``model``. ``output_dir``: a fresh
    temporary directory unless given (the Trainer saves its checkpoints there; Ray Train copies
    each to the sweep's storage). The Trainer saves at every evaluation (``save_steps`` =
    ``eval_every``; give a multiple of it to save less often, or ``save_strategy="no"``); it
    keeps one local copy. ``overrides`` are passed on (dataloader workers, dtype, ...); one
    that would change what the plan counts (batch, steps, evals, seed, lr, warmup, clipping,
    the loss's reduction across ranks) is refused.

    The loss (train and eval) means the same at every world size and accumulation: a loss
    that divides by ``num_items_in_batch`` (:func:`loss_counts_items`) gets the count over the
    global batch (``average_tokens_across_devices=True``); for any other, ``model`` is set to
    ``accepts_loss_kwargs = False``, so that the Trainer neither scales it by the number of
    processes nor leaves it undivided by the accumulation steps. Pass the model the Trainer
    trains (a ``compute_loss_func`` of your own must divide by ``num_items_in_batch``)."""
    require_real_ranks(config, "Hugging Face Trainer")
    counts_items = loss_counts_items(model)
    if not counts_items and _trainer_passes_item_count(model):
        # read by Trainer.__init__: nothing passed, nothing scaled
        cast(Any, model).accepts_loss_kwargs = False
    if counts_items:
        _name_causal_loss(model)
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
        # the count over the global batch for a loss that divides by it (see above)
        "average_tokens_across_devices": counts_items,
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
    uses("hf")
    if output_dir is None:  # not the worker's cwd, which several trials may share
        output_dir = tempfile.mkdtemp(prefix="scalesweep-hf-")
    arguments = with_plan("training_arguments", defaults, overrides, planned,
                          _sources(config, planned))
    if arguments["save_strategy"] == "steps" and int(arguments["save_steps"]) % int(config["eval_every"]):
        # a checkpoint travels with a report, and reports come with evaluations
        raise AdapterConfigError(
            f"training_arguments save_steps={arguments['save_steps']!r}: must be a multiple of "
            f"the trial's eval_every ({config['eval_every']}), so that every save comes with an "
            "evaluation's report")
    return TrainingArguments(output_dir=output_dir, **arguments)


def _sources(config: Mapping[str, Any], planned: Mapping[str, Any]) -> dict[str, str]:
    """Why each planned ``TrainingArguments`` value may not be overridden: where it lives in the
    sweep file. The warmup and the schedule are no ``TrainingArguments`` of the trial at all
    (HF's are off) but the sweep's ``scheduler`` block, which :func:`optimizers` applies."""
    schedule = (f"the trial's warmup and lr schedule are not the Trainer's (its own are off: "
                f"{key}={planned[key]!r}) but the sweep's `scheduler` block, where the plan holds "
                f"{config.get('scheduler')!r} (after the warmup rule), applied by "
                "optimizers=hf.optimizers(model, config): change `scheduler` (or the warmup_rule "
                "axis) in the sweep file instead"
                for key in ("warmup_steps", "lr_scheduler_type"))
    where = {
        "learning_rate": ("the trial's `lr`: the sweep's `optimizer.lr`, after its lr rule "
                          "(scaling_rule) where the schedule reads it"),
        "max_steps": "the sweep's `training.epochs` x the updates per epoch (total_updates)",
        "per_device_train_batch_size": "the sweep's `training.per_worker_batch`",
        "gradient_accumulation_steps": "the sweep's `training.accum_grad`",
        "eval_strategy": "the sweep's `training.eval_every_epochs`",
        "eval_steps": "the sweep's `training.eval_every_epochs` (eval_every updates)",
        "seed": "the sweep's seed axis",
        "max_grad_norm": "the sweep's `training.grad_clip` (none: 0, off)",
        "dataloader_drop_last": "the plan's count of full global batches",
        "average_tokens_across_devices": "how the model's loss reduces (loss_counts_items)",
    }
    sources = {key: f"the trial's plan sets it ({planned[key]!r}) from {text}" for key, text in where.items()}
    return {**sources, **dict(zip(("warmup_steps", "lr_scheduler_type"), schedule, strict=True))}


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
    (``config["optimizer"]``, its lr the trial's ``lr``) over every trainable parameter, and the
    planned schedule. As HF's Trainer does (``Trainer.get_decay_parameter_names``), biases and
    LayerNorm / norm weights are a second param group without weight decay."""
    # the Trainer's own rule; it reads nothing of the Trainer it is a method of
    decayed = set(Trainer.get_decay_parameter_names(cast(Trainer, None), model))
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [[p for n, p in trainable if n in decayed], [p for n, p in trainable if n not in decayed]]
    first, second = (groups[0], groups[1]) if groups[0] else (groups[1], [])
    optimizer = build_optimizer(iter(first), config["optimizer"])
    if second:
        optimizer.add_param_group({"params": second, "weight_decay": 0.0})
    elif not groups[0]:  # nothing decayed: the one group holds no decay either
        optimizer.param_groups[0]["weight_decay"] = 0.0
    scheduler = lr_scheduler(optimizer, config)
    require_callback(scheduler, "hf")
    return optimizer, scheduler


class ReportCallback(TrainerCallback):
    """Reports ``eval_loss`` of every evaluation with update = ``state.global_step``, plus the
    lr that update ran with, the Trainer's logged training ``loss`` as ``train_loss`` (its mean
    over the updates since the last log, over every rank) and every other ``eval_<name>``
    metric as ``dev_<name>``. Every rank
    evaluates and reports (Ray Train V2 wants as many reports from each worker; rank 0's is
    logged). When the Trainer saves at that step, the report waits for the save and rank 0
    sends the Trainer's ``checkpoint-<step>`` with it (a ``ray.train.Checkpoint``). ``send`` is
    :func:`scalesweep.loop_helpers.report`; give another to use the callback outside a
    trial."""

    def __init__(self, config: Mapping[str, Any], send: Send | None = None) -> None:
        # loop_helpers.report naming this adapter, for the hint of a report that strays
        self.config = dict(config)
        self.send = send or functools.partial(loop_helpers.report, source="hf")
        self.lrs = LrRecord()
        self.reports: list[dict[str, float]] = []
        self._pending: dict[str, Any] | None = None
        self._train_loss: tuple[int, float] | None = None  # (update, the loss logged there)

    def on_train_begin(self, args: TrainingArguments, state: TrainerState,
                       control: TrainerControl, **kwargs: Any) -> None:
        require_world(self.config, int(args.world_size), "the Hugging Face Trainer")
        callback_started("hf")

    def on_pre_optimizer_step(self, args: TrainingArguments, state: TrainerState,
                              control: TrainerControl, **kwargs: Any) -> None:
        self.lrs.before_step(kwargs["optimizer"], state.global_step)

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> None:
        # HF logs the training loss only at its logging steps, and training_arguments turns
        # those off: a log at every evaluation gives each report the mean loss since the last
        if control.should_evaluate:
            control.should_log = True

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: Mapping[str, float] | None = None, **kwargs: Any) -> None:
        if logs and "loss" in logs:
            self._train_loss = (int(state.global_step), float(logs["loss"]))

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
        if self._train_loss is not None and self._train_loss[0] == update:
            report["train_loss"] = self._train_loss[1]
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
