"""Expand a validated sweep into one row per trial: its ``TrialConfig`` and every number the
plan derives (where it runs is plan/placement.py's)."""

from __future__ import annotations

import functools
import itertools
import math
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from scalesweep.orchestrator.plan.cluster import ClusterInfo, local_cluster
from scalesweep.orchestrator.plan.placement import feasible, placement
from scalesweep.orchestrator.plan.rules import study_rules
from scalesweep.orchestrator.spec.errors import InputError, Problem
from scalesweep.orchestrator.spec.load import Sweep
from scalesweep.orchestrator.spec.schema import FIXED_AXES, RULE_AXES
from scalesweep.orchestrator.spec.training import Training
from scalesweep.science import batch_ramp, optimizers, scaling, schedules
from scalesweep.science.batching import global_batch, updates_per_epoch
from scalesweep.science.stats.rules import StudyRules
from scalesweep.trainables.config import RampStage, StopAtTarget, TrialConfig

#: the free axis (and training option) of a batch-size ramp
RAMP_AXIS = "training.batch_ramp"

#: plan fields that docs/design.md §4.3 promises in `plan --json` and the summary JSON, in order
PLAN_FIELDS = (
    "name", "arm", "world_size", "scaling_rule", "warmup_rule", "seed", "global_batch", "base_lr",
    "peak_lr", "warmup_steps", "warmup_epochs", "updates_per_epoch", "total_updates", "epochs",
    "eval_every", "scheduler", "backend", "physical_workers", "accum_grad", "per_worker_batch",
    "feasible", "reason", "batch_ramp",
)


@dataclass
class PlanRow:
    """One trial of a plan: its ``TrialConfig`` (what the trial runs), where it sits in the
    sweep's axes, and the numbers derived for the plan's table; the trial's own settings
    (world size, seed, lr, schedule, workers, ...) are read from the config, never copied."""

    axes: dict[str, Any]
    scaling_rule: str | float  # a name, or an explicit lr factor
    warmup_rule: str | int
    global_batch: int
    reference_global_batch: int
    base_lr: float  # the optimizer lr as tuned at the reference
    peak_lr: float
    warmup_epochs: float
    updates_per_epoch: int
    epochs: float
    trial: TrialConfig
    #: where it can run (plan/placement.py): set when the row is placed on a cluster
    feasible: bool = True
    reason: str | None = None
    notes: list[str] = field(default_factory=list)
    also: list[dict[str, Any]] = field(default_factory=list)  # merged identical combinations
    #: the trial's settings minus its seed: trials of one arm are replicates (docs/design.md §4)
    arm: str = ""
    #: baseline combinations outside the axes that give this very trial (e.g. warmup_rule fixed
    #: when the axes hold only scaled: the same trial at the reference world size)
    baseline_alias: list[dict[str, Any]] = field(default_factory=list)
    #: "none", or the stages before world_size: "4:1,8:1" (scalesweep.science.batch_ramp)
    batch_ramp: str = "none"
    #: notes on the sweep's settings rather than this trial's changes; the plan lists each once
    setting_notes: list[str] = field(default_factory=list)
    #: the placement's note (plan/placement.py) and its index in ``notes``
    placement_note: str = ""
    placement_at: int = 0

    @property
    def name(self) -> str:
        return self.trial.name

    def rename(self, name: str) -> None:
        self.trial = self.trial.model_copy(update={"name": name})

    @property
    def world_size(self) -> int:
        return self.trial.world_size

    @property
    def seed(self) -> int:
        return self.trial.seed

    @property
    def lr(self) -> float:
        """The optimizer lr this trial uses, after its lr rule."""
        return self.trial.optimizer.lr

    @property
    def scheduler(self) -> str:
        return self.trial.scheduler.type

    @property
    def warmup_steps(self) -> int:
        return self.trial.scheduler.warmup_steps or 0

    @property
    def total_updates(self) -> int:
        return self.trial.total_updates

    @property
    def eval_every(self) -> int:
        return self.trial.eval_every

    @property
    def backend(self) -> str:
        return self.trial.backend

    @property
    def physical_workers(self) -> int:
        return self.trial.physical_workers

    @property
    def accum_grad(self) -> int:
        return self.trial.accum_grad

    @property
    def per_worker_batch(self) -> int:
        return self.trial.per_worker_batch

    @property
    def combo_text(self) -> str:
        """Its axes as error messages name a trial."""
        return _short_combo(self.axes)

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in PLAN_FIELDS}
        out["lr"] = self.lr
        out["axes"] = self.axes
        out["notes"] = self.notes
        if self.also:
            out["same_as"] = self.also
        return out

    def matches(self, assignment: dict[str, Any]) -> bool:
        return any(all(axes.get(k) == v for k, v in assignment.items())
                   for axes in [self.axes, *self.also, *self.baseline_alias])


