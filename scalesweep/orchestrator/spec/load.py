"""Sweep file -> validated ``Sweep``: shape (pydantic), then every cross-field rule, with all
problems reported together. Nothing here starts Ray or touches MLflow."""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import yaml
from pydantic import BaseModel, ValidationError

from scalesweep.mlflow_names import DEV_PREFIX
from scalesweep.orchestrator.spec import reference_job, replicates, train_loop
from scalesweep.orchestrator.spec.errors import InputError, Problem, join_path
from scalesweep.orchestrator.spec.files import mapping_of, parse_yaml, read_text
from scalesweep.orchestrator.spec.recipes import (
    Recipe,
    ResolvedBatch,
    config_world_size,
    read_recipe,
    resolve_batch,
)
from scalesweep.orchestrator.spec.schema import (
    DISTRIBUTIONS,
    FIXED_AXES,
    FREE_AXIS_SECTIONS,
    OLD_TRIAL_SCHEDULER_KEY,
    RULE_AXES,
    TRAINING_AXES,
    TRIAL_SCHEDULER_RENAMED,
    SweepSpec,
)
from scalesweep.orchestrator.spec.training import Training
from scalesweep.science import batch_ramp, optimizers, schedules
from scalesweep.science.batching import updates_per_epoch
from scalesweep.science.scaling import OPTIMIZER_RULES, WARMUP_RULES, is_explicit_factor
from scalesweep.trainables.workloads import UnknownWorkloadError, resolve
from scalesweep.trainables.workloads.base import Direction, Workload, WorkloadOptionError

#: used when neither the sweep, the recipe nor the workload says
BUILTIN_DEFAULTS: dict[str, Any] = {
    "optimizer": {"type": "adam", "lr": 1e-3},
    "scheduler": {"type": "constant"},
    "training": {"accum_grad": 1, "eval_every_epochs": 0.5},
}
TRAINING_FROM_WORKLOAD = ("per_worker_batch", "epochs", "eval_every_epochs", "accum_grad")
#: under the library's logger ("scalesweep"): with no logging set up, Python prints a warning on
#: stderr, which is where the CLI's deprecation messages belong
log = logging.getLogger(__name__)


@dataclass
class Settings:
    """Optimizer, scheduler and loop settings, each value with where it came from: the layers
    (built-in, workload, recipe, sweep, an axis value) merged, before they are judged. The
    scheduler is judged once, at load, into ``Sweep.scheduler``."""

    optimizer: dict[str, Any] = field(default_factory=dict)
    scheduler: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)

    def layer(self, section: str, values: Mapping[str, Any], origin: str | Mapping[str, str]) -> None:
        target: dict[str, Any] = getattr(self, section)
        # a different optimizer or scheduler type makes the old type's params meaningless
        if section != "training" and "type" in values and values["type"] != target.get("type"):
            target.clear()
            for key in [k for k in self.origins if k.startswith(section + ".")]:
                del self.origins[key]
        for key, value in values.items():
            target[key] = value
            path = f"{section}.{key}"
            self.origins[path] = origin if isinstance(origin, str) else origin.get(path, "?")
        if section == "scheduler":
            # the one place YAML's counts become integers (`warmup_steps: 25000.0` from a file
            # or an axis): every layer comes through here, and WeNet and DeepSpeed count with
            # integral floats as with integers
            target.update(schedules.integral_counts(target))

    def copy(self) -> Settings:
        return copy.deepcopy(self)

    def where(self, path: str) -> str:
        origin = self.origins.get(path)
        return f"{path} (from {origin})" if origin and origin != "sweep" else path


class WorkloadFacts(Protocol):
    """What the planner reads of a workload: a ``Workload`` of the protocol, or a train_loop's
    sizes and metrics from the sweep file (``train_loop.LoopWorkload``)."""

    @property
    def metrics(self) -> Mapping[str, Direction]: ...

    @property
    def defaults(self) -> Mapping[str, Any]: ...

    def train_size(self) -> int: ...


