"""Read a user's real WeNet training YAML or DeepSpeed JSON, verbatim, into our own form.

Only the keys scalesweep uses are taken (and validated later, with the rest of the spec);
everything else in the file (model, encoder, dataset, ZeRO, fp16, ...) is accepted and listed
as ignored, so users can point at their complete training files.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import InputError, Problem
from orchestrator.files import load_mapping

#: WeNet scheduler and optimizer names -> ours
WENET_SCHEDULERS = {"warmuplr": "warmuplr"}
WENET_OPTIMIZERS = {"adam": "adam", "adamw": "adamw", "sgd": "sgd"}
DEEPSPEED_OPTIMIZERS = {"adam": "adam", "adamw": "adamw", "sgd": "sgd"}
#: DeepSpeed optimizer params that only select a kernel; harmless to ignore on plain torch
DEEPSPEED_KERNEL_PARAMS = {"torch_adam", "adam_w_mode", "fused", "bias_correction"}

WENET_USED = ("optim", "optim_conf", "scheduler", "scheduler_conf", "accum_grad", "grad_clip",
              "max_epoch", "dataset_conf")
DEEPSPEED_USED = ("optimizer", "scheduler", "train_micro_batch_size_per_gpu",
                  "gradient_accumulation_steps", "gradient_clipping")


@dataclass
class Recipe:
    """A recipe in the sweep file's own form, with where each value came from."""

    source: str
    kind: str  # "wenet" | "deepspeed" | "scalesweep"
    settings: dict[str, Any] = field(default_factory=dict)  # optimizer, scheduler, training
    origins: dict[str, str] = field(default_factory=dict)  # our path -> the file's own path
    ignored: list[str] = field(default_factory=list)

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
    data = load_mapping(path)
    kind = detect_kind(data)
    recipe = Recipe(source=str(path), kind=kind)
    problems: list[Problem] = []
    if kind == "wenet":
        _read_wenet(data, recipe, problems)
    elif kind == "deepspeed":
        _read_deepspeed(data, recipe, problems)
    else:
        _read_own(data, recipe, problems)
    if problems:
        raise InputError(str(path), problems)
    return recipe


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
            r.put(ours, data[theirs], theirs)
    ds = data.get("dataset_conf")
    if isinstance(ds, dict):
        batch_conf = ds.get("batch_conf")
        if isinstance(batch_conf, dict):
            btype = batch_conf.get("batch_type", "static")
            if btype == "static" and "batch_size" in batch_conf:
                r.put("training.per_worker_batch", batch_conf["batch_size"],
                      "dataset_conf.batch_conf.batch_size")
            elif btype != "static":
                r.ignored.append(f"dataset_conf.batch_conf (batch_type {btype!r}: frames per "
                                 "batch do not map to a sample count; set training.per_worker_batch)")
        elif "batch_size" in ds:  # older WeNet recipes
            r.put("training.per_worker_batch", ds["batch_size"], "dataset_conf.batch_size")
        r.ignored.extend(f"dataset_conf.{k}" for k in sorted(ds) if k not in ("batch_conf", "batch_size"))


def _read_deepspeed(data: dict[str, Any], r: Recipe, problems: list[Problem]) -> None:
    r.ignored = sorted(k for k in data if k not in DEEPSPEED_USED)
    opt = data.get("optimizer")
    if opt is not None:
        if not isinstance(opt, dict):
            problems.append(Problem("optimizer", opt, "must be a mapping with type and params"))
        else:
            name = opt.get("type")
            if not isinstance(name, str) or name.lower() not in DEEPSPEED_OPTIMIZERS:
                rule = f"scalesweep runs {sorted(DEEPSPEED_OPTIMIZERS)}; override it in the sweep"
                problems.append(Problem("optimizer.type", name, rule))
            else:
                r.put("optimizer.type", DEEPSPEED_OPTIMIZERS[name.lower()], "optimizer.type")
            _copy_section(r, problems, opt.get("params") or {}, "optimizer.params", "optimizer",
                          skip=DEEPSPEED_KERNEL_PARAMS)
    sched = data.get("scheduler")
    if sched is not None:
        if not isinstance(sched, dict):
            problems.append(Problem("scheduler", sched, "must be a mapping with type and params"))
        else:
            r.put("scheduler.type", sched.get("type"), "scheduler.type")
            _copy_section(r, problems, sched.get("params") or {}, "scheduler.params", "scheduler")
    for theirs, ours in (
        ("train_micro_batch_size_per_gpu", "training.per_worker_batch"),
        ("gradient_accumulation_steps", "training.accum_grad"),
        ("gradient_clipping", "training.grad_clip"),
    ):
        if theirs in data:
            r.put(ours, data[theirs], theirs)


def _read_own(data: dict[str, Any], r: Recipe, problems: list[Problem]) -> None:
    """Our own form: {optimizer: {...}, scheduler: {...}, training: {...}}."""
    for key, value in data.items():
        if key not in ("optimizer", "scheduler", "training"):
            problems.append(Problem(key, value, "unknown key; expected optimizer, scheduler, training "
                                    "(or a WeNet YAML / DeepSpeed JSON)"))
        else:
            _copy_section(r, problems, value, key, key)
