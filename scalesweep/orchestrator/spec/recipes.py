"""Read a user's real WeNet training YAML or DeepSpeed JSON, verbatim, into our own form.

Only the keys scalesweep uses are taken (and validated later, with the rest of the spec);
everything else in the file (model, encoder, dataset, ZeRO, fp16, ...) is accepted and listed
as ignored, so users can point at their complete training files. What is taken means what the
framework makes of it (docs/recipes.md): DeepSpeed's batch triple is resolved as DeepSpeed
resolves it, its ``"Adam"`` is AdamW unless ``adam_w_mode`` is false, and an optimizer key that
would change the maths but that scalesweep cannot honour is refused, never dropped.

DeepSpeed behaviour followed: deepspeedai/DeepSpeed master at commit edaa7221 (version.txt
0.19.6, after v0.19.5): ``runtime/config.py`` ``_set_batch_related_parameters`` and
``_batch_assertion``, ``runtime/engine.py`` ``_configure_basic_optimizer``,
``ops/adam/fused_adam.py`` ``FusedAdam`` defaults.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scalesweep.orchestrator.spec.errors import InputError, Problem
from scalesweep.orchestrator.spec.files import mapping_of, read_text
from scalesweep.science import schedules

#: WeNet scheduler and optimizer names -> ours
WENET_SCHEDULERS = {"warmuplr": "warmuplr"}
WENET_OPTIMIZERS = {"adam": "adam", "adamw": "adamw", "sgd": "sgd"}
#: DeepSpeed lowercases the names of its own optimizers ("Adam", "ADAMW", ...); any other name
#: is looked up in ``torch.optim`` as written, so SGD must be spelled "SGD"
DEEPSPEED_ADAM_FAMILY = ("adam", "adamw")
DEEPSPEED_TORCH_OPTIMIZERS = {"SGD": "sgd"}
#: optimizer params that pick a kernel or memory layout and leave the update's maths alone
DEEPSPEED_ADAM_KERNEL = {"torch_adam", "fused", "foreach", "capturable", "differentiable",
                         "set_grad_none", "fp32_optimizer_states"}
DEEPSPEED_SGD_KERNEL = {"fused", "foreach", "differentiable"}
#: DeepSpeed's defaults where ours (torch's) differ: FusedAdam and DeepSpeedCPUAdam take
#: lr 1e-3 and weight_decay 0 in either mode; torch.optim.AdamW (torch_adam: true) takes 0.01
DEEPSPEED_ADAM_LR = 1e-3
DEEPSPEED_BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu",
                        "gradient_accumulation_steps")

WENET_USED = ("optim", "optim_conf", "scheduler", "scheduler_conf", "accum_grad", "grad_clip",
              "max_epoch", "dataset_conf")
DEEPSPEED_USED = ("optimizer", "scheduler", *DEEPSPEED_BATCH_KEYS, "gradient_clipping")


@dataclass(frozen=True)
class DeepSpeedBatch:
    """DeepSpeed's batch triple as the file gives it (None: absent or null, as DeepSpeed reads it)."""

    train_batch: int | None
    micro: int | None
    accum: int | None

    def any_given(self) -> bool:
        return self.train_batch is not None or self.micro is not None

    def all_given(self) -> bool:
        return None not in (self.train_batch, self.micro, self.accum)


@dataclass(frozen=True)
class ResolvedBatch:
    """The triple after DeepSpeed's resolution at ``world_size``; ``how`` says, per key, where
    each value came from (the file, or the rule that derived it)."""

    train_batch: int
    micro: int
    accum: int
    world_size: int
    how: dict[str, str]