@dataclass
class Plan:
    sweep: Sweep
    rows: list[PlanRow]
    cluster: ClusterInfo
    notes: list[str] = field(default_factory=list)

    @functools.cached_property
    def rules(self) -> StudyRules:
        """How the study's arms are judged (:mod:`scalesweep.science.stats.rules`): made once,
        from the sweep alone; logged on the parent run and read back into the same record."""
        return study_rules(self.sweep)

    def baseline_for(self, row: PlanRow) -> PlanRow | None:
        """The baseline trial with the same seed (and free axes) as ``row``."""
        spec = self.sweep.spec
        want = dict(spec.baseline) if spec.baseline is not None else (
            {"world_size": self.sweep.reference_world_size, "warmup_rule": "fixed",
             "scaling_rule": "none"} if self.sweep.reference_world_size else {})
        if not want:
            return None
        free = {k: v for k, v in row.axes.items() if k not in FIXED_AXES and k not in want}
        want = {"seed": row.seed, **free, **want}
        return next((r for r in self.rows if r.matches(want)), None)


def place(plan: Plan, cluster: ClusterInfo) -> Plan:
    """``plan``, its rows placed on ``cluster`` (plan/placement.py) without planning again: in
    place, the rows are the plan's own."""
    for row in plan.rows:
        place_row(row, plan.sweep.spec, cluster, plan.sweep.source)
    plan.cluster = cluster
    return plan


def place_row(row: PlanRow, spec: Any, cluster: ClusterInfo, source: str) -> None:
    """Set ``row``'s backend, workers, feasibility and placement note for ``cluster``."""
    trial = row.trial
    stages = trial.batch_ramp
    # with a ramp, P must fit its smallest stage: a worker plays at least one rank of every V
    backend, workers, how = placement(spec, trial.smallest_world_size, cluster)
    if stages and workers > stages[0].world_size:
        raise InputError(source, [Problem("physical_workers", workers, (
            f"must be at most the batch ramp's first world size ({stages[0].world_size}): a "
            f"worker plays at least one virtual rank of every stage (trial {row.combo_text})"))])
    assert backend in ("ddp", "simulate")
    row.trial = TrialConfig.model_validate({
        **dict(trial), "physical_workers": workers, "backend": backend,
        "use_gpu": spec.resources.gpus_per_worker > 0 and backend == "ddp",
        "min_workers": (min(spec.resources.elastic.min_workers, workers)
                        if spec.resources.elastic is not None and backend == "ddp" else None)})
    if row.placement_note:  # placed before, on another cluster
        del row.notes[row.placement_at]
    if how:
        row.notes.insert(row.placement_at, how)
    row.placement_note = how
    row.feasible, row.reason = feasible(spec, backend, workers, cluster)


def combinations(sweep: Sweep) -> Iterator[dict[str, Any]]:
    axes = sweep.spec.axes
    # a rule axis the file leaves out is no axis: its trials, names and draws stay as they were
    typed = [*FIXED_AXES, *(n for n in RULE_AXES if getattr(axes, n) is not None)]
    names = typed + list(axes.free_axes())
    values = [getattr(axes, n) for n in typed] + list(axes.free_axes().values())
    if sweep.spec.search.type == "grid":
        for combo in itertools.product(*values):
            yield dict(zip(names, combo, strict=True))
        return
    rng = random.Random(sweep.spec.search.seed)
    for _ in range(sweep.spec.search.samples or 0):
        yield {n: _draw(rng, v) for n, v in zip(names, values, strict=True)}


