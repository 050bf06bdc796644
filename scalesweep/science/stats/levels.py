"""Time to quality: the paired epochs ratio of an arm at every loss level, not at one target
(docs/design.md §4, "Ratios at every level"), and whether a target is well conditioned.

A *level* is read like ``target.relative_to_baseline``: the target at level r is the best of
the baseline arm's seeds' mean curve loosened by r (best · (1 + r) for a positive loss), so
level 0.1 is 10 % above the baseline's best and level 2 is three times it, early in training.

One target near the baseline's plateau is ill conditioned: where the curve is flat, a tiny
vertical difference between seeds is a large horizontal one, and the crossing (so the ratio)
is mostly noise. :func:`conditioning` measures it on the baseline arm: how much the mean curve
falls across the evaluation bracket of its crossing, against how far the seeds' values
spread there. A drop smaller than the spread means the seeds could cross anywhere within an
eval or more of each other, so the target is flagged and a level that is not is named.
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
    return [LevelRatio(level, _headline(t), c.ratios if t else None, decided[i], m)
            for i, (level, (t, m, c)) in enumerate(zip(levels, found, strict=True))]


def _headline(targets: Mapping[int, float]) -> float | None:
    """One number for a level's cross-fitted targets: their median (None without any)."""
    return statistics.median(targets.values()) if targets else None


@dataclass(frozen=True)
class Conditioning:
    """How well a target pins the baseline arm's crossing down, in epochs: the seeds' spread
    of the metric there turned into a spread of crossings (spread / slope), relative to the
    epochs to the target. Unlike a drop over one eval interval it does not move with the eval
    spacing, so evaluating more often cannot make a target look worse."""

    target: float
    #: the baseline's (smoothed) mean curve's crossing, in epochs
    epochs: float
    #: how fast that mean curve moves there: |change| / epochs across the crossing's evals
    slope: float
    #: the seeds' standard deviation of the (smoothed) metric at the eval that meets the target
    spread: float
    #: the equivalence margin d: a crossing spread above d / 2 of the epochs is too noisy
    margin: float

    @property
    def epochs_spread(self) -> float:
        """The seeds' spread of the metric read as a spread of crossings, in epochs."""
        return self.spread / self.slope if self.slope > 0 else math.inf

    @property
    def relative_spread(self) -> float:
        return self.epochs_spread / self.epochs if self.epochs > 0 else math.inf

    @property
    def threshold(self) -> float:
        return self.margin / 2.0

    @property
    def ok(self) -> bool:
        return self.relative_spread <= self.threshold


def conditioning(baseline: Curves, target: float, mode: Mode, smoothing: float = 0.0,
                 margin: float = DEFAULT_MARGIN) -> Conditioning | None:
    """None when it cannot be judged: fewer than 2 seeds, or the mean curve crosses the target
    at its first eval or never."""
    curves = [list(c) for c in baseline.values() if c]
    mean = mean_curve(curves)
    if len(curves) < 2 or not mean:
        return None
    where = locate(mean, target, mode, smoothing)
    if where.kind != "interpolated" or where.before is None or where.at is None or where.crossing is None:
        return None
    values = smooth([p.value for p in mean], smoothing)
    i = next(j for j, p in enumerate(mean) if p.update == where.at.update)
    at_update = where.at.update
    seeds_there = []
    for c in curves:
        smoothed = smooth([p.value for p in c], smoothing)
        seeds_there += [v for p, v in zip(c, smoothed, strict=True) if p.update == at_update]
    if len(seeds_there) < 2 or not all(math.isfinite(v) for v in seeds_there):
        return None
    width = mean[i].epoch - mean[i - 1].epoch
    slope = abs(values[i - 1] - values[i]) / width if width > 0 else 0.0
    return Conditioning(target, where.crossing.epochs_to_target, slope, statistics.stdev(seeds_there), margin)


def well_conditioned_level(baseline: Curves, best: float, levels: Sequence[float], mode: Mode,
                           smoothing: float = 0.0, margin: float = DEFAULT_MARGIN) -> float | None:
    """The lowest level (the closest to the plateau) whose target is well conditioned."""
    for level in sorted(levels):
        c = conditioning(baseline, level_target(best, level, mode), mode, smoothing, margin)
        if c is not None and c.ok:
            return level
    return None