@dataclass
class Recipe:
    """A recipe in the sweep file's own form, with where each value came from."""

    source: str
    kind: str  # "wenet" | "deepspeed" | "scalesweep"
    settings: dict[str, Any] = field(default_factory=dict)  # optimizer, scheduler, training
    origins: dict[str, str] = field(default_factory=dict)  # our path -> the file's own path
    ignored: list[str] = field(default_factory=list)
    #: DeepSpeed only: the batch triple, resolved once the reference world size is known
    batch: DeepSpeedBatch | None = None
    #: the file's text as read and validated: what a run keeps as its copy (the file on disk
    #: may have changed since)
    text: str | None = field(default=None, repr=False)

    def put(self, ours: str, value: Any, theirs: str) -> None:
        section, _, key = ours.partition(".")
        if key:
            self.settings.setdefault(section, {})[key] = value
        else:
            self.settings[section] = value
        self.origins[ours] = theirs


#: top-level keys only a DeepSpeed config has
DEEPSPEED_MARKERS = {"train_micro_batch_size_per_gpu", "train_batch_size",
                     "gradient_accumulation_steps", "gradient_clipping", "zero_optimization",
                     "fp16", "bf16", "steps_per_print"}


def detect_kind(data: dict[str, Any]) -> str:
    """WeNet (``optim``/``scheduler: name``), DeepSpeed (``{"type", "params"}`` blocks), or our
    own form (``optimizer``/``scheduler``/``training`` mappings with flat params)."""
    sched, opt = data.get("scheduler"), data.get("optimizer")
    if any(k in data for k in ("optim", "optim_conf", "scheduler_conf", "accum_grad")) or (
        isinstance(sched, str)
    ):
        return "wenet"
    if DEEPSPEED_MARKERS & set(data) or any(
        isinstance(block, dict) and "params" in block for block in (sched, opt)
    ):
        return "deepspeed"
    return "scalesweep"


def read_recipe(path: str | Path) -> Recipe:
    text = read_text(path)
    data = mapping_of(text, path)
    kind = detect_kind(data)
    recipe = Recipe(source=str(path), kind=kind, text=text)
    problems: list[Problem] = []
    if kind == "wenet":
        _read_wenet(data, recipe, problems)
    elif kind == "deepspeed":
        _read_deepspeed(data, recipe, problems)
    else:
        _read_own(data, recipe, problems)
    if isinstance(recipe.settings.get("scheduler"), dict):
        recipe.settings["scheduler"] = schedules.integral_counts(recipe.settings["scheduler"])
    if problems:
        raise InputError(str(path), problems)
    return recipe


# --- values the originals accept ---------------------------------------------------------------


def _integral(v: Any) -> bool:
    return isinstance(v, float) and math.isfinite(v) and v.is_integer()


def count(value: Any) -> Any:
    """An integral float as an integer (``accum_grad: 4.0``); anything else as it is."""
    return int(value) if _integral(value) else value


# --- DeepSpeed's batch ---------------------------------------------------------------------------


