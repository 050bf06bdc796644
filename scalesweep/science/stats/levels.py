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
from scalesweep.science.stats.decisions import Decision, decide_pairs
from scalesweep.science.stats.replicates import MedianInterval, Observation

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
    """One arm at one level: the paired epochs ratio over its seeds and the decision."""

    level: float
    target: float | None
    ratios: MedianInterval | None
    decision: Decision

    @property
    def n_paired(self) -> int:
        return 0 if self.ratios is None else self.ratios.n

    def as_json(self) -> dict[str, Any]:
        mi = self.ratios
        fin = _finite
        return {"level": self.level, "target": self.target, "n_paired": self.n_paired,
                "ratio_median": None if mi is None or not mi.n else mi.median.value,
                "ratio_median_kind": None if mi is None or not mi.n else mi.median.kind,
                "ratio_median_bounds": None if mi is None or not mi.n
                else [fin(mi.median.lo), fin(mi.median.hi)],
                "ratio_ci": None if mi is None or mi.ci is None else [fin(mi.ci[0]), fin(mi.ci[1])],
                "ratio_ci_coverage": None if mi is None else mi.coverage,
                "decision": self.decision}


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _epochs(curves: Curves, target: float, mode: Mode, smoothing: float) -> dict[int, Observation]:
    out = {}
    for seed, pts in curves.items():
        if pts:
            obs = locate(pts, target, mode, smoothing).observation("epochs")
            if obs is not None:
                out[seed] = obs
    return out


def ratio_by_level(arm: Curves, baseline: Curves, *, best: float | None, mode: Mode, smoothing: float,
                   levels: Sequence[float], per_look: float, margin: float) -> list[LevelRatio]:
    """The arm's paired epochs ratio against the baseline arm at each level's target."""
    out = []
    for level in levels:
        if best is None:
            out.append(LevelRatio(level, None, None, "not resolved"))
            continue
        target = level_target(best, level, mode)
        decision, comparison = decide_pairs(_epochs(arm, target, mode, smoothing),
                                            _epochs(baseline, target, mode, smoothing), per_look, margin)
        out.append(LevelRatio(level, target, comparison.ratios, decision))
    return out


@dataclass(frozen=True)
class Conditioning:
    """How well a target pins the baseline arm's crossing down."""

    target: float
    #: how much the baseline's (smoothed) mean curve changes across its crossing's eval bracket
    drop: float
    #: the seeds' standard deviation of the (smoothed) metric at the eval that meets the target
    spread: float

    @property
    def ok(self) -> bool:
        return self.drop >= self.spread


def conditioning(baseline: Curves, target: float, mode: Mode, smoothing: float = 0.0) -> Conditioning | None:
    """None when it cannot be judged: fewer than 2 seeds, or the mean curve crosses the target
    at its first eval or never."""
    curves = [list(c) for c in baseline.values() if c]
    mean = mean_curve(curves)
    if len(curves) < 2 or not mean:
        return None
    where = locate(mean, target, mode, smoothing)
    if where.kind != "interpolated" or where.before is None or where.at is None:
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
    return Conditioning(target, abs(values[i - 1] - values[i]), statistics.stdev(seeds_there))


def well_conditioned_level(baseline: Curves, best: float, levels: Sequence[float], mode: Mode,
                           smoothing: float = 0.0) -> float | None:
    """The lowest level (the closest to the plateau) whose target is well conditioned."""
    for level in sorted(levels):
        c = conditioning(baseline, level_target(best, level, mode), mode, smoothing)
        if c is not None and c.ok:
            return level
    return None
