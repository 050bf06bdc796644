"""What `scalesweep solve` will run, settled before Ray starts: the baseline and the world
size M checked, the search space, the budget split, the trials of the baseline seeds and of
each candidate, and the sweep that verifies the best candidates (docs/solve.md). Every refusal
is an InputError naming the field, the value and the rule: exit 2, nothing started or logged."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from scalesweep.orchestrator.plan.cluster import ClusterInfo
from scalesweep.orchestrator.plan.rows import MIN_EVALS, PlanRow, evaluations, row_for
from scalesweep.orchestrator.plan.verify_sweep import DEFAULT_REPLICATES
from scalesweep.orchestrator.spec.errors import InputError, Problem
from scalesweep.orchestrator.spec.files import load_mapping
from scalesweep.orchestrator.spec.load import (
    Sweep,
    apply_overrides,
    metric_mode,
    parse_overrides,
    recipe_candidates,
)
from scalesweep.orchestrator.spec.schema import FIXED_AXES
from scalesweep.science.recommend.lr_models import model_for
from scalesweep.science.recommend.space import lr_low
from scalesweep.science.solve import GRID_STEP, Range, SearchSpace, default_space, min_budget
from scalesweep.trainables.config import SearchObjective, StopAtTarget

#: trial-epochs: the search and the verification's first look of the shipped study, in about
#: half an hour on 2 cores
DEFAULT_BUDGET = 150.0
#: the best candidates of the search that the verification decides on
DEFAULT_CANDIDATES = 3
#: baseline seeds the search scores against: each candidate's seed is paired with one, whose
#: target is cross-fitted from the others
BASELINE_SEEDS = 3
#: lr factor and warmup
DIMENSIONS = 2
#: significant digits of a candidate's lr factor: what trial names, the verification and the
#: answer show is what trained
FACTOR_DIGITS = 3
#: how candidates are chosen: Optuna's TPE, or every point of the grid at GRID_STEP (the
#: yardstick the search's cost is measured against: benchmarks/solve_grid.py)
SAMPLERS = ("tpe", "grid")
#: where the lr factor's low end comes from without --lr: the lr models over the measured noise
#: scale (recommend/space.py), or the sqrt rule, as a solve started before that had it (its
#: resume plans the space it searched)
LR_LOW_SOURCES = ("models", "sqrt")


@dataclass(frozen=True)
class StudyNoise:
    """The noise scale (samples) the study measured, None where it measured none, and where it
    came from, as the plan says it."""

    value: float | None
    source: str


@dataclass(frozen=True, kw_only=True)
class StartPoint:
    """Where the search starts (``solve --start-from-recommendation``): the recommendation's
    lr factor over its study's reference lr, with its interval (an end None: unbounded), its
    warmup in updates at M, the global batch at M it was made for, and where it came from."""

    lr_factor: float
    lr_factor_ci: tuple[float | None, float | None]
    reference_lr: float | None  # the study's, which the factor multiplies; None: not logged
    warmup: int
    global_batch: float
    source: str

    def as_json(self) -> dict[str, Any]:
        return {"lr_factor": self.lr_factor, "lr_factor_ci": list(self.lr_factor_ci),
                "reference_lr": self.reference_lr, "warmup": self.warmup,
                "global_batch": self.global_batch, "source": self.source}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StartPoint:
        lo, hi = data["lr_factor_ci"]
        return cls(lr_factor=float(data["lr_factor"]), lr_factor_ci=(lo, hi),
                   reference_lr=data.get("reference_lr"), warmup=int(data["warmup"]),
                   global_batch=float(data["global_batch"]), source=str(data["source"]))


@dataclass(frozen=True)
class FirstCandidate:
    """The search's first candidate, at the recommendation: its lr factor over the solve's
    reference lr (rounded as every candidate's is) and warmup, and what it came from."""

    lr_factor: float
    warmup: int
    start: StartPoint
    #: the ranges widened to hold it ("lr", "warmup")
    widened: tuple[str, ...] = ()

    def describe(self) -> str:
        lo, hi = self.start.lr_factor_ci
        ci = f"{'0' if lo is None else f'{lo:.3g}'}..{'inf' if hi is None else f'{hi:.3g}'}"
        wide = "".join(f"; the {name} range widened to one grid step past it" for name in self.widened)
        return (f"  starts at the recommendation: lr x{self.lr_factor:g}, warmup {self.warmup} "
                f"updates, the search's first candidate (its lr factor interval {ci} x the "
                f"study's reference lr){wide}; {self.start.source}")

    def as_json(self) -> dict[str, Any]:
        return {"lr_factor": self.lr_factor, "warmup": self.warmup, "widened": list(self.widened),
                "recommendation": self.start.as_json()}


@dataclass(frozen=True)
class SolvePlan:
    sweep: Sweep
    world_size: int
    space: SearchSpace
    #: the baseline at seeds first_seed..first_seed + BASELINE_SEEDS - 1
    baseline_rows: list[PlanRow]
    budget: float
    candidates: int
    #: trial-epochs set aside for the verification's first look
    verify_reserve: float
    #: epochs one candidate trains (at most: it stops at the target)
    candidate_epochs: float
    search_seed: int
    sampler: str = "tpe"
    #: the study's measured noise scale (samples) the lr factor's low end was placed with
    noise_scale: float | None = None
    #: the search's first candidate (solve --start-from-recommendation), None: the named rules'
    first: FirstCandidate | None = None

    @property
    def baseline_trial_epochs(self) -> float:
        return sum(r.epochs for r in self.baseline_rows)

    @property
    def samples(self) -> int:
        """Candidates the search may run: what the budget leaves after the baseline seeds and
        the verification, at a whole run each (early stops leave some unspent)."""
        if self.sampler == "grid":  # every point once, whatever the budget
            return self.space.grid_size()
        left = self.budget - self.verify_reserve - self.baseline_trial_epochs
        return max(DIMENSIONS, math.floor(left / self.candidate_epochs + 1e-9))

    @property
    def grid_trial_epochs(self) -> float:
        """A grid over the same space at the search's resolution, one seed per point."""
        return self.space.grid_size() * self.candidate_epochs

    def space_json(self) -> dict[str, Any]:
        """The space searched, as `solve --json` gives it: the ranges, why the lr factor's low
        end lies where it does, and the noise scale that placed it."""
        lr, w = self.space.lr_factor, self.space.warmup
        return {"lr_factor": [lr.low, lr.high], "warmup": [w.low, w.high],
                "lr_low_reason": self.space.lr_low_reason, "noise_scale": self.noise_scale,
                "start": None if self.first is None else self.first.as_json()}

    def factor_bounds(self) -> tuple[float, float]:
        """The lr factor's range as candidates are drawn from it: the space's, widened to its
        ends rounded to FACTOR_DIGITS, so every rounded factor (a grid point's, a journaled
        candidate's) lies inside it."""
        rng = self.space.lr_factor
        return min(rng.low, round_factor(rng.low)), max(rng.high, round_factor(rng.high))

    def grid_points(self) -> list[dict[str, float | int]]:
        """The grid's candidates, in an order shuffled by the search seed: a grid knows nothing
        of where the best lies, and an order that ran the small lr factors first would spend
        more before the early stop has scores to compare with."""
        points: list[dict[str, float | int]] = [
            {"lr_factor": round_factor(f), "warmup": w} for f, w in self.space.grid()]
        random.Random(self.search_seed).shuffle(points)
        return points

    def candidate_row(self, number: int, lr_factor: float, warmup: int, seed: int,
                      target: float, baseline_epochs: float, cluster: ClusterInfo) -> PlanRow:
        """Candidate ``number``'s trial: stopped at the target, scored with every eval."""
        spec = self.sweep.spec
        mode = metric_mode(self.sweep)
        row = row_for(self.sweep, {"world_size": self.world_size, "warmup_rule": warmup,
                                   "scaling_rule": lr_factor, "seed": seed}, cluster)
        row.trial = row.trial.model_copy(update={
            "name": f"c{number:02d}-{row.name}",
            "stop_at_target": StopAtTarget(metric=spec.target.metric, value=target, mode=mode,
                                           smoothing=spec.target.smoothing),
            "objective": SearchObjective(metric=spec.target.metric, target=target, mode=mode,
                                         baseline_epochs=baseline_epochs,
                                         smoothing=spec.target.smoothing)})
        return row


def round_factor(x: float) -> float:
    return float(f"{x:.{FACTOR_DIGITS}g}")


def _baseline_combo(sweep: Sweep) -> dict[str, Any]:
    spec = sweep.spec
    base = dict(spec.baseline) if spec.baseline is not None else (
        {"world_size": sweep.reference_world_size, "warmup_rule": "fixed", "scaling_rule": "none"}
        if sweep.reference_world_size else {})
    if not base.get("world_size"):
        raise InputError(sweep.source, [Problem("baseline", spec.baseline, (
            "solve scores every candidate against the baseline arm: give baseline: {world_size: "
            "..., warmup_rule: fixed, scaling_rule: none} (or reference.world_size)"))])
    free = [k for k in spec.axes.free_axes() if k not in base]
    if free:
        raise InputError(sweep.source, [Problem(f"axes.{free[0]}", spec.axes.free_axes()[free[0]], (
            "solve searches lr and warmup with every other setting fixed: set it in the "
            f"baseline (baseline: {{{free[0]}: ...}}) or leave the axis out"))])
    return {"warmup_rule": "fixed", "scaling_rule": "none", **base}


def plan_solve(sweep: Sweep, cluster: ClusterInfo, *, world_size: int, budget: float | None,
               candidates: int, lr: tuple[float, float] | None,
               warmup: tuple[float, float] | None, search_seed: int = 0,
               sampler: str = "tpe", noise_scale: float | None = None,
               lr_low_from: str = "models", start: StartPoint | None = None) -> SolvePlan:
    """The solve of ``sweep`` at ``world_size``, or the InputError that refuses it.
    ``noise_scale``: the study's measured one (samples), None where it measured none; with
    ``lr_low_from`` (LR_LOW_SOURCES) it places the lr factor's low end when ``lr`` is None.
    ``start``: the recommendation the search starts at (:func:`_started`)."""
    spec = sweep.spec
    if sampler not in SAMPLERS:
        raise InputError("solve", [Problem("--sampler", sampler, f"must be one of {', '.join(SAMPLERS)}")])
    if lr_low_from not in LR_LOW_SOURCES:
        raise ValueError(f"lr_low_from must be one of {LR_LOW_SOURCES}, but got {lr_low_from!r}")
    if spec.workload.train_loop is not None:
        raise InputError(sweep.source, [Problem("workload.train_loop", spec.workload.train_loop, (
            "solve scores candidates inside the built-in loop; an own Ray Train loop cannot "
            "report that score yet: run its candidates as a study (axes.scaling_rule takes an "
            "lr factor, axes.warmup_rule an update count)"))])
    if candidates < 1:
        raise InputError("solve", [Problem("--candidates", candidates, "must be at least 1")])
    combo = _baseline_combo(sweep)
    if world_size == combo["world_size"]:
        raise InputError("solve", [Problem("--world-size", world_size, (
            "is the baseline's world size: solve finds lr and warmup at another one"))])
    first = spec.replicates.first_seed if spec.replicates else 0
    seeds = range(first, first + BASELINE_SEEDS)
    baseline_rows = [row_for(sweep, {**combo, "seed": s}, cluster) for s in seeds]
    ref = baseline_rows[0]
    at_m = _row_at(sweep, world_size, cluster, ref)
    if ref.trial.scheduler.warmup_steps is None:
        raise InputError(sweep.source, [Problem("scheduler.type", ref.scheduler, (
            "has no warmup to search: solve searches lr and warmup; use a schedule with a "
            "warmup (docs/schedules.md)"))])
    low, why = _lr_low(lr, lr_low_from, ref.trial.optimizer.type, at_m.global_batch,
                       ref.global_batch, noise_scale)
    space = default_space(world_size, at_m.global_batch / ref.global_batch, ref.lr,
                          ref.warmup_steps, lr=lr, warmup=warmup, lr_low=low, lr_low_reason=why)
    bad = space.lr_factor.problems() + space.warmup.problems()
    if bad:
        raise InputError("solve", [Problem(f"--{f.partition('.')[0]}", v, f"{f}: {why}")
                                   for f, v, why in bad])
    first_candidate = None
    if start is not None:
        space, first_candidate = _started(space, start, at_m.global_batch, ref.lr, sampler,
                              given_lr=lr is not None, given_warmup=warmup is not None)
    replicates = spec.replicates.min if spec.replicates else DEFAULT_REPLICATES["min"]
    reserve = (candidates * at_m.epochs + ref.epochs) * replicates
    baseline_epochs = sum(r.epochs for r in baseline_rows)
    least = min_budget(at_m.epochs, DIMENSIONS, baseline_epochs, reserve)
    if sampler == "grid":
        if budget is not None:
            raise InputError("solve", [Problem("--budget", budget, (
                "does not apply to --sampler grid, which runs every point of its grid once: "
                "leave it out"))])
        # what the grid costs at most: no candidate stopped early
        budget = baseline_epochs + space.grid_size() * at_m.epochs + reserve
    budget = DEFAULT_BUDGET if budget is None else budget
    if not budget >= least:
        raise InputError("solve", [Problem("--budget", budget, (
            f"must be at least {least:g} trial-epochs: the {BASELINE_SEEDS} baseline seeds "
            f"({baseline_epochs:g}), one candidate per searched dimension ({DIMENSIONS} x "
            f"{at_m.epochs:g}) and the verification's first look ({candidates} candidate(s) and "
            f"the baseline x {replicates} seeds: {reserve:g})"))])
    return SolvePlan(sweep=sweep, world_size=world_size, space=space, baseline_rows=baseline_rows,
                     budget=budget, candidates=candidates, verify_reserve=reserve,
                     candidate_epochs=at_m.epochs, search_seed=search_seed, sampler=sampler,
                     noise_scale=noise_scale, first=first_candidate)


#: how solve --start-from-recommendation is named in its refusals
START_FLAG = "--start-from-recommendation"


def _started(space: SearchSpace, start: StartPoint, batch: float, reference_lr: float, sampler: str,
            *, given_lr: bool, given_warmup: bool) -> tuple[SearchSpace, FirstCandidate]:
    """The space that holds the recommendation, and the search's first candidate there. The
    space is never narrowed to the recommendation's interval (a model's interval, whose
    assumptions the search is there to test); a default range that does not hold the point is
    widened to one grid step past it; a range the user gave must hold it."""
    if sampler == "grid":
        raise InputError("solve", [Problem(START_FLAG, True, (
            "does not apply to --sampler grid, which runs every point of its grid in an order "
            "of its own: leave one of them out"))])
    if not math.isclose(start.global_batch, batch, rel_tol=1e-9):
        raise InputError("solve", [Problem(START_FLAG, f"global batch {start.global_batch:g}", (
            f"the recommendation is for another global batch than the solve's at M ({batch:g}): "
            "the study and the sweep differ in batch per worker; leave the flag out"))])
    scale = 1.0 if start.reference_lr is None else start.reference_lr / reference_lr
    factor = round_factor(start.lr_factor * scale)
    warmup = max(1, start.warmup)
    lr, w = space.lr_factor, space.warmup
    for rng, value, given, flag in ((lr, factor, given_lr, "--lr"), (w, warmup, given_warmup, "--warmup")):
        if given and not rng.low <= value <= rng.high:
            raise InputError("solve", [Problem(flag, f"{rng.low:g},{rng.high:g}", (
                f"does not hold the recommendation's {rng.name} {value:g} that {START_FLAG} starts "
                "at: widen it, or leave it out"))])
    widened = []
    if not lr.low <= factor <= lr.high:
        widened.append(lr.name)
        lr = Range(lr.name, min(lr.low, factor / GRID_STEP), max(lr.high, factor * GRID_STEP))
    if not w.low <= warmup <= w.high:
        widened.append(w.name)
        w = Range(w.name, min(w.low, max(1.0, warmup / GRID_STEP)), max(w.high, warmup * GRID_STEP))
    return (replace(space, lr_factor=lr, warmup=w),
            FirstCandidate(factor, warmup, start, tuple(widened)))


def _lr_low(lr: tuple[float, float] | None, lr_low_from: str, optimizer_type: str, batch: float,
            reference_batch: float, noise_scale: float | None) -> tuple[float | None, str]:
    """The lr factor's low end (None: the sqrt rule) and why it lies there."""
    if lr is not None:
        return None, "as given (--lr)"
    if lr_low_from == "sqrt":
        return None, ("the sqrt rule: this solve started before the low end came from the lr "
                      "models, and its resume searches the space it searched")
    got = lr_low(model_for(optimizer_type), batch, reference_batch, noise_scale)
    return got.low, got.reason


def _row_at(sweep: Sweep, world_size: int, cluster: ClusterInfo, ref: PlanRow) -> PlanRow:
    """The baseline's settings at M (fixed warmup, lr unchanged), or why M cannot train."""
    rule = ("must be at least 1" if world_size < 1 else None)
    row = None
    if rule is None:
        try:
            row = row_for(sweep, {**ref.axes, "world_size": world_size}, cluster)
        except (InputError, ValueError) as exc:
            rule = f"cannot be planned: {exc}"
    if row is not None and evaluations(row) < MIN_EVALS:
        rule = (f"makes {evaluations(row)} evaluation(s) in its {row.epochs:g} epochs ("
                f"{row.updates_per_epoch} update(s) per epoch at a global batch of "
                f"{row.global_batch}): fewer than {MIN_EVALS} cannot place a crossing, so no "
                "candidate could be scored")
    elif row is not None and not row.feasible:
        rule = f"cannot run here: {row.reason}"
    if rule is not None or row is None:
        raise InputError("solve", [Problem("--world-size", world_size, rule or "cannot be planned")])
    return row


def held_out_first_seed(plan: SolvePlan) -> int:
    """The verification's first seed: past every seed the search ran (its baseline seeds,
    which its candidates take in turn)."""
    return max(r.seed for r in plan.baseline_rows) + 1


def verification_spec(source: Path, overrides: list[str], plan: SolvePlan,
                      picks: list[tuple[float, int]], experiment: str, search: str) -> dict[str, Any]:
    """The sweep file (a mapping) that decides ``picks`` ((lr factor, warmup) at M) against
    the baseline with adaptive seeds, as the study decides its arms: the study's own file and
    overrides, its axes narrowed to the baseline and the picks, its seeds held out from the
    search's, naming the ``search`` parent run whose candidates they are."""
    data = load_mapping(source)
    problems = apply_overrides(data, parse_overrides(overrides))
    if problems:
        raise InputError(str(source), problems)
    base = plan.baseline_rows[0].axes
    ws = [base["world_size"], plan.world_size]
    warmups = list(dict.fromkeys([base["warmup_rule"], *(w for _, w in picks)]))
    factors = list(dict.fromkeys([base["scaling_rule"], *(f for f, _ in picks)]))
    wanted = {(base["world_size"], base["warmup_rule"], base["scaling_rule"])} | {
        (plan.world_size, w, f) for f, w in picks}
    data["axes"] = {"world_size": ws, "warmup_rule": warmups, "scaling_rule": factors}
    data["exclude"] = [{"world_size": a, "warmup_rule": w, "scaling_rule": f}
                       for a, w, f in itertools.product(ws, warmups, factors)
                       if (a, w, f) not in wanted]
    # seeds the search never ran: a candidate was picked on its own seed's trial, paired with
    # that baseline seed's, so a verification pair at that seed repeats the very pair that won
    # (the same initialisation and data order) and carries its luck into the interval
    replicates = dict(data.get("replicates") or DEFAULT_REPLICATES)
    replicates["first_seed"] = held_out_first_seed(plan)
    data["replicates"] = replicates
    data["baseline"] = {k: base[k] for k in FIXED_AXES if k != "seed"}
    for key in ("search", "verifies", "stop_at_target"):
        data.pop(key, None)
    recipe = data.get("recipe")
    if isinstance(recipe, str) and not Path(recipe).is_absolute():
        found = next((p for p in recipe_candidates(recipe, source) if p.is_file()), None)
        data["recipe"] = str((found or Path(recipe)).resolve())
    data["name"] = experiment
    data["solve_search"] = search
    data["description"] = (f"verification of `scalesweep solve` at world size {plan.world_size}: "
                           f"{len(picks)} candidate(s) (lr factor, warmup) against the baseline")
    return data