def resolve_batch(batch: DeepSpeedBatch, world_size: int) -> tuple[ResolvedBatch | None, list[Problem]]:
    """DeepSpeed's ``_set_batch_related_parameters`` then ``_batch_assertion`` at ``world_size``
    (its data-parallel world size; in scalesweep the reference world size). Any two of the
    triple give the third, floor-divided as DeepSpeed does; train_batch_size alone or the micro
    batch alone take accumulation 1. None (no problem) when neither train_batch_size nor the
    micro batch is given: the batch then comes from the sweep or the workload."""
    tb, mb, ga, w = batch.train_batch, batch.micro, batch.accum, world_size
    how = {k: "given" for k, v in zip(DEEPSPEED_BATCH_KEYS, (tb, mb, ga), strict=True)
           if v is not None}
    at = f"world size {w}"
    if tb is not None and mb is not None and ga is not None:
        pass
    elif tb is not None and mb is not None:
        ga = tb // mb // w
        how["gradient_accumulation_steps"] = f"train_batch_size {tb} // micro batch {mb} // {at}"
    elif tb is not None and ga is not None:
        mb = tb // w // ga
        how["train_micro_batch_size_per_gpu"] = f"train_batch_size {tb} // {at} // accumulation {ga}"
    elif mb is not None and ga is not None:
        tb = mb * ga * w
        how["train_batch_size"] = f"micro batch {mb} * accumulation {ga} * {at}"
    elif tb is not None:
        ga, mb = 1, tb // w
        how["gradient_accumulation_steps"] = "1 (DeepSpeed's default with train_batch_size alone)"
        how["train_micro_batch_size_per_gpu"] = f"train_batch_size {tb} // {at}"
    elif mb is not None:
        ga, tb = 1, mb * w
        how["gradient_accumulation_steps"] = "1 (DeepSpeed's default with the micro batch alone)"
        how["train_batch_size"] = f"micro batch {mb} * {at}"
    else:
        return None, []
    assert tb is not None and mb is not None and ga is not None
    if mb >= 1 and ga >= 1 and tb == mb * ga * w:
        return ResolvedBatch(tb, mb, ga, w, how), []
    given = (batch.train_batch, batch.micro, batch.accum)  # in the order the path names them
    derived = "; ".join(f"{k} = {how[k]}" for k in DEEPSPEED_BATCH_KEYS if how.get(k) != "given")
    rule = (f"DeepSpeed needs train_batch_size = train_micro_batch_size_per_gpu * "
            f"gradient_accumulation_steps * world size, each >= 1; at the reference {at}: "
            f"{tb} != {mb} * {ga} * {w} = {mb * ga * w}" + (f" ({derived})" if derived else "")
            + "; set reference.world_size to the world size the config was written for")
    return None, [Problem(", ".join(DEEPSPEED_BATCH_KEYS), given, rule)]


def config_world_size(batch: DeepSpeedBatch) -> tuple[int | None, list[Problem]]:
    """The world size a complete triple was written for: train_batch / (micro * accumulation)."""
    assert batch.train_batch is not None and batch.micro is not None and batch.accum is not None
    per = batch.micro * batch.accum
    if batch.train_batch % per == 0:
        return batch.train_batch // per, []
    given = (batch.train_batch, batch.micro, batch.accum)
    return None, [Problem(", ".join(DEEPSPEED_BATCH_KEYS), given,
                          f"train_batch_size {batch.train_batch} is not a whole multiple of "
                          f"micro batch {batch.micro} * accumulation {batch.accum}: no world size "
                          "gives this batch, DeepSpeed would refuse it at any")]


def _read_batch(data: dict[str, Any], problems: list[Problem]) -> DeepSpeedBatch:
    values: list[int | None] = []
    for key in DEEPSPEED_BATCH_KEYS:
        v = count(data.get(key))
        if v is None:
            values.append(None)
        elif isinstance(v, int) and not isinstance(v, bool) and v >= 1:
            values.append(v)
        else:
            rule = ("'auto' is filled in by the Hugging Face Trainer, not by DeepSpeed: give a "
                    "number" if v == "auto" else "must be an integer >= 1")
            problems.append(Problem(key, v, rule))
            values.append(None)
    return DeepSpeedBatch(*values)


# --- the readers ---------------------------------------------------------------------------------


def _copy_section(r: Recipe, problems: list[Problem], conf: Any, theirs: str, ours: str,
                  skip: Collection[str] = ()) -> None:
    """Copy every key of the file's mapping ``theirs`` to ``ours.<key>``, recording its origin.

    Keys in ``skip`` are listed as ignored rather than copied (DeepSpeed's kernel selectors).
    Anything but a mapping is a problem: callers pass ``{}`` where the section may be absent.
    """
    if not isinstance(conf, dict):
        problems.append(Problem(theirs, conf, "must be a mapping"))
        return
    for key, value in conf.items():
        if key in skip:
            r.ignored.append(f"{theirs}.{key}")
        else:
            r.put(f"{ours}.{key}", value, f"{theirs}.{key}")


