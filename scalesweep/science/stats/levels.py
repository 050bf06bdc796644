"""Time to quality: the paired epochs ratio of an arm at every loss level, not at one target
(docs/design.md §4, "Ratios at every level"), and whether a target is well conditioned.

A *level* is read like ``target.relative_to_baseline``: the target at level r is the best of
the baseline arm's seeds' mean curve loosened by r (best · (1 + r) for a positive loss), so
level 0.1 is 10 % above the baseline's best and level 2 is three times it, early in training.

A target can be ill conditioned: where the curves are flat, or the seeds cross far apart, a
tiny vertical difference is a large horizontal one, and the ratio is mostly noise.
:func:`conditioning` measures it as the decision sees it: the spread of the paired log
ratios at the target, turned into the half-width the design's last look can expect. One
wider than half the margin is flagged, and the lowest level that is not is named.
Pure: no torch, no Ray, no MLflow.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scalesweep.science.stats.convergence import EvalPoint, Mode, best_value, locate, resolve_target, smooth
from scalesweep.science.stats.decisions import DEFAULT_MARGIN, Decision, decide_pairs
from scalesweep.science.stats.replicates import Confidence, MedianInterval, Observation, finite_or_none

#: the default of target.levels: near the plateau to early in training
DEFAULT_LEVELS = (0.1, 0.25, 0.5, 1.0, 2.0)

Curves = Mapping[int, Sequence[EvalPoint]]  # seed -> its evaluations of the target metric


def check_levels(levels: Sequence[float]) -> None:
    """Levels are positive finite numbers, each given once."""
    bad = [x for x in levels if isinstance(x, bool) or not isinstance(x, int | float)
           or not math.isfinite(x) or x <= 0]
    if not levels or bad or len(set(levels)) != len(levels):
        raise ValueError(f"levels must be distinct positive numbers, at least one, but got {list(levels)}")


def mean_curve(curves: Sequence[Sequence[EvalPoint]]) -> list[EvalPoint]:
    """The eval-by-eval mean of curves, at the updates every curve has (a seed that stopped
    early shortens it); clocks and value averaged."""
    if not curves:
        return []
    common = set.intersection(*({p.update for p in c} for c in curves))
    by_update = [{p.update: p for p in c} for c in curves]
    out = []
    for u in sorted(common):
        pts = [c[u] for c in by_update]
        n = len(pts)
        out.append(EvalPoint(update=u, samples_seen=sum(p.samples_seen for p in pts) / n,
                             epoch=sum(p.epoch for p in pts) / n,
                             wall_s=sum(p.wall_s for p in pts) / n,
                             value=sum(p.value for p in pts) / n))
    return out


def baseline_best(curves: Sequence[Sequence[EvalPoint]], mode: Mode, smoothing: float = 0.0) -> float | None:
    """The best of the baseline arm's smoothed mean curve: what every level is relative to."""
    mean = mean_curve(curves)
    return best_value(smooth([p.value for p in mean], smoothing), mode) if mean else None


def level_target(best: float, level: float, mode: Mode) -> float:
    return resolve_target(mode, relative=level, baseline_best=best)


@dataclass(frozen=True)
class LevelRatio:
    """One arm at one level: the paired epochs ratio over its seeds and the decision, the
    levels taken as one family (:func:`fixed_sequence`); ``marginal``: the decision of this
    level's interval alone, which a level left undecided by the family shows as exploratory."""

    level: float
    target: float | None
    ratios: MedianInterval | None
    decision: Decision
    marginal: Decision = "not resolved"
    #: the uncensored pairs' log ratios (:attr:`Comparison.point_log_ratios`)
    point_log_ratios: tuple[float, ...] = ()

    @property
    def n_paired(self) -> int:
        return 0 if self.ratios is None else self.ratios.n

    @property
    def exploratory(self) -> bool:
        """Decided by its own interval, but past where the family's sequence stopped."""
        return self.decision == "not resolved" and self.marginal != "not resolved"

    def as_json(self) -> dict[str, Any]:
        mi = self.ratios
        return {"level": self.level, "target": self.target, "n_paired": self.n_paired,
                **ratio_median_json(mi),
                "ratio_ci": None if mi is None or mi.ci is None else [finite_or_none(end) for end in mi.ci],
                "ratio_ci_coverage": None if mi is None else mi.coverage,
                "decision": self.decision,
                "exploratory_decision": self.marginal if self.exploratory else None}


