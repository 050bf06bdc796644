"""Seeds as replicates: the median of an arm's seeds, its interval, and paired ratios against
the baseline arm, with censored values. Pure: no torch, no Ray, no MLflow.

An *observation* is one seed's steps to target on one clock, known only to lie in a bracket
``[lo, hi]`` set by the evaluations around the crossing (:func:`observe`):

* crossed between two evals: ``lo`` = the eval before, ``hi`` = the eval it was met at, and
  the estimate is the crossing interpolated between them;
* met at the first eval (left-censored): ``[0, first eval]``, the estimate only "<= first eval";
* never met (right-censored): ``[last eval, +inf)``, the estimate +inf. A seed that never
  reached is never dropped: it counts as +inf in every median.

Method (named in the report and docs/design.md): distribution-free order statistics, the
interval that the sign test inverts. With n seeds the interval for the median is
``[x_(k), x_(n-k+1)]``, whose coverage is ``1 - 2 P(Binomial(n, 1/2) <= k-1)`` whatever the
distribution; its ends are read off the brackets (the k-th smallest ``lo``, the k-th largest
``hi``), so an interval is never narrower than the evaluations allow, and censored seeds take
part exactly as far as their brackets say. Nothing is assumed about the shape of the seed
distribution, which 3-5 seeds cannot check. The price: with 3 seeds the widest interval,
[min, max], covers the median only 75 % of the time; 5 seeds that all agree give 93.75 %.

"Resolved" means the paired ratio's interval excludes 1 at the nominal confidence (default
90 %, two-sided), i.e. the sign test rejects "no difference" at 10 %; seeds where the direction
is unclear from the brackets count against it.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

INF = math.inf
#: nominal two-sided coverage of every interval, and the confidence behind "resolved"
CONFIDENCE = 0.90
METHOD = "order-statistic (sign-test) interval for the median, brackets kept, never = +inf"
#: the seed counts "seeds needed" looks at
MAX_SEEDS_ADVISED = 100

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
    """A paired ratio's median and interval, and whether it excludes 1 at ``confidence``."""

    ratios: MedianInterval
    confidence: float
    #: "below": the ratio's interval lies under 1; "above": over 1; else "unresolved"
    direction: Direction
    n_below: int  # seeds whose bracket lies wholly under 1
    n_above: int
    #: seeds whose two crossings were both measured (between evals, not censored) and still
    #: straddle 1: the eval grid, not the seed, leaves their direction open
    n_tied: int
    #: for an unresolved comparison, about how many seeds would resolve it if the seeds kept
    #: splitting as they do now; None when they show no direction at all
    seeds_needed: int | None


def compare(trial: Mapping[int, Observation], baseline: Mapping[int, Observation],
            confidence: float = CONFIDENCE) -> Comparison:
    """The paired ratio trial / baseline over seeds, resolved or not."""
    pairs = list(paired_ratios(trial, baseline).values())
    mi = median_interval(pairs, confidence)
    below = sum(o.hi < 1.0 for o in pairs)
    above = sum(o.lo > 1.0 for o in pairs)
    tied = sum(_grid_tie(o) for o in pairs)
    direction: Direction = "unresolved"
    if mi.ci is not None and mi.coverage is not None and mi.coverage >= confidence:
        if mi.ci[1] < 1.0:
            direction = "below"
        elif mi.ci[0] > 1.0:
            direction = "above"
    needed = None if direction != "unresolved" else seeds_needed(below, above, len(pairs), confidence)
    return Comparison(mi, confidence, direction, below, above, tied, needed)


def _grid_tie(pair: Observation) -> bool:
    """Both crossings interpolated between evals (finite brackets, a point estimate), and the
    ratio's bracket still holds 1: evals closer together could tell the two apart."""
    return (0.0 < pair.lo <= 1.0 <= pair.hi < INF and pair.est_lo == pair.est_hi
            and 0.0 < pair.est_lo < INF)


def sign_test_rejects(k: int, n: int, confidence: float = CONFIDENCE) -> bool:
    """Whether k of n seeds on one side rejects "no difference" two-sided at 1 - confidence."""
    return n > 0 and 2.0 * (1.0 - binom_cdf(k - 1, n)) <= 1.0 - confidence


def seeds_needed(below: int, above: int, n: int, confidence: float = CONFIDENCE) -> int | None:
    """The smallest seed count at which the sign test would reject if the seeds kept falling as
    now (the majority side's share of n, seeds with an unclear direction counting against it);
    None when there is no majority side, or it would take more than MAX_SEEDS_ADVISED."""
    if n == 0 or below == above:
        return None
    share = max(below, above) / n
    if share <= 0.5:
        return None
    for m in range(max(n, 1), MAX_SEEDS_ADVISED + 1):
        if sign_test_rejects(math.ceil(share * m - 1e-9), m, confidence):
            return m
    return None
