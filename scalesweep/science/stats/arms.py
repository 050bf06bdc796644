"""Arms: a trial's settings minus its seed. The seeds of an arm are replicates; this module
turns their crossings into the per-arm numbers that `run`, the summary JSON, the report and
`advise` show. Pure: no torch, no Ray, no MLflow.

Also here: the one target every seed is measured against (:func:`mean_curve_target`): the
baseline arm's seeds' curves averaged eval by eval, smoothed as configured, its best, loosened
by the relative slack — so no single seed's dip sets the target.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scalesweep.science.stats.convergence import (
    Axis,
    EvalPoint,
    Located,
    Mode,
    best_value,
    resolve_target,
    smooth,
)
from scalesweep.science.stats.decisions import BASELINE, DEFAULT_MARGIN, Decision, decide
from scalesweep.science.stats.levels import (
    Conditioning,
    LevelRatio,
    baseline_best,
    conditioning,
    mean_curve,
    ratio_by_level,
    well_conditioned_level,
)
from scalesweep.science.stats.replicates import (
    CONFIDENCE,
    METHOD,
    Comparison,
    MedianInterval,
    Observation,
    compare,
    median_interval,
)

#: the clocks each arm reports a median on
ARM_CLOCKS: tuple[Axis, ...] = ("epochs", "updates", "samples", "seconds")


@dataclass(frozen=True)
class TrialCrossing:
    """One trial as an arm sees it."""

    arm: str
    seed: int
    located: Located | None  # None: no target could be resolved, or the trial has no evals
    #: the trial's evaluations of the target metric (for the ratios at every level)
    curve: Sequence[EvalPoint] = ()


@dataclass(frozen=True)
class Rules:
    """How arms are judged: the confidence each interval is read at (the design's per-look
    one), the equivalence margin, and the levels of time to quality."""

    confidence: float = CONFIDENCE
    margin: float = DEFAULT_MARGIN
    levels: tuple[float, ...] = ()
    mode: Mode = "min"
    smoothing: float = 0.0
    #: the headline target every seed was measured against (None: per seed, or unknown), for
    #: the conditioning check on the baseline arm
    target: float | None = None


@dataclass
class ArmSummary:
    arm: str
    baseline_arm: str | None
    n_seeds: int
    n_reached: int  # interpolated crossings (a crossing at the first eval is a bound: not counted)
    n_at_first_eval: int
    medians: dict[str, MedianInterval] = field(default_factory=dict)  # clock -> median
    #: per-seed epochs ratio trial / baseline (>1: slower per epoch than the baseline arm)
    epochs_ratio: Comparison | None = None
    #: per-seed updates speedup baseline / trial (Shallue et al.; >1: fewer updates)
    speedup: Comparison | None = None
    #: the answer at the headline target (docs/design.md §4, "Decisions")
    decision: Decision | None = None
    margin: float = DEFAULT_MARGIN
    #: the paired epochs ratio at every level of time to quality
    levels: list[LevelRatio] = field(default_factory=list)
    #: the baseline arm only: how well the headline target pins its crossing down, and the
    #: lowest level that would be well conditioned
    conditioning: Conditioning | None = None
    suggested_level: float | None = None

    @property
    def is_baseline(self) -> bool:
        return self.baseline_arm == self.arm

    def verdict(self) -> str:
        """One line on the per-epoch comparison with the baseline arm, resolved or not."""
        if self.is_baseline:
            return "baseline"
        c = self.epochs_ratio
        if c is None or c.ratios.n == 0:
            return "no seed paired with the baseline arm"
        n = c.ratios.n
        if c.direction == "above":
            return f"slower per epoch than the baseline (resolved with {n} seeds)"
        if c.direction == "below":
            return f"faster per epoch than the baseline (resolved with {n} seeds)"
        side = max(c.n_above, c.n_below)
        if c.seeds_needed is None:
            needed = "no majority of seeds lies clearly on one side of the baseline"
        elif side == n:
            needed = f"~{c.seeds_needed} seeds would resolve it if they keep agreeing"
        else:
            needed = f"~{c.seeds_needed} seeds would resolve it if they keep splitting {side} of {n}"
        return f"not resolved with {n} seed{'s' if n != 1 else ''}: {needed}"

    def as_json(self, axes: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The arms.json object (docs/design.md §4): intervals as [lo, hi], null where
        infinite or undefined; ``*_median_kind`` says how to read a median that is a bound."""
        out: dict[str, Any] = {"arm": self.arm, "axes": dict(axes or {}),
                               "baseline_arm": self.baseline_arm, "n_seeds": self.n_seeds,
                               "n_reached": self.n_reached, "n_at_first_eval": self.n_at_first_eval}
        for clock, mi in self.medians.items():
            out.update(_median_json(f"{clock}_to_target", mi))
        for name, comp in (("epochs_ratio_vs_baseline", self.epochs_ratio),
                           ("speedup_vs_baseline", self.speedup)):
            if comp is None:
                out.update({f"{name}_median": None, f"{name}_median_kind": None,
                            f"{name}_ci": None, f"{name}_n_paired": 0})
                continue
            out.update(_median_json(name, comp.ratios))
            out[f"{name}_n_paired"] = comp.ratios.n
        c = self.epochs_ratio
        out["resolved_vs_baseline"] = bool(c is not None and c.direction != "unresolved")
        out["direction_vs_baseline"] = None if c is None else c.direction
        out["seeds_needed"] = None if c is None else c.seeds_needed
        out["verdict"] = self.verdict()
        out["decision"] = BASELINE if self.is_baseline else (self.decision or "not resolved")
        out["equivalence_margin"] = self.margin
        out["confidence"] = CONFIDENCE if c is None else c.confidence
        out["method"] = METHOD
        out["ratio_by_target"] = [lv.as_json() for lv in self.levels]
        if (cond := self.conditioning) is not None:
            out["conditioning"] = {"target": cond.target, "drop": cond.drop, "spread": cond.spread,
                                   "ok": cond.ok, "suggested_level": self.suggested_level}
        return out

    def decided_levels(self) -> dict[str, list[float]]:
        """decision -> the levels it holds at (not resolved left out)."""
        out: dict[str, list[float]] = {}
        for lv in self.levels:
            if lv.decision != "not resolved":
                out.setdefault(lv.decision, []).append(lv.level)
        return out