def _read_wenet(data: dict[str, Any], r: Recipe, problems: list[Problem]) -> None:
    r.ignored = sorted(k for k in data if k not in WENET_USED)
    if "optim" in data:
        name = data["optim"]
        if not isinstance(name, str) or name.lower() not in WENET_OPTIMIZERS:
            problems.append(Problem("optim", name, f"must be one of {sorted(WENET_OPTIMIZERS)}"))
        else:
            r.put("optimizer.type", WENET_OPTIMIZERS[name.lower()], "optim")
    _copy_section(r, problems, data.get("optim_conf") or {}, "optim_conf", "optimizer")
    if "scheduler" in data:
        name = data["scheduler"]
        if not isinstance(name, str) or name.lower() not in WENET_SCHEDULERS:
            rule = f"scalesweep reads WeNet's {sorted(WENET_SCHEDULERS)}; override it in the sweep"
            problems.append(Problem("scheduler", name, rule))
        else:
            r.put("scheduler.type", WENET_SCHEDULERS[name.lower()], "scheduler")
            _copy_section(r, problems, data.get("scheduler_conf") or {}, "scheduler_conf", "scheduler")
    for theirs, ours in (("accum_grad", "training.accum_grad"), ("grad_clip", "training.grad_clip"),
                         ("max_epoch", "training.epochs")):
        if theirs in data:
            r.put(ours, count(data[theirs]) if theirs == "accum_grad" else data[theirs], theirs)
    ds = data.get("dataset_conf")
    if isinstance(ds, dict):
        batch_conf = ds.get("batch_conf")
        if isinstance(batch_conf, dict):
            btype = batch_conf.get("batch_type", "static")
            if btype == "static" and "batch_size" in batch_conf:
                r.put("training.per_worker_batch", count(batch_conf["batch_size"]),
                      "dataset_conf.batch_conf.batch_size")
            elif btype != "static":
                r.ignored.append(f"dataset_conf.batch_conf (batch_type {btype!r}: frames per "
                                 "batch do not map to a sample count; set training.per_worker_batch)")
        elif "batch_size" in ds:  # older WeNet recipes
            r.put("training.per_worker_batch", count(ds["batch_size"]), "dataset_conf.batch_size")
        r.ignored.extend(f"dataset_conf.{k}" for k in sorted(ds) if k not in ("batch_conf", "batch_size"))


def _read_deepspeed_optimizer(opt: dict[str, Any], r: Recipe, problems: list[Problem]) -> None:
    """DeepSpeed's ``_configure_basic_optimizer``: "Adam" and "AdamW" (any case) are one
    optimizer whose decoupled weight decay is on unless the type is "Adam" and ``adam_w_mode``
    is false; any other name is a ``torch.optim`` class, taken with its params as written."""
    name = opt.get("type")
    params = opt.get("params") or {}
    if not isinstance(params, dict):
        problems.append(Problem("optimizer.params", params, "must be a mapping"))
        return
    if isinstance(name, str) and name.lower() in DEEPSPEED_ADAM_FAMILY:
        mode = params.get("adam_w_mode", True)
        if not isinstance(mode, bool):
            problems.append(Problem("optimizer.params.adam_w_mode", mode, "must be true or false"))
            mode = True
        decoupled = name.lower() == "adamw" or mode
        why = ("'AdamW'" if name.lower() == "adamw" else
               f"{name!r} with adam_w_mode {'true' if mode else 'false'}"
               + ("" if "adam_w_mode" in params else " (DeepSpeed's default)"))
        r.put("optimizer.type", "adamw" if decoupled else "adam", f"optimizer.type {why}")
        if "adam_w_mode" in params:
            r.origins["optimizer.type"] += " (optimizer.params.adam_w_mode)"
        bias = params.get("bias_correction", True)
        if bias is not True:
            problems.append(Problem("optimizer.params.bias_correction", bias,
                                    "scalesweep's Adam always corrects the moments' bias "
                                    "(DeepSpeed's default, true); false changes the update"))
        elif "bias_correction" in params:
            r.ignored.append("optimizer.params.bias_correction (true: the default)")
        _copy_section(r, problems, {k: v for k, v in params.items()
                                    if k not in ("adam_w_mode", "bias_correction")},
                      "optimizer.params", "optimizer", skip=DEEPSPEED_ADAM_KERNEL)
        if "lr" not in params:
            r.put("optimizer.lr", DEEPSPEED_ADAM_LR, "DeepSpeed's default lr (FusedAdam)")
        if "weight_decay" not in params:
            torch_adamw = decoupled and params.get("torch_adam") is True
            r.put("optimizer.weight_decay", 0.01 if torch_adamw else 0.0,
                  "DeepSpeed's default weight_decay (" + (
                      "torch.optim.AdamW, torch_adam: true)" if torch_adamw
                      else "FusedAdam and DeepSpeedCPUAdam: 0)"))
    elif isinstance(name, str) and name in DEEPSPEED_TORCH_OPTIMIZERS:
        r.put("optimizer.type", DEEPSPEED_TORCH_OPTIMIZERS[name], f"optimizer.type {name!r} "
              "(torch.optim)")
        _copy_section(r, problems, params, "optimizer.params", "optimizer",
                      skip=DEEPSPEED_SGD_KERNEL)
    else:
        rule = ("scalesweep runs DeepSpeed's 'Adam' and 'AdamW' (any case) and torch's 'SGD' "
                "(DeepSpeed looks torch optimizers up by their exact name); override it in the sweep")
        problems.append(Problem("optimizer.type", name, rule))