def _draw(rng: random.Random, values: Any) -> Any:
    if isinstance(values, list):
        return rng.choice(values)
    kind, (low, high) = next(iter(values.items()))
    if kind == "uniform":
        return rng.uniform(low, high)
    if kind == "loguniform":
        return math.exp(rng.uniform(math.log(low), math.log(high)))
    return rng.randint(low, high)


def _excluded(sweep: Sweep, combo: dict[str, Any]) -> bool:
    return any(all(combo.get(k) == v for k, v in ex.items()) for ex in sweep.spec.exclude)


class _WarmupRuleMismatch(Exception):
    """scaling.apply refused a trial's warmup rule for its schedule; make_plan files it under
    axes.warmup_rule. Its own type so that other ValueErrors (pydantic's, bugs) are not."""


def make_plan(sweep: Sweep, cluster: ClusterInfo | None = None) -> Plan:
    cluster = cluster or local_cluster()
    spec = sweep.spec
    if spec.backend == "simulate" and spec.physical_workers not in ("auto", 1):
        raise InputError(sweep.source, [Problem("physical_workers", spec.physical_workers,
                                                "the simulate backend runs one process: use 1 or auto")])
    rows: list[PlanRow] = []
    by_config: dict[str, PlanRow] = {}
    plan_notes = list(sweep.notes)
    n_seeds = len(spec.axes.seed)
    excluded = 0
    problems: list[Problem] = []
    for combo in combinations(sweep):
        if _excluded(sweep, combo):
            excluded += 1
            continue
        try:
            row = _row(sweep, combo, cluster, n_seeds)
        except _WarmupRuleMismatch as exc:  # e.g. an explicit warmup for a schedule that has none
            problems.append(Problem("axes.warmup_rule", combo["warmup_rule"],
                                    f"{exc} (trial {_short_combo(combo)})"))
            continue
        key = row.trial.model_copy(update={"name": ""}).model_dump_json()
        if key in by_config:  # e.g. every rule is the same trial at the reference world size
            by_config[key].also.append(combo)
            continue
        by_config[key] = row
        rows.append(row)
    if problems:
        raise InputError(sweep.source, problems)
    _alias_baselines(sweep, rows, by_config, cluster, n_seeds)
    # a relative target with no baseline trial to resolve it would train every trial for nothing
    baseline_problems, baseline_notes = _baseline_problems(Plan(sweep=sweep, rows=rows,
                                                                cluster=cluster))
    if baseline_problems:
        raise InputError(sweep.source, baseline_problems)
    plan_notes.extend(baseline_notes)
    plan_notes.extend(dict.fromkeys(n for r in rows for n in r.setting_notes))
    _unique_names(rows)
    _assign_arms(rows)
    merged = sum(len(r.also) for r in rows)
    if merged:
        plan_notes.append(f"{merged} combination(s) give the same trial as another and were merged "
                          "(e.g. every lr rule at the reference world size)")
    if excluded:
        plan_notes.append(f"{excluded} combination(s) excluded by the sweep's exclude list")
    coarse = [r.name for r in rows if evaluations(r) < MIN_EVALS]
    if coarse:
        plan_notes.append(
            f"warning: {len(coarse)} trial(s) make fewer than {MIN_EVALS} evaluations in all "
            f"({', '.join(coarse[:4])}{', ...' if len(coarse) > 4 else ''}): too coarse to place a "
            "crossing between evals; evaluate more often (training.eval_every_epochs)")
    plan = Plan(sweep=sweep, rows=rows, cluster=cluster, notes=plan_notes)
    _check_adaptive(plan)
    return plan


def _check_adaptive(plan: Plan) -> None:
    """An adaptive sweep decides each arm against its baseline arm: every trial needs one."""
    rep = plan.sweep.spec.replicates
    orphans = sorted({r.arm for r in plan.rows if plan.baseline_for(r) is None}) if rep else []
    if orphans:
        raise InputError(plan.sweep.source, [Problem(
            "replicates", rep.model_dump() if rep else None,
            f"adaptive seeds decide each arm against its baseline arm, but these arms have "
            f"none: {', '.join(orphans)} (set baseline to a trial of the plan)")])


