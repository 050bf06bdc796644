"""Arms: a trial's settings minus its seed. The seeds of an arm are replicates; this module
turns their crossings into the per-arm numbers that `run`, the summary JSON, the report and
`advise` show. Pure: no torch, no Ray, no MLflow.

Which target each pair of seeds is measured against is :mod:`scalesweep.science.stats.targets`'
(cross-fitted, frozen at the first look); each trial carries its own, and the best it was
loosened from, which the levels loosen too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from scalesweep.mlflow_names import (
    ARM_PARAM,
    BASELINE_ARM_PARAM,
    EQUIVALENCE_MARGIN_PARAM,
    SPEEDUP_METRIC,
    TARGET_NOTES_PARAM,
)
from scalesweep.science.stats.convergence import (
    Axis,
    EvalPoint,
    Located,
)
from scalesweep.science.stats.decisions import BASELINE, DEFAULT_MARGIN, Decision, change_text, decide_pairs
from scalesweep.science.stats.levels import (
    CONDITIONING_METHOD,
    Conditioning,
    LevelRatio,
    baseline_best,
    conditioning,
    ratio_by_level,
    ratio_median_json,
    well_conditioned_level,
)
from scalesweep.science.stats.replicates import (
    CONFIDENCE,
    PAIRED_METHOD,
    Comparison,
    MedianInterval,
    Observation,
    compare,
    finite_or_none,
    median_interval,
    paired_ratios,
)
from scalesweep.science.stats.rules import StudyRules

#: arms.json's direction_vs_baseline, read off the decision (never off the interval alone)
_DIRECTION = {"slower": "above", "faster": "below", "equivalent": "within", "not resolved": "unresolved",
              BASELINE: None}
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

    @property
    def target_reference_best(self) -> float | None: ...  # the best its target was loosened from


@dataclass(frozen=True)
class TrialCrossing:
    """One trial as an arm sees it, on its own."""

    arm: str
    seed: int
    located: Located | None  # None: no target could be resolved, or the trial has no evals
    #: the trial's evaluations of the target metric (for the ratios at every level)
    curve: Sequence[EvalPoint] = ()
    #: the baseline best its target was loosened from (the levels loosen it too)
    target_reference_best: float | None = None


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
    #: the baseline arm only: whether the headline target lets the pairs compared with it
    #: decide (the noise of their log ratios against the margin), and the lowest level that
    #: would be well conditioned
    conditioning: Conditioning | None = None
    suggested_level: float | None = None
    #: the settings that make the arm (its axes but the seed), as arms.json lists them
    axes: Mapping[str, Any] = field(default_factory=dict)
    #: the baseline arm only: how its target was set (seeds left out of it, and why)
    notes: tuple[str, ...] = ()
    #: the design's most seeds (adaptive), past which none are advised
    max_seeds: int | None = None

    @property
    def seeds_needed(self) -> int | None:
        """For an arm not resolved in an adaptive design, about how many seeds would decide it
        within the design's most; None otherwise (decided, a fixed design, or past its max:
        a look beyond the plan would void the design's error rate)."""
        c = self.epochs_ratio
        return None if c is None or self.decision != "not resolved" else c.seeds_needed

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
        """The decision in words, with the interval it rests on: every flag, table and report
        says the same as :attr:`decision` (one word per arm)."""
        if self.is_baseline:
            return "baseline"
        c = self.epochs_ratio
        if c is None or c.ratios.n == 0:
            return "no seed paired with the baseline arm"
        n, mi = c.ratios.n, c.ratios
        seeds = f"{n} seed{'s' if n != 1 else ''}"
        if self.decision == "equivalent":
            return f"equivalent within {self.margin * 100:g} % ({change_text(mi.ci)}; {seeds})"
        if self.decision in ("slower", "faster"):
            return f"{self.decision} per epoch than the baseline ({change_text(mi.ci)}; {seeds})"
        if self.max_seeds is None:
            needed = "a fixed design ends here (another block of seeds is a new study)"
        elif n >= self.max_seeds:
            needed = f"the design's most seeds ({self.max_seeds}) are spent: it ends undecided"
        elif self.seeds_needed is None:
            needed = (f"pairs like these would not decide within the design's most seeds "
                      f"({self.max_seeds})")
        else:
            needed = f"pairs like these would decide at ~{self.seeds_needed} seeds"
        tied = ""
        if c.n_tied:
            tied = (f"; {c.n_tied} of {n} seed{'s' if n != 1 else ''} crossed within the same evals "
                    "as the baseline (brackets straddle 1): evaluating more often "
                    "(training.eval_every_epochs) would tell them apart")
        return f"not resolved with {seeds} ({change_text(mi.ci)}): {needed}{tied}"

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
                out.update({**ratio_median_json(None, name), f"{name}_ci": None, f"{name}_ci_coverage": None,
                            f"{name}_range": None, f"{name}_n_paired": 0})
                continue
            out.update(_median_json(name, comp.ratios))
            out[f"{name}_n_paired"] = comp.ratios.n
        c = self.epochs_ratio
        # resolved means decided: the one decision, not the interval's side of 1 on its own
        out["resolved_vs_baseline"] = self.decision is not None and self.decision != "not resolved"
        out["direction_vs_baseline"] = None if c is None else _DIRECTION[self.answer]
        out["seeds_needed"] = self.seeds_needed
        out["n_tied_within_evals"] = 0 if c is None else c.n_tied
        out["verdict"] = self.verdict()
        out["decision"] = self.answer
        out[EQUIVALENCE_MARGIN_PARAM] = self.margin
        out["confidence"] = self.confidence
        out["method"] = PAIRED_METHOD
        out["ratio_by_target"] = [lv.as_json() for lv in self.levels]
        out["decision_at_every_level"] = self.every_level
        if (cond := self.conditioning) is not None:
            out["conditioning"] = {"target": cond.target, "method": CONDITIONING_METHOD,
                                   "n_pairs": cond.n_pairs, "n_arms": cond.n_arms,
                                   "log_ratio_scale": cond.scale, "seeds": cond.seeds,
                                   "confidence": cond.confidence,
                                   "expected_half_width": cond.expected_half_width,
                                   "threshold": cond.threshold, "ok": cond.ok,
                                   "suggested_level": self.suggested_level}
        if self.is_baseline:
            out[TARGET_NOTES_PARAM] = list(self.notes)
        return out

    @property
    def every_level(self) -> Decision | None:
        """The decision every level holds once the levels are one family, when there are two
        or more and all of them are decided alike (docs/design.md §4, "Ratios at every
        level"); None otherwise."""
        decided = {lv.decision for lv in self.levels}
        if len(self.levels) < 2 or len(decided) != 1:
            return None
        (only,) = decided
        return None if only == "not resolved" else only

    def decided_levels(self, exploratory: bool = False) -> dict[str, list[float]]:
        """decision -> the levels it holds once the levels are a family (not resolved left
        out); ``exploratory``: those decided by their own interval past where the family's
        sequence stopped, at that decision."""
        out: dict[str, list[float]] = {}
        for lv in self.levels:
            if exploratory and lv.exploratory:
                out.setdefault(lv.marginal, []).append(lv.level)
            elif not exploratory and lv.decision != "not resolved":
                out.setdefault(lv.decision, []).append(lv.level)
        return out