def _read_deepspeed(data: dict[str, Any], r: Recipe, problems: list[Problem]) -> None:
    r.ignored = sorted(k for k in data if k not in DEEPSPEED_USED)
    opt = data.get("optimizer")
    if opt is not None:
        if not isinstance(opt, dict):
            problems.append(Problem("optimizer", opt, "must be a mapping with type and params"))
        else:
            _read_deepspeed_optimizer(opt, r, problems)
    sched = data.get("scheduler")
    if sched is not None:
        if not isinstance(sched, dict):
            problems.append(Problem("scheduler", sched, "must be a mapping with type and params"))
        else:
            r.put("scheduler.type", sched.get("type"), "scheduler.type")
            params = sched.get("params") or {}
            if isinstance(params, dict) and "last_batch_iteration" in params:
                last = count(params["last_batch_iteration"])
                if last == -1 and not isinstance(last, bool):
                    r.ignored.append("scheduler.params.last_batch_iteration (-1: the default, "
                                     "start at the first update)")
                else:
                    problems.append(Problem("scheduler.params.last_batch_iteration", last,
                                            "only -1 (start at the first update, the default): "
                                            "every trial starts its schedule from the beginning"))
                params = {k: v for k, v in params.items() if k != "last_batch_iteration"}
            _copy_section(r, problems, params, "scheduler.params", "scheduler")
    r.batch = _read_batch(data, problems)
    # what the file gives directly; sweep.py resolves the rest at the reference world size
    if r.batch.micro is not None:
        r.put("training.per_worker_batch", r.batch.micro, "train_micro_batch_size_per_gpu")
    if r.batch.accum is not None:
        r.put("training.accum_grad", r.batch.accum, "gradient_accumulation_steps")
    clip = data.get("gradient_clipping")
    if clip == 0 and not isinstance(clip, bool):
        r.ignored.append("gradient_clipping (0: no clipping, DeepSpeed's default)")
    elif clip is not None:
        r.put("training.grad_clip", clip, "gradient_clipping")


def _read_own(data: dict[str, Any], r: Recipe, problems: list[Problem]) -> None:
    """Our own form: {optimizer: {...}, scheduler: {...}, training: {...}}."""
    for key, value in data.items():
        if key not in ("optimizer", "scheduler", "training"):
            problems.append(Problem(key, value, "unknown key; expected optimizer, scheduler, training "
                                    "(or a WeNet YAML / DeepSpeed JSON)"))
        else:
            _copy_section(r, problems, value, key, key)