def median_text(arm: Mapping[str, Any], name: str) -> str:
    """An arms.json median as people read it: "4.32", "≤ 1", "≥ 1.39", "1.25–1.3" (between
    two seeds' brackets), "never", "unknown"."""
    value, kind = arm.get(f"{name}_median"), arm.get(f"{name}_median_kind")
    if kind == "range":
        bounds = arm.get(f"{name}_median_bounds") or [None, None]
        if None in bounds:
            return "range"
        return f"{bounds[0]:.3g}–{bounds[1]:.3g}"
    if kind in (None, "never", "unknown"):
        return kind or "—"
    prefix = {"at_most": "≤ ", "at_least": "≥ "}.get(kind, "")
    return f"{prefix}{value:.3g}"


def levels_text(arm: Mapping[str, Any]) -> str:
    """Where an arm is decided along its levels: "slower at 0.5, 1, 2; equivalent at 0.1"."""
    by: dict[str, list[str]] = {}
    for lv in arm.get("ratio_by_target") or []:
        if lv.get("decision") not in (None, "not resolved"):
            by.setdefault(lv["decision"], []).append(f"{lv['level']:g}")
    if not arm.get("ratio_by_target") or arm.get("decision") == BASELINE:
        return ""
    if not by:
        return "none"
    return "; ".join(f"{d} at {', '.join(ls)}" for d, ls in by.items())


def conditioning_text(arm: Mapping[str, Any]) -> str | None:
    """The baseline arm's warning (from its arms.json object) when the headline target sits
    where its curve is flat, naming a level that does not."""
    c = arm.get("conditioning")
    if not c or c.get("ok"):
        return None
    level = c.get("suggested_level")
    better = ("no level of target.levels is better conditioned" if level is None
              else f"level {level:g} is well conditioned (target.levels)")
    return (f"warning: the target {c['target']:.4g} sits where the baseline arm's curve is flat: it "
            f"changes by {c['drop']:.3g} across the crossing's evals, less than its seeds' spread "
            f"there ({c['spread']:.3g}), so the crossing is mostly noise; {better}")


