"""Seeds as replicates: the median of an arm's seeds, its interval, and paired ratios against
the baseline arm, with censored values. Pure: no torch, no Ray, no MLflow.

An *observation* is one seed's steps to target on one clock, known only to lie in a bracket
``[lo, hi]`` set by the evaluations around the crossing (:func:`observe`):

* crossed between two evals: ``lo`` = the eval before, ``hi`` = the eval it was met at, and
  the estimate is the crossing interpolated between them;
* met at the first eval (left-censored): ``[0, first eval]``, the estimate only "<= first eval";
* never met (right-censored): ``[last eval, +inf)``, the estimate +inf. A seed that never
  reached is never dropped: it counts as +inf in every median.

Each arm's median on a clock (its seeds on their own): distribution-free order statistics.
With n seeds the interval for the median is ``[x_(k), x_(n-k+1)]``, whose coverage is
``1 - 2 P(Binomial(n, 1/2) <= k-1)`` whatever the distribution; its ends are read off the
brackets (the k-th smallest ``lo``, the k-th largest ``hi``), so censored seeds take part
exactly as far as their brackets say. With 3 seeds the widest interval, [min, max], covers the
median only 75 % of the time; 5 give 93.75 %.

Paired comparisons (an arm against its baseline arm, seed by seed), which every decision
reads: the Hodges–Lehmann interval of the pairs' log ratios, the one the Wilcoxon signed-rank
test inverts (:mod:`scalesweep.science.stats.signed_rank`). It reads how far each pair lies
from 1, not only on which side, so it decides with fewer seeds than the sign test's order
statistics did. An interpolated crossing enters as its estimate; a censored one as the end
of its bracket that makes the interval widest (:func:`log_ratio_bounds`): a seed that never
reached can only make its ratio larger, and is never dropped nor given a made-up number.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from scalesweep.science.stats import signed_rank

INF = math.inf
#: nominal two-sided coverage of every interval, and the confidence behind "resolved"
CONFIDENCE = 0.90
METHOD = "order-statistic interval for each arm's median, brackets kept, never = +inf"
#: the method of every paired ratio and decision (arms.json's ``method``)
PAIRED_METHOD = ("Wilcoxon signed-rank (Hodges-Lehmann) interval of the paired log epochs ratios: "
                 "crossings interpolated between evals, a censored one at its bracket's end")

CrossingKind = Literal["interpolated", "at_first_eval", "never"]
EstimateKind = Literal["value", "at_most", "at_least", "range", "never", "unknown"]


@dataclass(frozen=True)
class Observation:
    """One seed's value: certainly in ``[lo, hi]``; best estimate in ``[est_lo, est_hi]``
    (equal for an interpolated crossing)."""

    lo: float
    hi: float
    est_lo: float
    est_hi: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.lo <= self.est_lo <= self.est_hi <= self.hi:
            raise ValueError(f"an observation needs 0 <= lo <= est_lo <= est_hi <= hi, but got {self}")


def finite_or_none(x: float) -> float | None:
    """``x``, or None where it is infinite or NaN (JSON, and the tables, have no infinity)."""
    return x if math.isfinite(x) else None


def observe(kind: CrossingKind, *, before: float, at: float, estimate: float | None = None
            ) -> Observation:
    """The observation of one crossing on one clock.

    ``interpolated``: ``before`` = the eval that missed, ``at`` = the eval that met the target,
    ``estimate`` = the interpolated crossing between them. ``at_first_eval``: ``at`` = that
    eval (``before`` is ignored: 0). ``never``: ``before`` = the last eval (``at`` ignored).
    """
    if kind == "interpolated":
        if estimate is None or not before <= estimate <= at:
            raise ValueError(f"an interpolated crossing needs before <= estimate <= at, but got "
                             f"{before=}, {estimate=}, {at=}")
        return Observation(before, at, estimate, estimate)
    if kind == "at_first_eval":
        return Observation(0.0, at, 0.0, at)
    if kind == "never":
        return Observation(before, INF, INF, INF)
    raise ValueError(f"kind must be interpolated, at_first_eval or never, but got {kind=}")


@dataclass(frozen=True)
class Estimate:
    """A point estimate that may be only a bound: ``kind`` says how to read ``lo``/``hi``."""

    lo: float
    hi: float

    @property
    def kind(self) -> EstimateKind:
        if self.lo == self.hi:
            return "never" if self.lo == INF else "value"
        if self.hi == INF:
            return "unknown" if self.lo == 0.0 else "at_least"
        return "at_most" if self.lo == 0.0 else "range"

    @property
    def value(self) -> float | None:
        """The number to show: the value, or the bound (read with ``kind``); None otherwise."""
        return {"value": self.lo, "at_most": self.hi, "at_least": self.lo}.get(self.kind)

    def text(self, digits: int = 3) -> str:
        kind = self.kind
        if kind in ("never", "unknown"):
            return kind
        if kind == "range":
            return f"{self.lo:.{digits}g}–{self.hi:.{digits}g}"
        prefix = {"at_most": "≤ ", "at_least": "≥ "}.get(kind, "")
        return f"{prefix}{self.value:.{digits}g}"


@dataclass(frozen=True)
class MedianInterval:
    """The median of n observations with its order-statistic interval."""

    n: int
    median: Estimate
    #: [lo, hi] (hi may be +inf); None with fewer than 2 observations: never invented
    ci: tuple[float, float] | None
    #: exact coverage of ``ci``; below ``confidence`` when n is too small to reach it
    coverage: float | None
    #: smallest lo and largest hi of the observations (the seed spread, brackets included)
    spread: tuple[float, float] | None


@functools.lru_cache(maxsize=4096)  # the sequential design and seeds_needed ask the same ones
def binom_cdf(k: int, n: int) -> float:
    """P(Binomial(n, 1/2) <= k), exactly."""
    if k < 0:
        return 0.0
    return sum(math.comb(n, i) for i in range(min(k, n) + 1)) / 2**n


def order_statistic_rank(n: int, confidence: float = CONFIDENCE) -> tuple[int, float]:
    """The largest k (1-based) whose interval [x_(k), x_(n-k+1)] covers the median with at
    least ``confidence``, and its coverage; k = 1 and its (lower) coverage when n is too small."""
    if n < 1:
        raise ValueError(f"n must be at least 1, but got {n=}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), but got {confidence=}")
    best = 1
    for k in range(1, (n + 1) // 2 + 1):
        if 1.0 - 2.0 * binom_cdf(k - 1, n) >= confidence:
            best = k
    return best, 1.0 - 2.0 * binom_cdf(best - 1, n)


def median_interval(obs: Sequence[Observation], confidence: float = CONFIDENCE) -> MedianInterval:
    """Median of the observations (never = +inf: "never" once half or more never reach) and its
    distribution-free interval read off the brackets."""
    n = len(obs)
    if n == 0:
        return MedianInterval(0, Estimate(0.0, INF), None, None, None)
    median = Estimate(statistics.median(o.est_lo for o in obs), statistics.median(o.est_hi for o in obs))
    spread = (min(o.lo for o in obs), max(o.hi for o in obs))
    if n < 2:
        return MedianInterval(n, median, None, None, spread)
    k, coverage = order_statistic_rank(n, confidence)
    lows, highs = sorted(o.lo for o in obs), sorted(o.hi for o in obs)
    return MedianInterval(n, median, (lows[k - 1], highs[n - k]), coverage, spread)


def _div(a: float, b: float, ambiguous: float) -> float:
    """a / b for non-negative a, b with inf; 0/0 and inf/inf (no information) give ``ambiguous``."""
    if (a == 0.0 and b == 0.0) or (a == INF and b == INF):
        return ambiguous
    if b == 0.0:
        return INF
    if b == INF:
        return 0.0
    return a / b


def ratio(num: Observation, den: Observation) -> Observation:
    """``num / den`` with both brackets carried through: the widest ratio either allows.

    The estimate of a ratio with a side that never reached is a bound, not 0 or +inf: a trial
    that never reached where the baseline did is "at least (its last eval) / (the baseline's
    crossing)" slower; a baseline that never reached makes the ratio "at most" the other way.
    """
    n_lo = num.est_lo if math.isfinite(num.est_lo) else num.lo
    d_lo = den.est_lo if math.isfinite(den.est_lo) else den.lo
    return Observation(
        lo=_div(num.lo, den.hi, 0.0),
        hi=_div(num.hi, den.lo, INF),
        est_lo=_div(n_lo, den.est_hi, 0.0),
        est_hi=_div(num.est_hi, d_lo, INF),
    )


def paired_ratios(trial: Mapping[int, Observation], baseline: Mapping[int, Observation]
                  ) -> dict[int, Observation]:
    """Per seed, the trial's value over the baseline's with the same seed (seeds only one side
    has are left out: there is nothing to pair them with)."""
    return {seed: ratio(trial[seed], baseline[seed]) for seed in sorted(trial) if seed in baseline}


Direction = Literal["below", "above", "unresolved"]


@dataclass(frozen=True)
class Comparison:
    """A paired ratio's Hodges–Lehmann estimate and interval (``ratios``: its ``median`` is
    the estimate), and whether the interval excludes 1 at ``confidence``."""

    ratios: MedianInterval
    confidence: float
    #: "below": the ratio's interval lies under 1; "above": over 1; else "unresolved"
    direction: Direction
    n_below: int  # pairs whose highest ratio lies under 1
    n_above: int  # pairs whose lowest ratio lies over 1
    #: seeds whose two crossings were both measured (between evals, not censored) and whose
    #: eval brackets still straddle 1: only the interpolation inside the evals tells them apart
    n_tied: int
    #: for an unresolved comparison of an adaptive design, the fewest seeds (up to the design's
    #: most) at which pairs like these would decide; None otherwise
    seeds_needed: int | None
    #: the log ratios of the pairs whose two crossings were both interpolated between evals
    #: (no censoring): what the conditioning check reads the pairs' noise from
    point_log_ratios: tuple[float, ...] = ()


def _log(x: float) -> float:
    if x == 0.0:
        return -signed_rank.UNBOUNDED
    return signed_rank.UNBOUNDED if x == INF else math.log(x)


def _censoring(o: Observation) -> str | None:
    """"never", "at_first_eval", or None for an interpolated crossing."""
    if o.est_lo == INF:
        return "never"
    return "at_first_eval" if o.est_lo != o.est_hi else None


def _clipped(o: Observation) -> float:
    """A crossing clipped to the evaluated span: interpolated, its estimate; met at the first
    eval, that eval; never met, the last eval (the horizon)."""
    if o.est_lo == o.est_hi:
        return o.lo if o.est_lo == INF else o.est_lo
    return o.hi


def log_ratio_bounds(num: Observation, den: Observation) -> tuple[float, float]:
    """The pair's log ratio ``num / den`` for the interval's lower and upper end.

    Both are the log ratio of the two crossings clipped to the evaluated span (a seed that never
    reached enters at the horizon, one met at the first eval at that eval): clipping moves a
    pair towards 1 and never across it, and treats both sides alike, so two arms that are the
    same keep exchangeable pairs. For the upper end, a ``num`` that never reached or a ``den``
    met at its first eval is unbounded instead: a ratio that is only "at least" something is
    never bounded above (an arm that never reached is never equivalent). Two crossings censored
    alike (both never, or both at the first eval) say nothing: unbounded both ways."""
    if _censoring(num) is not None and _censoring(num) == _censoring(den):
        return -signed_rank.UNBOUNDED, signed_rank.UNBOUNDED
    low = _log(_clipped(num)) - _log(_clipped(den))
    unbounded_above = _censoring(num) == "never" or _censoring(den) == "at_first_eval"
    return low, signed_rank.UNBOUNDED if unbounded_above else low


def _ratio_interval(lows: Sequence[float], highs: Sequence[float], confidence: float) -> MedianInterval:
    n = len(lows)
    if n == 0:
        return MedianInterval(0, Estimate(0.0, INF), None, None, None)
    found = signed_rank.paired_interval(lows, highs, confidence)
    median = Estimate(*map(signed_rank.to_ratio, found.estimate))
    spread = (signed_rank.to_ratio(min(lows)), signed_rank.to_ratio(max(highs)))
    if found.interval is None:
        return MedianInterval(n, median, None, None, spread)
    lo, hi = found.interval
    return MedianInterval(n, median, (signed_rank.to_ratio(lo), signed_rank.to_ratio(hi)), found.coverage,
                          spread)


def _direction(mi: MedianInterval, confidence: float) -> Direction:
    if mi.ci is None or mi.coverage is None or mi.coverage < confidence:
        return "unresolved"
    return "below" if mi.ci[1] < 1.0 else "above" if mi.ci[0] > 1.0 else "unresolved"


#: a confidence, or the confidence for an interval of n pairs (a design's looks differ)
Confidence = float | Callable[[int], float]


def compare(trial: Mapping[int, Observation], baseline: Mapping[int, Observation],
            confidence: Confidence = CONFIDENCE, max_seeds: int | None = None) -> Comparison:
    """The paired ratio trial / baseline over seeds (seeds only one side has are left out:
    there is nothing to pair them with), resolved or not. ``max_seeds``: an adaptive design's
    most seeds, up to which an unresolved comparison says how many would decide it."""
    seeds = [s for s in sorted(trial) if s in baseline]
    at = confidence if callable(confidence) else (lambda _n: confidence)
    confidence = at(len(seeds))
    bounds = [log_ratio_bounds(trial[s], baseline[s]) for s in seeds]
    lows, highs = [b[0] for b in bounds], [b[1] for b in bounds]
    mi = _ratio_interval(lows, highs, confidence)
    direction = _direction(mi, confidence)
    tied = sum(_grid_tie(ratio(trial[s], baseline[s])) for s in seeds)
    needed = None
    if direction == "unresolved" and max_seeds is not None:
        needed = seeds_needed(lows, highs, max_seeds, at)
    points = tuple(lo for s, lo in zip(seeds, lows, strict=True)
                   if _censoring(trial[s]) is None and _censoring(baseline[s]) is None)
    return Comparison(mi, confidence, direction, sum(h < 0.0 for h in highs), sum(lo > 0.0 for lo in lows),
                      tied, needed, points)


def _grid_tie(pair: Observation) -> bool:
    """Both crossings interpolated between evals (finite brackets, a point estimate), and the
    ratio's bracket still holds 1."""
    return (0.0 < pair.lo <= 1.0 <= pair.hi < INF and pair.est_lo == pair.est_hi
            and 0.0 < pair.est_lo < INF)


def seeds_needed(lows: Sequence[float], highs: Sequence[float], max_seeds: int,
                 confidence: Callable[[int], float]) -> int | None:
    """The fewest seeds, up to ``max_seeds``, at which pairs drawn like these (each pair
    repeated in turn) would give an interval that excludes 1; None when none would, or there
    are no pairs. A projection to plan with, never a decision."""
    n = len(lows)
    for m in range(n + 1, max_seeds + 1) if n else ():
        mi = _ratio_interval([lows[i % n] for i in range(m)], [highs[i % n] for i in range(m)], confidence(m))
        if _direction(mi, confidence(m)) != "unresolved":
            return m
    return None