#: fewer evaluations than this in a whole trial cannot place a crossing: `plan` warns
MIN_EVALS = 10


def _alias_baselines(sweep: Sweep, rows: list[PlanRow], by_config: dict[str, PlanRow],
                     cluster: ClusterInfo, n_seeds: int) -> None:
    """Where a trial's baseline combination is not in the axes but gives the very trial of
    another row, that row is the baseline: recorded in its ``baseline_alias``."""
    plan = Plan(sweep=sweep, rows=rows, cluster=cluster)
    want = dict(sweep.spec.baseline) if sweep.spec.baseline is not None else (
        {"world_size": sweep.reference_world_size, "warmup_rule": "fixed", "scaling_rule": "none"}
        if sweep.reference_world_size else {})
    if not want:
        return
    for row in rows:
        if plan.baseline_for(row) is not None:
            continue
        combo = {**row.axes, **want}
        try:
            twin = _row(sweep, combo, cluster, n_seeds)
        except (ValueError, InputError, KeyError, TypeError):
            continue
        match = by_config.get(twin.trial.model_copy(update={"name": ""}).model_dump_json())
        if match is not None and combo not in match.baseline_alias:
            match.baseline_alias.append(combo)


def _baseline_problems(plan: Plan) -> tuple[list[Problem], list[str]]:
    """With a relative target the baseline must be a trial of the plan: one that matches no row
    leaves the study without a target (a problem, named by the field that chose the baseline:
    ``baseline.<axis>``, or ``reference.world_size`` for the default one). Trials without a
    baseline of their own seed and free-axis values get no target: a warning note."""
    spec = plan.sweep.spec
    if spec.target.relative_to_baseline is None or not plan.rows:
        return [], []
    want = dict(spec.baseline) if spec.baseline is not None else (
        {"world_size": plan.sweep.reference_world_size, "warmup_rule": "fixed",
         "scaling_rule": "none"} if plan.sweep.reference_world_size else {})
    target = f"the relative target (target.relative_to_baseline = {spec.target.relative_to_baseline:g})"
    if not want:
        return [Problem("baseline", None, f"is required by {target}")], []
    if any(r.matches(want) for r in plan.rows):
        orphans = [r.name for r in plan.rows if plan.baseline_for(r) is None]
        if not orphans:
            return [], []
        shown = ", ".join(orphans[:4]) + (", ..." if len(orphans) > 4 else "")
        return [], [f"warning: {len(orphans)} trial(s) have no baseline trial with their seed and "
                    f"free-axis values ({shown}): {target} cannot be resolved for them"]
    combos = [a for r in plan.rows for a in [r.axes, *r.also]]
    problems = []
    for key, value in want.items():
        if not any(a.get(key) == value for a in combos):
            seen = ", ".join(sorted({repr(a.get(key)) for a in combos}))
            path = f"baseline.{key}" if spec.baseline is not None else (
                "reference.world_size" if key == "world_size" else f"baseline.{key} (default)")
            problems.append(Problem(path, value, f"matches no trial of the plan (its {key} values: "
                                    f"{seen}): {target} cannot be resolved; name a trial of this "
                                    "sweep as baseline (at the reference world size every warmup "
                                    "and lr rule is the same trial), or give target.value"))
    if not problems:
        problems.append(Problem("baseline", want, f"no trial of the plan has all of these (excluded?): "
                                f"{target} cannot be resolved"))
    return problems, []


def evaluations(row: PlanRow) -> int:
    """Evals a trial makes in all: every ``eval_every`` updates, plus one at the end."""
    return row.total_updates // row.eval_every + (1 if row.total_updates % row.eval_every else 0)


def _short_combo(combo: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in combo.items())


def _unique_names(rows: list[PlanRow]) -> None:
    seen: dict[str, int] = {}
    for row in rows:
        n = seen.get(row.name, 0)
        seen[row.name] = n + 1
        if n:
            row.rename(f"{row.name}-{n + 1}")