@dataclass
class Sweep:
    spec: SweepSpec
    source: str
    base: Settings  # before axes
    workload: WorkloadFacts
    recipe: Recipe | None
    reference_world_size: int | None
    notes: list[str] = field(default_factory=list)
    #: a DeepSpeed recipe's train_batch_size / micro batch / accumulation as DeepSpeed resolves
    #: them at the reference world size (recipes.resolve_batch); None for other recipes
    deepspeed_batch: ResolvedBatch | None = None
    #: the sweep file's text as read and validated (``load_sweep``): what a run keeps as its
    #: copy for ``resume``, whatever the file on disk holds by then; None for a mapping's
    text: str | None = field(default=None, repr=False)
    #: the sweep's schedule before the axes (``base.scheduler``), judged once at load into
    #: its typed record for all its trials
    scheduler: schedules.ScheduleSpec = field(kw_only=True)
    #: the sweep's loop settings before the axes (``base.training``), judged at load, typed
    training: Training = field(kw_only=True)

    @property
    def ignored(self) -> list[str]:
        return list(self.recipe.ignored) if self.recipe else []


def parse_overrides(items: Sequence[str]) -> list[tuple[str, Any]]:
    """``--set a.b=VALUE`` -> (path, YAML value), read as the sweep file is (``1e-3`` a float)."""
    out: list[tuple[str, Any]] = []
    problems: list[Problem] = []
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            problems.append(Problem("--set", item, "must be KEY=VALUE with a dotted key"))
            continue
        try:
            value = parse_yaml(raw) if raw.strip() else None
        except yaml.YAMLError as exc:
            what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            problems.append(Problem(f"--set {key}", raw, f"value is not valid YAML ({what})"))
            continue
        out.append((key.strip(), value))
    if problems:
        raise InputError("--set", problems)
    return out


def apply_overrides(data: dict[str, Any], overrides: Iterable[tuple[str, Any]]) -> list[Problem]:
    """Set dotted paths in the raw file. Axis keys may themselves contain dots
    (``axes.optimizer.lr``): below ``axes`` the rest of the path is one key."""
    problems: list[Problem] = []
    for path, value in overrides:
        parts = path.split(".")
        if parts[0] == "axes" and len(parts) > 2:
            parts = ["axes", ".".join(parts[1:])]
        node: Any = data
        for i, part in enumerate(parts[:-1]):
            if not isinstance(node, dict):
                break
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                problems.append(Problem(f"--set {path}", child,
                                        f"{'.'.join(parts[: i + 1])} is not a mapping"))
                break
            node = child
        else:
            node[parts[-1]] = value
    return problems


def _model_at(model: type[BaseModel], loc: Sequence[str | int]) -> type[BaseModel] | None:
    """The pydantic model class a validation error location points into (for allowed keys)."""
    current: type[BaseModel] | None = model
    for part in loc:
        if current is None or not isinstance(part, str) or part not in current.model_fields:
            return None
        ann = current.model_fields[part].annotation
        candidates = [ann, *getattr(ann, "__args__", ())]
        current = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
    return current


#: how pydantic names the member of a union that an error is about; not part of the path
_UNION_TAGS = ("int", "str", "float", "bool", "list", "dict", "none")


def _is_union_tag(part: str | int) -> bool:
    return isinstance(part, str) and ("[" in part or part in _UNION_TAGS)


def pydantic_problems(exc: ValidationError, prefix: str = "") -> list[Problem]:
    by_path: dict[str, Problem] = {}
    for err in exc.errors():
        loc = [p for p in err["loc"] if not _is_union_tag(p)]
        path = join_path(prefix, *loc)
        if err["type"] == "extra_forbidden":
            parent = _model_at(SweepSpec, loc[:-1]) if not prefix else None
            allowed = f"; allowed: {sorted(parent.model_fields)}" if parent else ""
            rule = f"unknown key{allowed}"
        elif err["type"] == "missing":
            rule = "is required"
        else:
            rule = err["msg"].removeprefix("Value error, ")
        value = None if err["type"] == "missing" else err.get("input")
        if path in by_path:  # one value failed every member of a union: say what is allowed
            rule = f"{by_path[path].rule}; or {rule}"
        by_path[path] = Problem(path, value, rule)
    return list(by_path.values())


def load_sweep(path: str | Path, overrides: Sequence[str] = ()) -> Sweep:
    """The sweep file at ``path``, read once: the text validated is the text kept
    (``Sweep.text``), so an edit after this call cannot reach a run started from it."""
    text = read_text(path)
    sweep = sweep_of(mapping_of(text, path), path, overrides)
    sweep.text = text
    return sweep