def interval_text(ci: Sequence[float | None] | None) -> str:
    """An arms.json interval: "[4, 4.5]", "[6, never]", or "n/a" (one seed)."""
    if ci is None:
        return "n/a"
    lo, hi = ci
    return f"[{'—' if lo is None else f'{lo:.3g}'}, {'never' if hi is None else f'{hi:.3g}'}]"


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _median_json(name: str, mi: MedianInterval) -> dict[str, Any]:
    return {
        f"{name}_median": mi.median.value,
        f"{name}_median_kind": mi.median.kind if mi.n else None,
        f"{name}_median_bounds": [_finite(mi.median.lo), _finite(mi.median.hi)] if mi.n else None,
        f"{name}_ci": None if mi.ci is None else [_finite(mi.ci[0]), _finite(mi.ci[1])],
        f"{name}_ci_coverage": mi.coverage,
        f"{name}_range": None if mi.spread is None else [_finite(mi.spread[0]), _finite(mi.spread[1])],
    }


def _observations(trials: Sequence[TrialCrossing], clock: Axis) -> dict[int, Observation]:
    """Seed -> observation on ``clock`` (seeds whose crossing that clock did not record are
    left out of that clock's median only)."""
    out = {}
    for t in trials:
        obs = None if t.located is None else t.located.observation(clock)
        if obs is not None:
            out[t.seed] = obs
    return out


def summarize_arms(trials: Sequence[TrialCrossing], baseline_arm: Mapping[str, str | None],
                   rules: Rules | None = None) -> list[ArmSummary]:
    """One summary per arm (in first-seen order). ``baseline_arm``: arm -> the arm its seeds
    are paired with (itself for the baseline). A trial without a crossing (no target, no
    evals) counts in ``n_seeds`` but has no observation: it is never silently reached."""
    rules = rules or Rules()
    by_arm: dict[str, list[TrialCrossing]] = {}
    for t in trials:
        by_arm.setdefault(t.arm, []).append(t)
    out = []
    for arm, mine in by_arm.items():
        base = baseline_arm.get(arm)
        located = [t.located for t in mine if t.located is not None]
        s = ArmSummary(arm=arm, baseline_arm=base, n_seeds=len(mine),
                       n_reached=sum(loc.kind == "interpolated" for loc in located),
                       n_at_first_eval=sum(loc.kind == "at_first_eval" for loc in located),
                       margin=rules.margin)
        s.medians = {c: median_interval(list(_observations(mine, c).values()), rules.confidence)
                     for c in ARM_CLOCKS}
        if base is not None and base != arm and base in by_arm:
            s.epochs_ratio = compare(_observations(mine, "epochs"),
                                     _observations(by_arm[base], "epochs"), rules.confidence)
            s.speedup = compare(_observations(by_arm[base], "updates"),
                                _observations(mine, "updates"), rules.confidence)
            mi = s.epochs_ratio.ratios
            s.decision = decide(mi.ci, mi.coverage is not None and mi.coverage >= rules.confidence,
                                rules.margin)
            s.levels = _levels(mine, by_arm[base], rules)
        if base == arm and rules.target is not None:
            _condition(s, mine, rules)
        out.append(s)
    return out


def _condition(s: ArmSummary, mine: Sequence[TrialCrossing], rules: Rules) -> None:
    assert rules.target is not None
    curves = _curves(mine)
    s.conditioning = conditioning(curves, rules.target, rules.mode, rules.smoothing)
    best = baseline_best(list(curves.values()), rules.mode, rules.smoothing)
    if s.conditioning is not None and not s.conditioning.ok and best is not None and rules.levels:
        s.suggested_level = well_conditioned_level(curves, best, rules.levels, rules.mode, rules.smoothing)


def _curves(trials: Sequence[TrialCrossing]) -> dict[int, Sequence[EvalPoint]]:
    return {t.seed: t.curve for t in trials if t.curve}


def _levels(mine: Sequence[TrialCrossing], base: Sequence[TrialCrossing], rules: Rules) -> list[LevelRatio]:
    if not rules.levels:
        return []
    base_curves = _curves(base)
    best = baseline_best(list(base_curves.values()), rules.mode, rules.smoothing)
    return ratio_by_level(_curves(mine), base_curves, best=best, mode=rules.mode,
                          smoothing=rules.smoothing, levels=rules.levels,
                          per_look=rules.confidence, margin=rules.margin)


def mean_curve_target(curves: Sequence[Sequence[EvalPoint]], mode: Mode, relative: float,
                      smoothing: float = 0.0) -> float | None:
    """The target from the baseline arm's seeds: best of their smoothed mean curve, loosened by
    ``relative``; None when the mean curve has no finite value."""
    mean = mean_curve(curves)
    best = best_value(smooth([p.value for p in mean], smoothing), mode) if mean else None
    return None if best is None else resolve_target(mode, relative=relative, baseline_best=best)