def _assign_arms(rows: list[PlanRow]) -> None:
    """Name each row's arm: its name without the seed, made unique per distinct configuration
    (the trial's config with name and seed blanked)."""
    arm_of: dict[str, str] = {}
    taken: set[str] = set()
    for row in rows:
        key = row.trial.model_copy(update={"name": "", "seed": 0}).model_dump_json()
        if key not in arm_of:
            base = _arm_name(row)
            name, n = base, 1
            while name in taken:
                n += 1
                name = f"{base}-{n}"
            arm_of[key] = name
            taken.add(name)
        row.arm = arm_of[key]


def _arm_name(row: PlanRow) -> str:
    name = f"ws{row.world_size}-warmup{row.warmup_steps}-{scaling.rule_label(row.axes['scaling_rule'])}"
    name += _rule_suffix(row.axes)
    for key, value in row.axes.items():
        if key not in FIXED_AXES + RULE_AXES:
            name += _axis_suffix(key, value)
    return name


def _rule_suffix(combo: Mapping[str, Any]) -> str:
    """An optimizer rule in a trial or arm name, after the lr rule: "-beta2_halflife"; none
    adds nothing, so a sweep's names are the same with or without the axis."""
    rule = combo.get("optimizer_rule", "none")
    return "" if rule == "none" else f"-{rule}"


def _axis_suffix(key: str, value: Any) -> str:
    """A free axis in a trial or arm name: "-lr0.002"; a ramp "-ramp4x1-8x1" (no ':' or ','
    in names that become directory names)."""
    if key == RAMP_AXIS:
        ramp = batch_ramp.describe(batch_ramp.parse(value))
        return "-ramp" + ramp.replace(":", "x").replace(",", "-")
    return f"-{key.partition('.')[2]}{_fmt(value)}"


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def row_for(sweep: Sweep, combo: dict[str, Any], cluster: ClusterInfo) -> PlanRow:
    """The trial of the sweep's settings at ``combo`` (every fixed axis, and the free ones it
    names), whether the axes hold it or not: what `solve` runs for a candidate it picks. Named
    with its seed; its arm is its name without it."""
    try:
        row = _row(sweep, combo, cluster, n_seeds=2)
    except _WarmupRuleMismatch as exc:
        raise InputError(sweep.source, [Problem("warmup_rule", combo["warmup_rule"], str(exc))]
                         ) from None
    row.arm = _arm_name(row)
    return row