def sweep_of(data: dict[str, Any], path: str | Path, overrides: Sequence[str] = ()) -> Sweep:
    """A sweep file's mapping, as ``load_mapping`` reads it, validated with its overrides;
    ``path`` names it in the problems and anchors its relative paths (a recipe's)."""
    src = str(path)
    parsed = parse_overrides(overrides)
    problems = apply_overrides(data, parsed)
    if problems:
        raise InputError(src, problems)
    _deprecations(data, src)
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as exc:
        # the independent checks still run, so the user sees everything at once
        raise InputError(src, _dedupe(pydantic_problems(exc) + _raw_checks(data))) from None
    # axes the command line replaced: `--set axes.world_size=[4]` narrows a study to debug it,
    # and the file's exclude entries for the values it dropped then exclude nothing
    narrowed = {key.removeprefix("axes.") for key, _ in parsed if key.startswith("axes.")}
    if any(key == "axes" for key, _ in parsed):
        narrowed |= set(FIXED_AXES) | set(RULE_AXES) | set(spec.axes.free_axes())
    adaptive = replicates.problems(spec)
    if adaptive:
        raise InputError(src, adaptive)
    sweep = _check(replicates.expand(spec), src, Path(path), narrowed)
    job_recipe(sweep)  # a job that contradicts its recipe: exit 2 here
    return sweep


def _deprecations(data: Mapping[str, Any], src: str) -> None:
    """A key renamed but still accepted: one warning per load, naming the new key."""
    search = data.get("search")
    if isinstance(search, dict) and OLD_TRIAL_SCHEDULER_KEY in search \
            and "trial_scheduler" not in search:
        log.warning("%s: %s", src, TRIAL_SCHEDULER_RENAMED)


def job_recipe(sweep: Sweep) -> reference_job.ReferenceJob | None:
    """The sweep's reference job, resolved against its recipe."""
    return reference_job.reference_job(sweep.spec, None if sweep.recipe is None else sweep.recipe.settings,
                                       sweep.base.scheduler, sweep.source)


def _raw_checks(data: Mapping[str, Any]) -> list[Problem]:
    """Checks that need no valid spec: the sweep's own optimizer and scheduler blocks."""
    problems: list[Problem] = []
    opt = data.get("optimizer")
    if isinstance(opt, dict) and "type" in opt:
        problems += [Problem(f"optimizer.{p.path}", p.value, p.rule)
                     for p in optimizers.validate(opt) if not (p.path == "lr" and p.value is None)]
    sched = data.get("scheduler")
    if isinstance(sched, dict) and "type" in sched:
        block = Settings()
        block.layer("scheduler", sched, "sweep")
        problems += [Problem(f"scheduler.{p.field}", p.value, p.rule)
                     for p in schedules.validate(block.scheduler)]
    return problems


def _in_recipe(source: str, p: Problem) -> Problem:
    return Problem(f"recipe {source}" + (f": {p.path}" if p.path else ""), p.value, p.rule)


def recipe_candidates(recipe: str, sweep_path: Path) -> list[Path]:
    """Where a relative recipe path is looked for: the current directory, then the sweep
    file's directory and each of its parents (so ``sweeps/x.yaml`` can name ``recipes/y.yaml``)."""
    p = Path(recipe)
    if p.is_absolute():
        return [p]
    here = sweep_path.resolve().parent
    return [p, *(d / p for d in (here, *here.parents))]


def _check(spec: SweepSpec, src: str, sweep_path: Path, narrowed: set[str] | None = None) -> Sweep:
    """Every check of a parsed sweep, as passes that each add their problems (all are
    reported at once, in this order) and notes."""
    spec = train_loop.with_loop_backend(spec)
    problems: list[Problem] = []
    notes: list[str] = []
    recipe = _load_recipe(spec, sweep_path, problems)
    workload = _make_workload(spec, problems)
    base, ref_ws, ds_batch = _base_settings(spec, workload, recipe, problems, notes)
    judged: list[Problem] = []
    scheduler = _judge_scheduler(base, judged)
    problems.extend(_check_settings(base, judged=judged))
    problems.extend(_check_axes(spec, base, narrowed or set(), notes))
    problems.extend(_check_baseline_values(spec.baseline or {}))
    notes.extend(_baseline_notes(spec))
    if spec.workload.train_loop is not None:
        notes.extend(train_loop.notes(spec))
    problems.extend(_check_physical_workers(spec))
    problems.extend(_check_elastic(spec))
    if workload is not None:
        problems.extend(_check_target(spec, workload))
        problems.extend(_check_plateau(spec, workload))
        problems.extend(_check_batch_fits_shard(spec, base, workload))
    problems.extend(_check_curtail(spec))
    problems.extend(_check_seeds_per_trial(spec, base))
    if problems:
        raise InputError(src, _dedupe(problems))
    assert workload is not None and scheduler is not None
    return Sweep(spec=spec, source=src, base=base, workload=workload, recipe=recipe,
                 reference_world_size=ref_ws, notes=notes, deepspeed_batch=ds_batch,
                 scheduler=scheduler, training=Training.of(base.training))