def ratios(comparison: Comparison | None) -> MedianInterval | None:
    """A paired comparison's ratios (None without a comparison)."""
    return None if comparison is None else comparison.ratios


def paired_epochs_ratios(trials: Sequence[SeedCrossing], arm: str, baseline_arm: str
                         ) -> dict[int, Observation]:
    """Per seed, ``arm``'s epochs to target over ``baseline_arm``'s with the same seed: the
    pairs an arm's ``epochs_ratio`` is the median of (``compare`` pairs them the same way), for
    a reader that pools them over several studies (the ledger's solve lines)."""
    mine = [t for t in trials if t.arm == arm]
    base = [t for t in trials if t.arm == baseline_arm]
    return paired_ratios(_observations(mine, "epochs"), _observations(base, "epochs"))


def _median_json(name: str, mi: MedianInterval) -> dict[str, Any]:
    return {
        **ratio_median_json(mi, name),
        f"{name}_ci": None if mi.ci is None else [finite_or_none(end) for end in mi.ci],
        f"{name}_ci_coverage": mi.coverage,
        f"{name}_range": None if mi.spread is None else [finite_or_none(end) for end in mi.spread],
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
                   rules: StudyRules | None = None, axes: Mapping[str, Mapping[str, Any]] | None = None
                   ) -> list[ArmSummary]:
    """One summary per arm (in first-seen order). ``baseline_arm``: arm -> the arm its seeds
    are paired with (itself for the baseline); ``axes``: arm -> its settings. A trial without
    a crossing (no target, no evals) counts in ``n_seeds`` but has no observation: it is never
    silently reached; one that never reached is +inf in every median, never dropped."""
    rules = rules or StudyRules()
    by_arm: dict[str, list[SeedCrossing]] = {}
    for t in trials:
        by_arm.setdefault(t.arm, []).append(t)
    found = [_arm(arm, mine, by_arm, baseline_arm.get(arm), rules, (axes or {}).get(arm, {}))
             for arm, mine in by_arm.items()]
    return _with_conditioning(found, rules)


