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
from typing import Any, Protocol

from scalesweep.mlflow_names import ARM_PARAM, BASELINE_ARM_PARAM, EQUIVALENCE_MARGIN_PARAM, SPEEDUP_METRIC
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


class SeedCrossing(Protocol):
    """One trial as an arm sees it: :class:`TrialCrossing`, or a
    :class:`~scalesweep.science.stats.trial_summary.TrialSummary`."""

    @property
    def arm(self) -> str: ...

    @property
    def seed(self) -> int: ...

    @property
    def located(self) -> Located | None: ...  # None: no target could be resolved, or no evals

    @property
    def curve(self) -> Sequence[EvalPoint]: ...  # its evals of the target metric (the levels)


@dataclass(frozen=True)
class TrialCrossing:
    """One trial as an arm sees it, on its own."""

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


@dataclass(frozen=True)
class ArmSummary:
    arm: str
    baseline_arm: str | None
    n_seeds: int
    n_reached: int  # interpolated crossings (a crossing at the first eval is a bound: not counted)
    n_at_first_eval: int
    medians: Mapping[Axis, MedianInterval]  # clock -> median, in ARM_CLOCKS order
    #: per-seed epochs ratio trial / baseline (>1: slower per epoch than the baseline arm)
    epochs_ratio: Comparison | None = None
    #: per-seed updates speedup baseline / trial (Shallue et al.; >1: fewer updates)
    speedup: Comparison | None = None
    #: the answer at the headline target (docs/design.md §4, "Decisions"); None: no comparison
    decision: Decision | None = None
    margin: float = DEFAULT_MARGIN
    #: the paired epochs ratio at every level of time to quality
    levels: tuple[LevelRatio, ...] = ()
    #: the baseline arm only: how well the headline target pins its crossing down, and the
    #: lowest level that would be well conditioned
    conditioning: Conditioning | None = None
    suggested_level: float | None = None
    #: the settings that make the arm (its axes but the seed), as arms.json lists them
    axes: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_baseline(self) -> bool:
        return self.baseline_arm == self.arm

    @property
    def answer(self) -> str:
        """arms.json's ``decision``: ``baseline`` for the baseline arm, else the decision
        (``not resolved`` without a comparison)."""
        return BASELINE if self.is_baseline else (self.decision or "not resolved")

    @property
    def confidence(self) -> float:
        """The confidence the comparison was read at (the nominal one without a comparison)."""
        return CONFIDENCE if self.epochs_ratio is None else self.epochs_ratio.confidence

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
        tied = ""
        if c.n_tied:
            tied = (f"; {c.n_tied} of {n} seed{'s' if n != 1 else ''} crossed within the same evals "
                    "as the baseline (brackets straddle 1): evaluating more often "
                    "(training.eval_every_epochs) would tell them apart")
        return f"not resolved with {n} seed{'s' if n != 1 else ''}: {needed}{tied}"

    def as_json(self) -> dict[str, Any]:
        """The arms.json object (docs/design.md §4): intervals as [lo, hi], null where
        infinite or undefined; ``*_median_kind`` says how to read a median that is a bound."""
        out: dict[str, Any] = {ARM_PARAM: self.arm, "axes": dict(self.axes),
                               BASELINE_ARM_PARAM: self.baseline_arm, "n_seeds": self.n_seeds,
                               "n_reached": self.n_reached, "n_at_first_eval": self.n_at_first_eval}
        for clock, mi in self.medians.items():
            out.update(_median_json(f"{clock}_to_target", mi))
        for name, comp in (("epochs_ratio_vs_baseline", self.epochs_ratio),
                           (SPEEDUP_METRIC, self.speedup)):
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
        out["n_tied_within_evals"] = 0 if c is None else c.n_tied
        out["verdict"] = self.verdict()
        out["decision"] = self.answer
        out[EQUIVALENCE_MARGIN_PARAM] = self.margin
        out["confidence"] = self.confidence
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


def median_text(mi: MedianInterval | None) -> str:
    """A median as people read it: "4.32", "≤ 1", "≥ 1.39", "1.25–1.3" (between two seeds'
    brackets), "never", "unknown"; "—" without observations."""
    return "—" if mi is None or mi.n == 0 else mi.median.text()


def levels_text(arm: ArmSummary) -> str:
    """Where an arm is decided along its levels: "slower at 0.5, 1, 2; equivalent at 0.1"."""
    if not arm.levels or arm.is_baseline:
        return ""
    by = arm.decided_levels()
    if not by:
        return "none"
    return "; ".join(f"{d} at {', '.join(f'{x:g}' for x in xs)}" for d, xs in by.items())