def _judge_scheduler(base: Settings, problems: list[Problem]) -> schedules.ScheduleSpec | None:
    """The sweep's schedule before the axes, judged once: its record, or None and its problems
    (under their paths and origins)."""
    try:
        return schedules.resolve(base.scheduler)
    except schedules.ScheduleError as exc:
        problems.extend(_schedule_problems(base, exc.problems))
        return None


def _schedule_problems(s: Settings, found: Iterable[schedules.Problem], context: str = ""
                       ) -> list[Problem]:
    return [Problem(s.where(f"scheduler.{p.field}") + context, p.value, p.rule) for p in found]


def _load_recipe(spec: SweepSpec, sweep_path: Path, problems: list[Problem]) -> Recipe | None:
    """The sweep's recipe file, read; None without one or when it cannot be read."""
    if spec.recipe is None:
        return None
    candidates = recipe_candidates(spec.recipe, sweep_path)
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        problems.append(Problem("recipe", spec.recipe, "file not found (looked in the current "
                                f"directory and {sweep_path.resolve().parent} and its parents)"))
        return None
    try:
        return read_recipe(found)
    except InputError as exc:
        problems.extend(_in_recipe(exc.source, p) for p in exc.problems)
        return None


def _make_workload(spec: SweepSpec, problems: list[Problem]) -> WorkloadFacts | None:
    """The workload its factory makes (or a train_loop's sizes and metrics); None (and a
    problem) when it cannot be made."""
    if spec.workload.train_loop is not None:
        return train_loop.make(spec, problems)
    assert spec.workload.name is not None
    try:
        made = resolve(spec.workload.name)(dict(spec.workload.options))
    except UnknownWorkloadError as exc:
        problems.append(Problem("workload.name", spec.workload.name, str(exc)))
        return None
    except WorkloadOptionError as exc:
        problems.append(Problem(f"workload.options.{exc.option}", exc.value, exc.rule))
        return None
    except Exception as exc:  # a user's factory may raise anything; it is still bad input
        problems.append(Problem("workload", spec.workload.name,
                                f"making the workload failed: {type(exc).__name__}: {exc}"))
        return None
    if isinstance(made, Workload):
        return made
    problems.append(Problem("workload.name", spec.workload.name,
                            f"the factory returned {type(made).__name__}, not a Workload "
                            "(see docs/workloads.md)"))
    return None


def _base_settings(spec: SweepSpec, workload: WorkloadFacts | None, recipe: Recipe | None,
                   problems: list[Problem], notes: list[str]
                   ) -> tuple[Settings, int | None, ResolvedBatch | None]:
    """The settings every trial starts from, layered lowest first: built-in defaults, the
    workload's, the recipe's, the sweep's; with the reference world size and the DeepSpeed
    batch a recipe implies."""
    base = Settings()
    for section, values in BUILTIN_DEFAULTS.items():
        base.layer(section, values, "built-in default")
    if workload is not None:
        _layer_workload_defaults(base, spec, workload)
    ref_ws = _reference_world_size(spec, recipe, problems, notes)
    ds_batch = None
    if recipe is not None:
        origins = {k: f"{recipe.source}: {v}" for k, v in recipe.origins.items()}
        for section in ("optimizer", "scheduler", "training"):
            if section in recipe.settings:
                base.layer(section, recipe.settings[section], origins)
        ds_batch = _deepspeed_batch(spec, recipe, ref_ws, base, problems, notes)
    _layer_sweep(base, spec)
    return base, ref_ws, ds_batch