def _arm(arm: str, mine: Sequence[SeedCrossing], by_arm: Mapping[str, Sequence[SeedCrossing]],
         base: str | None, rules: StudyRules, axes: Mapping[str, Any]) -> ArmSummary:
    located = [t.located for t in mine if t.located is not None]
    epochs_ratio = speedup = decision = None
    levels: tuple[LevelRatio, ...] = ()
    if base is not None and base != arm and base in by_arm:
        decision, epochs_ratio = decide_pairs(
            _observations(mine, "epochs"), _observations(by_arm[base], "epochs"), rules.confidence_for,
            rules.margin, rules.max_seeds)
        speedup = compare(_observations(by_arm[base], "updates"), _observations(mine, "updates"),
                          rules.confidence_for)
        levels = tuple(_levels(mine, by_arm[base], rules, decision))
    return ArmSummary(
        arm=arm, baseline_arm=base, n_seeds=len(mine),
        n_reached=sum(loc.kind == "interpolated" for loc in located),
        n_at_first_eval=sum(loc.kind == "at_first_eval" for loc in located),
        medians={c: median_interval(obs, rules.confidence_for(len(obs)))
                 for c in ARM_CLOCKS for obs in [list(_observations(mine, c).values())]},
        epochs_ratio=epochs_ratio, speedup=speedup, decision=decision, margin=rules.margin,
        levels=levels, axes=dict(axes),
        notes=rules.notes if base == arm else (), max_seeds=rules.max_seeds,
    )  # fmt: skip


def _with_conditioning(summaries: list[ArmSummary], rules: StudyRules) -> list[ArmSummary]:
    """Each baseline arm with the conditioning check at the headline target, read from the
    pairs of the arms compared with it, and the lowest well-conditioned level when the target
    is not."""
    out = []
    for arm in summaries:
        others = [a for a in summaries if a.baseline_arm == arm.arm and not a.is_baseline]
        if not arm.is_baseline or rules.target is None or not others:
            out.append(arm)
            continue
        pairs = [a.epochs_ratio.point_log_ratios for a in others if a.epochs_ratio is not None]
        seeds = rules.max_seeds or max(a.epochs_ratio.ratios.n for a in others if a.epochs_ratio is not None)
        confidence = rules.confidence_for(seeds)
        cond = conditioning(pairs, rules.target, seeds=seeds, confidence=confidence, margin=rules.margin)
        suggested = None
        if cond is not None and not cond.ok:
            suggested = well_conditioned_level([a.levels for a in others], seeds=seeds, confidence=confidence,
                                               margin=rules.margin)
        out.append(replace(arm, conditioning=cond, suggested_level=suggested))
    return out


def _curves(trials: Sequence[SeedCrossing]) -> dict[int, Sequence[EvalPoint]]:
    return {t.seed: t.curve for t in trials if t.curve}


def _levels(mine: Sequence[SeedCrossing], base: Sequence[SeedCrossing], rules: StudyRules,
            headline: Decision) -> list[LevelRatio]:
    """The ratio at every level, each seed's pair against its own (cross-fitted) best; trials
    logged before bests were cross-fitted share the baseline's mean-curve best."""
    if not rules.levels:
        return []
    bests: dict[int, float | None] = {t.seed: t.target_reference_best for t in base}
    if not any(b is not None for b in bests.values()):
        shared = baseline_best(list(_curves(base).values()), rules.mode, rules.smoothing)
        bests = dict.fromkeys(bests, shared)
    return ratio_by_level(_curves(mine), _curves(base), bests=bests, mode=rules.mode,
                          smoothing=rules.smoothing, levels=rules.levels, per_look=rules.confidence_for,
                          margin=rules.margin, headline_level=rules.headline_level, headline=headline)