def ratio_median_json(mi: MedianInterval | None, prefix: str = "ratio") -> dict[str, Any]:
    """A ratio's median as JSON: a number only when it is one; a bound goes under its own name
    (``_lower_bound`` for "at least", ``_upper_bound`` for "at most"), never as the median."""
    if mi is None or not mi.n:
        return {f"{prefix}_median": None, f"{prefix}_median_kind": None, f"{prefix}_median_bounds": None,
                f"{prefix}_lower_bound": None, f"{prefix}_upper_bound": None}
    kind = mi.median.kind
    return {f"{prefix}_median": mi.median.value if kind == "value" else None,
            f"{prefix}_median_kind": kind,
            f"{prefix}_median_bounds": [finite_or_none(mi.median.lo), finite_or_none(mi.median.hi)],
            f"{prefix}_lower_bound": mi.median.lo if kind == "at_least" else None,
            f"{prefix}_upper_bound": mi.median.hi if kind == "at_most" else None}


def _epochs(curves: Curves, targets: Mapping[int, float], mode: Mode, smoothing: float
            ) -> dict[int, Observation]:
    out = {}
    for seed, pts in curves.items():
        if pts and seed in targets:
            obs = locate(pts, targets[seed], mode, smoothing).observation("epochs")
            if obs is not None:
                out[seed] = obs
    return out


def fixed_sequence(levels: Sequence[float], marginal: Sequence[Decision], headline_level: float | None,
                   headline: Decision | None) -> list[Decision]:
    """The levels' decisions as one family (docs/design.md §4, "Ratios at every level").

    The level that is the headline target takes the headline's decision, which is decided on
    its own. The others are tested one after another from the loosest level to the tightest,
    each at the design's per-look confidence (its full error rate), and the sequence stops at
    the first level that is not decided the way the loosest one was: a claim is made at a level
    only when it was made at every looser one. The first level where the claim is false is
    then the only place an error can enter, and it is tested at the error rate, so the family
    of levels keeps it (a fixed-sequence procedure; a level past the stop is shown as
    exploratory). Unlike Holm over the levels it can decide at an adaptive design's first look.
    """
    out: list[Decision] = ["not resolved"] * len(levels)
    claim: Decision | None = None
    for i in sorted((i for i, x in enumerate(levels) if x != headline_level), key=lambda i: -levels[i]):
        if marginal[i] == "not resolved" or (claim is not None and marginal[i] != claim):
            break
        claim = out[i] = marginal[i]
    for i, x in enumerate(levels):
        if x == headline_level and headline is not None:
            out[i] = headline
    return out


def ratio_by_level(arm: Curves, baseline: Curves, *, bests: Mapping[int, float | None], mode: Mode,
                   smoothing: float, levels: Sequence[float], per_look: Confidence, margin: float,
                   headline_level: float | None = None, headline: Decision | None = None
                   ) -> list[LevelRatio]:
    """The arm's paired epochs ratio against the baseline arm at each level, every interval at
    ``per_look``. Seed s's pair is measured against ``bests[s]`` loosened by the level (a seed
    without a best is left out). ``headline_level``: the level that is the headline target
    (None for an absolute target), which takes the ``headline`` decision; the others are one
    family (:func:`fixed_sequence`)."""
    found = []
    for level in levels:
        targets = {s: level_target(b, level, mode) for s, b in bests.items() if b is not None}
        marginal, comparison = decide_pairs(_epochs(arm, targets, mode, smoothing),
                                            _epochs(baseline, targets, mode, smoothing), per_look, margin)
        found.append((targets, marginal, comparison))
    decided = fixed_sequence(levels, [m for _, m, _ in found], headline_level, headline)
    return [LevelRatio(level, _headline(t), c.ratios if t else None, decided[i], m,
                       c.point_log_ratios if t else ())
            for i, (level, (t, m, c)) in enumerate(zip(levels, found, strict=True))]