def _layer_workload_defaults(base: Settings, spec: SweepSpec, workload: WorkloadFacts) -> None:
    d = dict(workload.defaults)
    for section in ("optimizer", "scheduler"):
        if section in d:
            base.layer(section, d[section], f"workload {spec.workload.label} default")
    base.layer("training", {k: d[k] for k in TRAINING_FROM_WORKLOAD if k in d},
               f"workload {spec.workload.label} default")


def _layer_sweep(base: Settings, spec: SweepSpec) -> None:
    if spec.optimizer is not None:
        base.layer("optimizer", spec.optimizer, "sweep")
    if spec.scheduler is not None:
        base.layer("scheduler", spec.scheduler, "sweep")
    explicit_training = spec.training.model_dump(include=spec.training.model_fields_set)
    # the sweep's eval cadence replaces a lower layer's, whichever of the two it gives
    if "eval_every" in explicit_training:
        base.training.pop("eval_every_epochs", None)
    if "eval_every_epochs" in explicit_training:
        base.training.pop("eval_every", None)
    base.layer("training", explicit_training, "sweep")
    for key in ("dtype", "checkpoint_every", "checkpoint_every_s", "fuse", "fuse_max_samples"):
        base.training.setdefault(key, getattr(spec.training, key))


def _baseline_notes(spec: SweepSpec) -> list[str]:
    notes = []
    for key, value in (spec.baseline or {}).items():
        values = getattr(spec.axes, key, None) if key in FIXED_AXES + RULE_AXES else None
        if isinstance(values, list) and value not in values \
                and spec.target.relative_to_baseline is None:
            # e.g. `--set axes.world_size=[16]` to debug one trial: no baseline to compare with;
            # with a relative target plan.make_plan refuses it (the study would have no target)
            notes.append(f"baseline {key}={value!r} is not among the axis values {values}: no "
                         "speedups")
    return notes


def _check_physical_workers(spec: SweepSpec) -> list[Problem]:
    if not isinstance(spec.physical_workers, int):
        return []
    # Any P up to V works (a worker plays V // P virtual ranks or one more); beyond V a
    # worker would have no rank to play, and the all-reduce would wait on an idle process.
    return [Problem("physical_workers", spec.physical_workers,
                    f"must be at most every world size, but "
                    f"physical_workers({spec.physical_workers}) > "
                    f"axes.world_size[{i}]({ws}): a worker would play no virtual rank")
            for i, ws in enumerate(spec.axes.world_size) if spec.physical_workers > ws]


def _check_elastic(spec: SweepSpec) -> list[Problem]:
    elastic = spec.resources.elastic
    if elastic is None:
        return []
    problems = []
    if spec.backend == "simulate":
        problems.append(Problem("resources.elastic", elastic.model_dump(),
                                "needs backend ddp (or auto): a simulate trial is one process"))
    if isinstance(spec.physical_workers, int) and elastic.min_workers > spec.physical_workers:
        problems.append(Problem("resources.elastic.min_workers", elastic.min_workers,
                                f"must be at most physical_workers ({spec.physical_workers})"))
    return problems


def _check_batch_fits_shard(spec: SweepSpec, base: Settings, workload: WorkloadFacts) -> list[Problem]:
    """Every world size leaves at least one full update per epoch of the training set."""
    batch, accum = base.training.get("per_worker_batch"), base.training.get("accum_grad", 1)
    if not (isinstance(batch, int) and isinstance(accum, int) and batch >= 1 and accum >= 1):
        return []  # a bad batch or accumulation is the settings checks' to report
    n = workload.train_size()
    return [Problem(f"axes.world_size[{i}]", ws,
                    f"global batch world_size({ws}) * per_worker_batch({batch}) * "
                    f"accum_grad({accum}) = {ws * batch * accum} is more than one shard of the "
                    f"training set allows ({n} samples / {ws} ranks): no full update per epoch")
            for i, ws in enumerate(spec.axes.world_size) if updates_per_epoch(n, ws, batch, accum) == 0]


