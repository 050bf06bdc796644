"""The Wilcoxon signed-rank test and the Hodges–Lehmann interval it inverts, for paired log
ratios with censored pairs (docs/design.md §4, "Decisions"). Pure: no torch, no Ray, no MLflow.

Each pair of seeds gives one log ratio d = log(arm's epochs / baseline's epochs). With n pairs
the *Walsh averages* are the n(n+1)/2 means (d_i + d_j)/2, i <= j; the Hodges–Lehmann
estimate is their median and the interval [W_(k), W_(N-k+1)] their k-th smallest and largest.
Its lower end lies above a value c exactly when the signed-rank statistic of d - c (the sum of
the ranks of |d_i - c| over the pairs above c) is at least N - k + 1, so its coverage is
1 - 2 P(W+ <= k - 1) under the exact null distribution of W+: every sign equally likely given
the magnitudes. That holds for any distribution symmetric about its centre, and for the A/A
comparison it holds exactly whatever the distribution: two arms that are the same make each
pair's two crossings exchangeable, so each d is as likely to be -d.

Why this statistic and not the sign test that came before it: the sign test reads only on
which side of 1 each pair lies; the signed rank also reads how far, so five pairs that agree
by a wide margin and one that strays a little decide, where the sign test needs all of them.

Censoring, as bounds: a pair whose crossing is only bounded (a seed that never reached, or met
the target at its first eval) gives the lowest and the highest log ratio its bounds allow, and
the interval's lower end is read from the lowest values, its upper end from the highest. Walsh
order statistics only rise with each value, so the interval contains the one the unobserved
crossings would give: its coverage is a lower bound. An unbounded side (a crossing before
the first eval has no lower bound above 0; one that never came has no upper one) enters as
:data:`UNBOUNDED`, a log ratio beyond any real one, so it ranks past every measured pair.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: the log ratio an unbounded side stands for: ranked past every real one (real log epochs
#: ratios are a few units at most), and read back as 0 or +inf
UNBOUNDED = 1e6
#: a value this far out holds an unbounded pair: an estimate can average a measured Walsh
#: average with a half-unbounded one, (d + (U + d') / 2) / 2, just under U / 4
_INFINITE = UNBOUNDED / 8


@functools.lru_cache(maxsize=256)
def null_pmf(n: int) -> tuple[float, ...]:
    """P(W+ = w) for w = 0 .. n(n+1)/2 under the null (each of the 2^n sign patterns of the
    ranks 1..n equally likely), exactly: the count of subsets of {1..n} summing to w over 2^n."""
    if n < 0:
        raise ValueError(f"n must be at least 0, but got {n=}")
    counts = [1]
    for i in range(1, n + 1):
        grown = counts + [0] * i
        for w, c in enumerate(counts):
            grown[w + i] += c
        counts = grown
    return tuple(c / 2**n for c in counts)


@functools.lru_cache(maxsize=4096)
def null_cdf(w: int, n: int) -> float:
    """P(W+ <= w) under the null."""
    if w < 0:
        return 0.0
    return math.fsum(null_pmf(n)[: w + 1])


def walsh_count(n: int) -> int:
    return n * (n + 1) // 2


def coverage(n: int, k: int) -> float:
    """The coverage of [W_(k), W_(N-k+1)] with n pairs."""
    return 1.0 - 2.0 * null_cdf(k - 1, n)


def interval_rank(n: int, confidence: float) -> tuple[int, float]:
    """The largest k whose interval [W_(k), W_(N-k+1)] covers the centre with at least
    ``confidence``, and its coverage; k = 1 and its (lower) coverage when n is too small."""
    if n < 1:
        raise ValueError(f"n must be at least 1, but got {n=}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), but got {confidence=}")
    best = 1
    for k in range(1, walsh_count(n) // 2 + 1):
        if coverage(n, k) < confidence:
            break
        best = k
    return best, coverage(n, best)


def boundary(n: int, per_look: float) -> int | None:
    """The W+ (count of positive Walsh averages) at which an interval of n pairs read at
    ``per_look`` lies wholly above the value tested; None when no interval of n pairs reaches
    ``per_look`` (too few pairs to decide anything)."""
    k, cov = interval_rank(n, per_look)
    return None if cov < per_look else walsh_count(n) - k + 1


def walsh_averages(values: Sequence[float]) -> list[float]:
    """Every (d_i + d_j) / 2, i <= j, sorted."""
    return sorted((a + b) / 2.0 for i, a in enumerate(values) for b in values[i:])


def to_ratio(log_value: float) -> float:
    """A log ratio back on the ratio scale: an unbounded one is 0 or +inf."""
    if log_value >= _INFINITE:
        return math.inf
    if log_value <= -_INFINITE:
        return 0.0
    return math.exp(log_value)


@dataclass(frozen=True)
class PairedInterval:
    """The pairs' Hodges–Lehmann estimate and interval on the log scale, each read off the
    pairs' lowest values (the lower) and highest values (the upper)."""

    #: the median of the Walsh averages of the lowest values, and of the highest
    estimate: tuple[float, float]
    #: [W_(k) of the lowest, W_(N-k+1) of the highest]; None with fewer than 2 pairs: never invented
    interval: tuple[float, float] | None
    #: its exact coverage, below the confidence asked when there are too few pairs to reach it
    coverage: float | None


def paired_interval(lows: Sequence[float], highs: Sequence[float], confidence: float) -> PairedInterval:
    """The estimate and interval of n >= 1 pairs, each pair's lowest and highest log ratio
    given (the Walsh averages sorted once for both)."""
    n = len(lows)
    if n != len(highs) or n == 0:
        raise ValueError(f"lows and highs must pair up, at least one, but got {len(lows)} and {len(highs)}")
    low_walsh, high_walsh = walsh_averages(lows), walsh_averages(highs)
    estimate = (statistics.median(low_walsh), statistics.median(high_walsh))
    if n < 2:
        return PairedInterval(estimate, None, None)
    k, cov = interval_rank(n, confidence)
    return PairedInterval(estimate, (low_walsh[k - 1], high_walsh[walsh_count(n) - k]), cov)