def _row(sweep: Sweep, combo: dict[str, Any], cluster: ClusterInfo, n_seeds: int) -> PlanRow:
    spec = sweep.spec
    settings = sweep.base.copy()
    free = {k: v for k, v in combo.items() if k not in FIXED_AXES + RULE_AXES}
    for key, value in free.items():
        section, _, param = key.partition(".")
        settings.layer(section, {param: value}, f"axis {key}")
    # the sweep's loop settings, typed at load; a trial's own where an axis sets one (a ramp)
    t = (Training.of(settings.training) if any(key.startswith("training.") for key in free)
         else sweep.training)
    ws, seed = int(combo["world_size"]), int(combo["seed"])
    batch, accum = t.per_worker_batch, t.accum_grad
    gb = global_batch(ws, batch, accum)
    if spec.reference is not None and spec.reference.global_batch is not None:
        ref_gb = spec.reference.global_batch
    else:
        ref_gb = global_batch(sweep.reference_world_size or ws, batch, accum)

    base_lr = float(settings.optimizer["lr"])
    factor = scaling.lr_factor(combo["scaling_rule"], gb, ref_gb)
    upe = updates_per_epoch(sweep.workload.train_size(), ws, batch, accum)
    eval_every = t.eval_every_at(upe)
    stages, ramp_notes = _ramp(sweep, combo, t, gb, ref_gb, factor)
    ramp_updates = sum(s.epochs * updates_per_epoch(sweep.workload.train_size(), s.world_size,
                                                   batch, accum) for s in stages)
    total = t.total_updates(upe, ramp_epochs=sum(s.epochs for s in stages), ramp_updates=ramp_updates)
    try:
        # the sweep's schedule, resolved once; a trial's own where axes set its params (load
        # judged each value alone, so together they meet only here); apply judges the result
        reference = (schedules.resolve(settings.scheduler)
                     if any(key.startswith("scheduler.") for key in free) else sweep.scheduler)
        scheduler, lr, notes = scaling.apply(
            reference, base_lr, lr_factor=factor, warmup_rule=combo["warmup_rule"],
            global_batch=gb, reference_global_batch=ref_gb,
            run_updates=_schedule_length(sweep, reference, ws, batch, accum, total, eval_every,
                                         stages),
            reference_updates=(_reference_updates(sweep, t, ref_gb)
                               if combo["warmup_rule"] == "proportional" else None))
    except scaling.AutoTotalError as exc:  # the field is the total's, not the warmup rule's
        raise InputError(sweep.source, [Problem(settings.where(f"scheduler.{exc.field}"), "auto",
                                                f"{exc.rule} (trial {_short_combo(combo)})")]
                         ) from None
    except ValueError as exc:  # only scaling.apply's own refusal is the warmup rule's to answer
        raise _WarmupRuleMismatch(str(exc)) from exc
    notes.extend(ramp_notes)
    placement_at = len(notes)  # the placement's note goes here (plan/placement.py)
    peak_note = _peak_note(reference, settings.scheduler, base_lr)
    warmup = scheduler.warmup_steps or 0

    # free axes (a ramp) follow the seed
    name = f"ws{ws}-warmup{warmup}-{scaling.rule_label(combo['scaling_rule'])}"
    name += _rule_suffix(combo)
    if n_seeds > 1:
        name += f"-s{seed}"
    for key, value in free.items():
        name += _axis_suffix(key, value)

    stop = None
    if spec.stop_at_target and spec.target.value is not None:
        stop = StopAtTarget(metric=spec.target.metric, value=spec.target.value,
                            mode="max" if _higher_is_better(sweep) else "min",
                            smoothing=spec.target.smoothing)
    optimizer = {**settings.optimizer, "lr": lr}
    if combo["scaling_rule"] == "sqrt_adam":
        optimizer, adam_notes = _sqrt_adam(sweep, combo, optimizer, scheduler, gb, ref_gb)
        notes.extend(adam_notes)
    optimizer, rule_notes = _optimizer_rule(sweep, combo, optimizer, scheduler, gb, ref_gb)
    notes.extend(rule_notes)
    # the trial's optimizer, judged once (load judged the sweep's block and each axis value);
    # one worker until place_row puts it on the cluster
    trial = TrialConfig(
        name=name, workload=spec.workload.label, workload_options=dict(spec.workload.options),
        train_loop=spec.workload.train_loop, world_size=ws, physical_workers=1,
        per_worker_batch=batch, accum_grad=accum, optimizer=optimizers.resolve(optimizer),
        scheduler=scheduler,
        grad_clip=t.grad_clip, total_updates=total, eval_every=eval_every,
        checkpoint_every=t.checkpoint_every or 0,
        checkpoint_every_s=t.checkpoint_every_s if t.checkpoint_every is None else None,
        seed=seed, dtype=t.dtype, fuse=t.fuse, fuse_max_samples=t.fuse_max_samples,
        stop_at_target=stop, divergence_threshold=t.divergence_threshold, batch_ramp=stages,
        memory_per_worker_gb=spec.resources.memory_per_worker,
    )
    data = trial.data_plan(sweep.workload.train_size())
    last = data.segments[-1]
    epochs = last.first_epoch + last.updates / last.updates_per_epoch
    row = PlanRow(
        axes=combo, scaling_rule=combo["scaling_rule"], warmup_rule=combo["warmup_rule"],
        global_batch=gb, reference_global_batch=ref_gb, base_lr=base_lr,
        peak_lr=schedules.peak_lr(scheduler, lr),
        # a ramp's earlier stages cover the warmup's positions at their own pace
        warmup_epochs=data.epoch_at_position(warmup) if stages and warmup else warmup / upe,
        updates_per_epoch=upe, epochs=epochs,
        batch_ramp=batch_ramp.describe([batch_ramp.Stage(s.world_size, s.epochs) for s in stages]),
        trial=trial, notes=notes, setting_notes=[peak_note] if peak_note else [],
        placement_at=placement_at,
    )
    place_row(row, spec, cluster, sweep.source)
    return row