def _reference_world_size(spec: SweepSpec, recipe: Recipe | None, problems: list[Problem],
                          notes: list[str]) -> int | None:
    """``reference.world_size``; without a reference, the world size a DeepSpeed recipe's
    complete batch triple was written for, else the smallest world size of the sweep. None
    when the reference is a global batch."""
    if spec.reference is not None:
        return spec.reference.world_size
    batch = recipe.batch if recipe is not None else None
    if recipe is not None and batch is not None and batch.all_given():
        ws, found = config_world_size(batch)
        problems.extend(_in_recipe(recipe.source, p) for p in found)
        if ws is not None:
            notes.append(f"reference.world_size not given: {ws}, the world size {recipe.source}'s "
                         f"batch is written for (train_batch_size {batch.train_batch} / (micro "
                         f"batch {batch.micro} * accumulation {batch.accum}))")
        return ws
    ws = min(spec.axes.world_size)
    notes.append(f"reference.world_size not given: using the smallest world size, {ws}")
    return ws


def _deepspeed_batch(spec: SweepSpec, recipe: Recipe, ref_ws: int | None, base: Settings,
                     problems: list[Problem], notes: list[str]) -> ResolvedBatch | None:
    """Resolve a DeepSpeed recipe's batch triple at the reference world size (DeepSpeed's world
    size) and layer the micro batch and accumulation it gives as the recipe's values."""
    if recipe.batch is None or not recipe.batch.any_given():
        return None
    world = ref_ws
    if world is None:  # reference: {global_batch: ...}
        if recipe.batch.all_given():
            return None  # config_world_size reported the problem
        world = min(spec.axes.world_size)
        notes.append(f"{recipe.source}'s DeepSpeed batch resolved at world size {world} (the "
                     "smallest; reference.global_batch names no world size)")
    resolved, found = resolve_batch(recipe.batch, world)
    problems.extend(_in_recipe(recipe.source, p) for p in found)
    if resolved is None:
        return None

    def origin(key: str) -> str:
        how = resolved.how[key]
        return f"{recipe.source}: {key}" + ("" if how == "given" else f" = {how}")

    base.layer("training", {"per_worker_batch": resolved.micro, "accum_grad": resolved.accum},
               {"training.per_worker_batch": origin("train_micro_batch_size_per_gpu"),
                "training.accum_grad": origin("gradient_accumulation_steps")})
    return resolved


#: what a baseline's fixed-axis value must be, whatever the axes hold
_BASELINE_RULES = {
    "world_size": (lambda v: _is_int(v, 1), "must be a world size, an integer >= 1"),
    "warmup_rule": (lambda v: v in WARMUP_RULES or _is_int(v, 0),
                    "must be 'fixed', 'scaled', 'proportional' or an update count >= 0"),
    "scaling_rule": (lambda v: v in ("none", "linear", "sqrt", "sqrt_adam") or is_explicit_factor(v),
                     "must be 'none', 'linear', 'sqrt', 'sqrt_adam' or an lr factor > 0"),
    "seed": (lambda v: _is_int(v, -(2**62)), "must be an integer"),
    "optimizer_rule": (lambda v: v in OPTIMIZER_RULES,
                       f"must be one of {', '.join(repr(r) for r in OPTIMIZER_RULES)}"),
}


def _check_baseline_values(baseline: Mapping[str, Any]) -> list[Problem]:
    return [Problem(f"baseline.{key}", value, _BASELINE_RULES[key][1])
            for key, value in baseline.items()
            if key in _BASELINE_RULES and not _BASELINE_RULES[key][0](value)]


def _dedupe(problems: list[Problem]) -> list[Problem]:
    seen: set[str] = set()
    out = []
    for p in problems:
        if str(p) not in seen:
            seen.add(str(p))
            out.append(p)
    return out