def _headline(targets: Mapping[int, float]) -> float | None:
    """One number for a level's cross-fitted targets: their median (None without any)."""
    return statistics.median(targets.values()) if targets else None


#: a normal scale from the median of |d_i - d_j| (Shamos): that median is sqrt(2) * 0.6745 sd
_SHAMOS = math.sqrt(2.0) * statistics.NormalDist().inv_cdf(0.75)
#: arms.json's conditioning.method
CONDITIONING_METHOD = ("robust sd (Shamos) of the uncensored paired log epochs ratios around their "
                       "arm, as the expected Hodges-Lehmann half-width at the design's last look, "
                       "against half the margin")
#: the fewest within-arm differences of paired log ratios the check judges from
MIN_DIFFERENCES = 3


@dataclass(frozen=True)
class Conditioning:
    """Whether a target lets the paired decision see a difference of the margin's size: the
    noise of what the decision reads, the paired log epochs ratios at that target, turned into
    the half-width of the interval the design's last look can expect, against half the margin.

    The noise is a robust scale of the pairs' log ratios around their own arm (Shamos: the
    median of the within-arm differences |d_i - d_j| over sqrt(2) * 0.6745, pooled over the
    arms paired with the baseline; a pair of which either crossing is censored says the effect
    is large, not that the crossing is noisy, and is left out). The expected half-width is the
    Hodges–Lehmann interval's at normal noise, z * scale * sqrt(pi / (3 n)). A half-width over
    half the margin means an arm no different from the baseline is seldom called equivalent,
    and a difference of the margin's size seldom resolved: the crossing is mostly noise. The
    seed-shared part of the noise cancels in the pairs, as it does in the decision."""

    target: float
    #: the pairs the scale was read from, and the arms they came from
    n_pairs: int
    n_arms: int
    #: the robust sd of one pair's log epochs ratio
    scale: float
    #: the design's last look (a fixed design: its seeds) and the confidence it reads at
    seeds: int
    confidence: float
    #: the equivalence margin d
    margin: float

    @property
    def expected_half_width(self) -> float:
        """In log ratio: the last look's interval is about exp(±this) around its estimate."""
        z = statistics.NormalDist().inv_cdf(0.5 + self.confidence / 2.0)
        return z * self.scale * math.sqrt(math.pi / (3.0 * self.seeds))

    @property
    def threshold(self) -> float:
        """Half the margin, in log ratio."""
        return math.log1p(self.margin) / 2.0

    @property
    def ok(self) -> bool:
        return self.expected_half_width <= self.threshold


def conditioning(pairs_by_arm: Sequence[Sequence[float]], target: float, *, seeds: int, confidence: float,
                 margin: float = DEFAULT_MARGIN) -> Conditioning | None:
    """The check at ``target`` from each arm's uncensored paired log ratios there; None when
    fewer than :data:`MIN_DIFFERENCES` within-arm differences can be formed (too few pairs)."""
    differences = [abs(a - b) for arm in pairs_by_arm for i, a in enumerate(arm) for b in arm[i + 1:]]
    if len(differences) < MIN_DIFFERENCES or seeds < 1:
        return None
    return Conditioning(target, n_pairs=sum(len(arm) for arm in pairs_by_arm),
                        n_arms=sum(len(arm) >= 2 for arm in pairs_by_arm),
                        scale=statistics.median(differences) / _SHAMOS, seeds=seeds, confidence=confidence,
                        margin=margin)


def well_conditioned_level(arms: Sequence[Sequence[LevelRatio]], *, seeds: int, confidence: float,
                           margin: float = DEFAULT_MARGIN) -> float | None:
    """The lowest level (the closest to the plateau) whose target is well conditioned, read
    from every arm's uncensored pairs at that level (``arms``: each arm's levels)."""
    by_level: dict[float, list[tuple[float, ...]]] = {}
    targets: dict[float, float] = {}
    for levels in arms:
        for lv in levels:
            by_level.setdefault(lv.level, []).append(lv.point_log_ratios)
            if lv.target is not None:
                targets.setdefault(lv.level, lv.target)
    for level in sorted(by_level):
        c = conditioning(by_level[level], targets.get(level, math.nan), seeds=seeds, confidence=confidence,
                         margin=margin)
        if c is not None and c.ok:
            return level
    return None