def _peak_note(scheduler: schedules.ScheduleSpec, given: Mapping[str, Any],
               optimizer_lr: float) -> str | None:
    """Where a schedule param overwrites the optimizer lr (DeepSpeed's ``warmup_max_lr``) and
    differs from it: the sweep's ``optimizer.lr`` is then not the lr that trains, which is easy
    to miss since ``ds_warmup_decay``'s default is DeepSpeed's 0.001, not the optimizer lr.
    ``given``: the sweep's own scheduler block, to tell a default from a given value."""
    kind = scheduler.kind
    merged = scheduler.params
    for key in kind.optimizer_lr_fallbacks:
        value = merged.get(key)
        if value is None or float(value) == optimizer_lr:
            continue
        default = "" if key in given else f", {kind.name}'s default, as DeepSpeed's"
        return (f"scheduler.{key} ({value:g}{default}), not optimizer.lr ({optimizer_lr:g}), "
                f"sets the peak lr: {kind.name} overwrites the optimizer's lr at every update, "
                f"and an lr rule scales {key} (peak_lr); {key}: null follows optimizer.lr")
    return None


def _sqrt_adam(sweep: Sweep, combo: dict[str, Any], optimizer: dict[str, Any],
               scheduler: schedules.ScheduleSpec, gb: int, ref_gb: int
               ) -> tuple[dict[str, Any], list[str]]:
    """Malladi et al.'s betas and eps for the sqrt_adam rule (its lr came with the others')."""
    try:
        if schedules.build(scheduler, float(optimizer["lr"])).momentum(1) is not None:
            raise ValueError(f"sqrt_adam scales Adam's betas, but the {scheduler.type} schedule "
                             "sets beta1 (and beta2 = 0.99) at every update; use another rule or "
                             "schedule")
        return scaling.adam_hyperparameters(optimizer, gb, ref_gb)
    except ValueError as exc:  # its own field: make_plan would file a ValueError under warmup
        raise InputError(sweep.source, [Problem("axes.scaling_rule", "sqrt_adam",
                                                f"{exc} (trial {_short_combo(combo)})")]) from None


def _optimizer_rule(sweep: Sweep, combo: dict[str, Any], optimizer: dict[str, Any],
                    scheduler: schedules.ScheduleSpec, gb: int, ref_gb: int
                    ) -> tuple[dict[str, Any], list[str]]:
    """The trial's optimizer after its optimizer rule (beta2_halflife, weight_decay_linear),
    which comes after the lr rule and leaves the lr alone."""
    rule = combo.get("optimizer_rule", "none")
    try:
        if rule == "beta2_halflife" and combo["scaling_rule"] == "sqrt_adam":
            raise ValueError("sqrt_adam sets beta2 to 1 - k(1 - beta2) already: the two rules "
                             "disagree on beta2; pair beta2_halflife with none, linear or sqrt")
        if rule == "beta2_halflife" and schedules.build(
                scheduler, float(optimizer["lr"])).momentum(1) is not None:
            raise ValueError(f"beta2_halflife scales Adam's beta2, but the {scheduler.type} "
                             "schedule sets beta2 = 0.99 at every update; use another schedule")
        return scaling.optimizer_hyperparameters(rule, optimizer, gb, ref_gb)
    except ValueError as exc:  # its own field: make_plan would file a ValueError under warmup
        raise InputError(sweep.source, [Problem("axes.optimizer_rule", rule,
                                                f"{exc} (trial {_short_combo(combo)})")]) from None


def _reference_updates(sweep: Sweep, training: Training, ref_gb: int) -> int:
    """The reference trial's updates (T0 of warmup_rule proportional): its world size's, or,
    for a reference given as a global batch, the world size that batch takes."""
    batch, accum = training.per_worker_batch, training.accum_grad
    ref_ws = sweep.reference_world_size
    if ref_ws is None:
        if ref_gb % (batch * accum):
            raise ValueError(f"warmup_rule='proportional' needs the reference run's updates, but "
                             f"reference.global_batch ({ref_gb}) is no whole number of ranks of "
                             f"per_worker_batch * accum_grad ({batch} * {accum}); set "
                             "reference.world_size")
        ref_ws = ref_gb // (batch * accum)
    return training.total_updates(updates_per_epoch(sweep.workload.train_size(), ref_ws, batch,
                                                    accum))