def _check_settings(s: Settings, context: str = "", *,
                    judged: list[Problem] | None = None) -> list[Problem]:
    """Every problem of the settings; ``judged``: the schedule's, found already (none to
    look for: the schedule was judged apart, or is not what changed)."""
    problems = [
        Problem(s.where(f"optimizer.{p.path}") + context, p.value, p.rule)
        for p in optimizers.validate(s.optimizer)
    ]
    problems.extend(_schedule_problems(s, schedules.validate(s.scheduler), context)
                    if judged is None else judged)
    t = s.training
    checks: list[tuple[str, bool, str]] = [
        ("per_worker_batch", _is_int(t.get("per_worker_batch"), 1), "must be an integer >= 1"),
        ("accum_grad", _is_int(t.get("accum_grad"), 1), "must be an integer >= 1"),
    ]
    if t.get("grad_clip") is not None:
        checks.append(("grad_clip", _is_num(t["grad_clip"], 0, strict=True), "must be a number > 0"))
    if t.get("epochs") is not None:
        checks.append(("epochs", _is_num(t["epochs"], 0, strict=True), "must be a number > 0"))
    for key, ok, rule in checks:
        if not ok:
            problems.append(Problem(s.where(f"training.{key}") + context, t.get(key), rule))
    if t.get("batch_ramp") is not None:
        try:
            batch_ramp.parse(t["batch_ramp"])
        except ValueError as exc:
            problems.append(Problem(s.where("training.batch_ramp") + context, t["batch_ramp"],
                                    str(exc)))
    if t.get("epochs") is None and t.get("max_updates") is None:
        problems.append(Problem("training.epochs", None,
                                "say how long to train: training.epochs or training.max_updates"))
    return problems