def conditioning_text(arm: ArmSummary) -> str | None:
    """The baseline arm's warning when the headline target sits where its curve is flat,
    naming a level that does not."""
    c = arm.conditioning
    if c is None or c.ok:
        return None
    level = arm.suggested_level
    better = ("no level of target.levels is better conditioned" if level is None
              else f"level {level:g} is well conditioned (target.levels)")
    return (f"warning: the target {c.target:.4g} sits where the baseline arm's curve is flat: it "
            f"changes by {c.drop:.3g} across the crossing's evals, less than its seeds' spread "
            f"there ({c.spread:.3g}), so the crossing is mostly noise; {better}")


def interval_text(mi: MedianInterval | None) -> str:
    """A median's interval: "[4, 4.5]", "[6, never]", or "n/a" (one seed)."""
    if mi is None or mi.ci is None:
        return "n/a"
    lo, hi = _finite(mi.ci[0]), _finite(mi.ci[1])
    return f"[{'—' if lo is None else f'{lo:.3g}'}, {'never' if hi is None else f'{hi:.3g}'}]"


def ratios(comparison: Comparison | None) -> MedianInterval | None:
    """A paired comparison's ratios (None without a comparison)."""
    return None if comparison is None else comparison.ratios


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


def _observations(trials: Sequence[SeedCrossing], clock: Axis) -> dict[int, Observation]:
    """Seed -> observation on ``clock`` (seeds whose crossing that clock did not record are
    left out of that clock's median only)."""
    out = {}
    for t in trials:
        obs = None if t.located is None else t.located.observation(clock)
        if obs is not None:
            out[t.seed] = obs
    return out


def summarize_arms(trials: Sequence[SeedCrossing], baseline_arm: Mapping[str, str | None],
                   rules: Rules | None = None, axes: Mapping[str, Mapping[str, Any]] | None = None
                   ) -> list[ArmSummary]:
    """One summary per arm (in first-seen order). ``baseline_arm``: arm -> the arm its seeds
    are paired with (itself for the baseline); ``axes``: arm -> its settings. A trial without
    a crossing (no target, no evals) counts in ``n_seeds`` but has no observation: it is never
    silently reached; one that never reached is +inf in every median, never dropped."""
    rules = rules or Rules()
    by_arm: dict[str, list[SeedCrossing]] = {}
    for t in trials:
        by_arm.setdefault(t.arm, []).append(t)
    return [_arm(arm, mine, by_arm, baseline_arm.get(arm), rules, (axes or {}).get(arm, {}))
            for arm, mine in by_arm.items()]


def _arm(arm: str, mine: Sequence[SeedCrossing], by_arm: Mapping[str, Sequence[SeedCrossing]],
         base: str | None, rules: Rules, axes: Mapping[str, Any]) -> ArmSummary:
    located = [t.located for t in mine if t.located is not None]
    epochs_ratio = speedup = decision = None
    levels: tuple[LevelRatio, ...] = ()
    if base is not None and base != arm and base in by_arm:
        epochs_ratio = compare(_observations(mine, "epochs"), _observations(by_arm[base], "epochs"),
                               rules.confidence)
        speedup = compare(_observations(by_arm[base], "updates"), _observations(mine, "updates"),
                          rules.confidence)
        mi = epochs_ratio.ratios
        decision = decide(mi.ci, mi.coverage is not None and mi.coverage >= rules.confidence, rules.margin)
        levels = tuple(_levels(mine, by_arm[base], rules))
    cond, suggested = _condition(mine, rules) if base == arm and rules.target is not None else (None, None)
    return ArmSummary(
        arm=arm, baseline_arm=base, n_seeds=len(mine),
        n_reached=sum(loc.kind == "interpolated" for loc in located),
        n_at_first_eval=sum(loc.kind == "at_first_eval" for loc in located),
        medians={c: median_interval(list(_observations(mine, c).values()), rules.confidence)
                 for c in ARM_CLOCKS},
        epochs_ratio=epochs_ratio, speedup=speedup, decision=decision, margin=rules.margin,
        levels=levels, conditioning=cond, suggested_level=suggested, axes=dict(axes),
    )  # fmt: skip


def _condition(mine: Sequence[SeedCrossing], rules: Rules) -> tuple[Conditioning | None, float | None]:
    """The baseline arm's conditioning at the headline target, and the lowest well-conditioned
    level when the target is not."""
    assert rules.target is not None
    curves = _curves(mine)
    cond = conditioning(curves, rules.target, rules.mode, rules.smoothing)
    best = baseline_best(list(curves.values()), rules.mode, rules.smoothing)
    if cond is None or cond.ok or best is None or not rules.levels:
        return cond, None
    return cond, well_conditioned_level(curves, best, rules.levels, rules.mode, rules.smoothing)


def _curves(trials: Sequence[SeedCrossing]) -> dict[int, Sequence[EvalPoint]]:
    return {t.seed: t.curve for t in trials if t.curve}


def _levels(mine: Sequence[SeedCrossing], base: Sequence[SeedCrossing], rules: Rules) -> list[LevelRatio]:
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