def _higher_is_better(sweep: Sweep) -> bool:
    from scalesweep.orchestrator.spec.load import metric_mode

    return metric_mode(sweep) == "max"


def _schedule_length(sweep: Sweep, scheduler: schedules.ScheduleSpec, ws: int, batch: int, accum: int,
                     total: int, eval_every: int, stages: tuple[RampStage, ...]) -> int:
    """The trial's length in its schedule's counts, which a total given as ``auto`` becomes:
    its updates, or with a ramp the schedule's position at its last update (under
    ``warmup_rule: scaled`` the stages' updates count B_s / B each)."""
    if not stages:
        return total
    kind = scheduler.kind
    data = batch_ramp.DataPlan(dataset_size=sweep.workload.train_size(), per_worker_batch=batch,
                               accum_grad=accum, world_size=ws, total_updates=total,
                               eval_every=eval_every, stages=stages,
                               counts_from=kind.counts_from)
    return max(1, round(data.position(total)))


def _ramp(sweep: Sweep, combo: dict[str, Any], training: Training, gb: int, ref_gb: int,
          factor: float) -> tuple[tuple[RampStage, ...], list[str]]:
    """A batch-size ramp's stages as the trial runs them (scalesweep.science.batch_ramp):
    each stage's lr multiplier is the lr rule's factor at its batch over the trial's, its
    schedule clock the batch ratio under warmup_rule scaled (the warmup then covers the same
    samples) and 1 otherwise, its evals as often per epoch as the trial's."""
    text = training.batch_ramp
    where = f"axes.{RAMP_AXIS}" if RAMP_AXIS in combo else "training.batch_ramp"
    try:
        stages = batch_ramp.parse(text)
    except ValueError as exc:  # load checks the syntax; kept for a value set another way
        raise InputError(sweep.source, [Problem(where, text, str(exc))]) from None
    if not stages:
        return (), []
    ws, rule = int(combo["world_size"]), combo["scaling_rule"]
    why = batch_ramp.check(stages, ws, training.epochs)
    if why is None and rule == "sqrt_adam":
        why = ("sqrt_adam changes Adam's betas and eps with the batch, and a ramp would need "
               "them per stage; use sqrt (the same lr) or no ramp")
    if why is None and combo.get("optimizer_rule", "none") != "none":
        why = (f"optimizer_rule {combo['optimizer_rule']} changes the optimizer with the batch, "
               "and a ramp would need it per stage; use optimizer_rule none or no ramp")
    if why is None and combo["warmup_rule"] == "proportional":
        why = ("warmup_rule proportional keeps the warmup's share of the run's updates, which a "
               "ramp's stages count at their own batches; use scaled (the same samples) or no ramp")
    if why is not None:
        if RAMP_AXIS in combo and "stay below" in why:  # a grid crossing ramps with small sizes
            why += (f"; to leave this combination out: exclude: [{{world_size: {ws}, "
                    f"{RAMP_AXIS}: '{text}'}}]")
        raise InputError(sweep.source, [Problem(where, text, f"{why} (trial {_short_combo(combo)})")])
    batch, accum = training.per_worker_batch, training.accum_grad
    size = sweep.workload.train_size()
    out, parts = [], []
    for s in stages:
        gb_s = global_batch(s.world_size, batch, accum)
        upe_s = updates_per_epoch(size, s.world_size, batch, accum)
        multiplier = scaling.lr_factor(rule, gb_s, ref_gb) / factor
        clock = gb_s / gb if combo["warmup_rule"] == "scaled" else 1.0
        out.append(RampStage(world_size=s.world_size, epochs=s.epochs, lr_multiplier=multiplier,
                             clock=clock, eval_every=training.eval_every_at(upe_s)))
        parts.append(f"{s.world_size} ranks for {s.epochs} epoch{'s' * (s.epochs > 1)} (batch "
                     f"{gb_s}, {s.epochs * upe_s} updates, lr x {multiplier:.4g}, schedule "
                     f"x {clock:.4g} per update)")
    return tuple(out), [f"batch ramp: {'; '.join(parts)}; then {ws} (batch {gb})"]