def _is_int(v: Any, low: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= low


def _is_num(v: Any, low: float, strict: bool = False) -> bool:
    if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
        return False
    return v > low if strict else v >= low


def _check_axes(spec: SweepSpec, base: Settings, narrowed: set[str], notes: list[str]
                ) -> list[Problem]:
    problems: list[Problem] = []
    names = set(FIXED_AXES) | {k for k in RULE_AXES if getattr(spec.axes, k) is not None}
    for key, values in spec.axes.free_axes().items():
        path = f"axes.{key}"
        names.add(key)
        section, _, param = key.partition(".")
        if (section not in FREE_AXIS_SECTIONS or not param) and key not in TRAINING_AXES:
            problems.append(Problem(path, values, "unknown axis; use world_size, warmup_rule, "
                                    "scaling_rule, optimizer_rule, seed, optimizer.<field> / "
                                    "scheduler.<field>, or training.batch_ramp"))
            continue
        if isinstance(values, dict):
            if spec.search.type != "random":
                problems.append(Problem(path, values, "distributions need search.type: random; "
                                        "a grid takes a list of values"))
                continue
            problems.extend(_check_distribution(path, values))
            continue
        if not isinstance(values, list) or not values:
            problems.append(Problem(path, values, "must be a non-empty list of values"))
            continue
        for i, v in enumerate(values):
            trial = base.copy()
            trial.layer(section, {param: v}, f"axis {key}")
            # the schedule is judged again only where the axis sets one of its params
            for p in _check_settings(trial, judged=None if section == "scheduler" else []):
                problems.append(Problem(f"{path}[{i}] -> {p.path}", p.value, p.rule))
    for label, assignment in [("baseline", spec.baseline or {})] + [
        (f"exclude[{i}]", e) for i, e in enumerate(spec.exclude)
    ]:
        for key, value in assignment.items():
            if key not in names:
                problems.append(Problem(f"{label}.{key}", value,
                                        f"not an axis of this sweep; axes: {sorted(names)}"))
                continue
            values = (getattr(spec.axes, key) if key in FIXED_AXES + RULE_AXES
                      else spec.axes.free_axes()[key])
            if isinstance(values, list) and value not in values and label != "baseline":
                if key in narrowed:  # the file named it; the command line dropped it
                    notes.append(f"{label} names {key}={value!r}, not among the axis values "
                                 f"{values} given with --set: it excludes nothing")
                else:  # written in the file against the file's own axes: a typo
                    problems.append(Problem(f"{label}.{key}", value,
                                            f"not among the axis values {values}"))
    return problems


def _check_distribution(path: str, dist: Mapping[str, Any]) -> list[Problem]:
    if len(dist) != 1 or next(iter(dist)) not in DISTRIBUTIONS:
        return [Problem(path, dist, f"a distribution is one of {list(DISTRIBUTIONS)}: [low, high]")]
    kind, bounds = next(iter(dist.items()))
    if not (isinstance(bounds, list) and len(bounds) == 2 and all(_is_num(b, float("-inf"))
                                                                  for b in bounds)):
        return [Problem(f"{path}.{kind}", bounds, "must be [low, high]")]
    low, high = bounds
    if not low < high:
        return [Problem(f"{path}.{kind}", bounds, "low must be below high")]
    if kind == "loguniform" and low <= 0:
        return [Problem(f"{path}.{kind}", bounds, "loguniform needs low > 0")]
    if kind == "randint" and not all(_is_int(b, -(2**62)) for b in bounds):
        return [Problem(f"{path}.{kind}", bounds, "randint bounds must be integers")]
    return []


def _check_target(spec: SweepSpec, workload: WorkloadFacts) -> list[Problem]:
    metric = spec.target.metric
    known = ["train_loss", *(f"{DEV_PREFIX}{m}" for m in workload.metrics)]
    if metric not in known:
        return [Problem("target.metric", metric,
                        f"workload {spec.workload.label} reports {known}")]
    if spec.target.relative_to_baseline is not None and spec.baseline is None \
            and (spec.reference is None or spec.reference.world_size is None):
        why = "" if spec.reference is None else (
            "; reference.global_batch names no world size to take the baseline at")
        return [Problem("target.relative_to_baseline", spec.target.relative_to_baseline,
                        f"a relative target needs a baseline trial (set baseline){why}")]
    return []


def _check_plateau(spec: SweepSpec, workload: WorkloadFacts) -> list[Problem]:
    metric = spec.plateau.metric
    known = ["train_loss", *(f"{DEV_PREFIX}{m}" for m in workload.metrics)]
    if metric is not None and metric not in known:
        return [Problem("plateau.metric", metric, f"is not logged: workload {spec.workload.label} "
                        f"reports {known}")]
    return []


def _check_curtail(spec: SweepSpec) -> list[Problem]:
    """Curtailment settles each trial level by level against its baseline seed: it needs
    levels, which only a target relative to the baseline arm has, and a stopper of its own."""
    if not spec.curtail:
        return []
    if spec.target.relative_to_baseline is None:
        return [Problem("curtail", True, "needs a study with levels: a target relative to the "
                        f"baseline arm (target.relative_to_baseline), not target.value: "
                        f"{spec.target.value}")]
    if spec.search.trial_scheduler == "asha":
        return [Problem("curtail", True, "cannot run with search.trial_scheduler: asha, which stops "
                        "trials by its own rule and could drop one a decision still needs")]
    return []


def _check_seeds_per_trial(spec: SweepSpec, base: Settings) -> list[Problem]:
    """Fused seeds (resources.seeds_per_trial > 1) run what seed_fusion covers: one simulate
    process on a CPU, float32 or float64, the built-in loop, no batch ramp, and no trial
    scheduler or stopper, which would end every seed of a trial at once."""
    n = spec.resources.seeds_per_trial
    if n == 1:
        return []
    why = f"resources.seeds_per_trial {n} (fused seeds) "
    problems = []
    if spec.backend != "simulate":
        problems.append(Problem("backend", spec.backend, why + "needs backend: simulate (one "
                                "process trains the seeds)"))
    if spec.resources.gpus_per_worker > 0:
        problems.append(Problem("resources.gpus_per_worker", spec.resources.gpus_per_worker,
                                why + "runs on CPUs only yet: must be 0"))
    dtype = base.training.get("dtype", "float32")
    if dtype not in ("float32", "float64"):
        problems.append(Problem(base.where("training.dtype"), dtype, why + "needs float32 or "
                                "float64 (float16's loss scale would be one for every seed)"))
    ramps = [v for v in [base.training.get("batch_ramp"),
                         *spec.axes.free_axes().get("training.batch_ramp", [])]
             if v not in (None, "none")]
    if ramps:
        problems.append(Problem("training.batch_ramp", ramps[0], why + "cannot run a batch-size "
                                "ramp yet"))
    if spec.workload.train_loop is not None:
        problems.append(Problem("workload.train_loop", spec.workload.train_loop,
                                why + "runs the built-in loop only"))
    if spec.search.trial_scheduler == "asha":
        problems.append(Problem("search.trial_scheduler", "asha", why + "cannot run under ASHA, "
                                "which would stop every seed of a trial at once"))
    if spec.curtail:
        problems.append(Problem("curtail", True, why + "cannot run with curtailment yet, whose "
                                "stopper would stop every seed of a trial at once"))
    return problems


def metric_mode(sweep: Sweep) -> Literal["min", "max"]:
    metric = sweep.spec.target.metric
    if metric == "train_loss":
        return "min"
    return "max" if sweep.workload.metrics.get(metric.removeprefix(DEV_PREFIX)) == "max" else "min"
