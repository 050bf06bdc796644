"""Seeds added where they decide, without inflating the error rate (docs/design.md §4,
"Adaptive seeds").

An adaptive design looks at an arm's paired seeds after ``min`` of them, and again each time
seeds are added, up to ``max``; an arm stops at the first look that decides it. Looking often
and stopping at the first answer would turn a 10 % error rate into far more if every look used
the fixed-sample 90 % interval. So every look uses one wider interval, at the *per-look
confidence* chosen here: the smallest one at which the probability that **any** look's interval
excludes the true median is at most 1 − confidence.

The interval at a look of n seeds is the order-statistic one of
:mod:`scalesweep.science.stats.replicates`, [x_(k), x_(n−k+1)]; its lower end lies above a
value c exactly when at least n − k + 1 of the n seeds lie above c. When c is the true median
of the seeds' ratios, each seed lies above it with probability 1/2, independently, so the
count above c is a binomial random walk over the looks, and the chance that it ever reaches
the looks' boundaries is computed exactly here (a sum over the walk's paths, no simulation and
no normal approximation): the exact group-sequential sign test. Two-sided, the two boundaries
are disjoint events at a look and the design stops at the first, so the two-sided error is at
most twice the one-sided one. Seeds whose bracket straddles c count on neither side, which
only lowers the error. The same argument holds at each end of the equivalence band, so
"equivalent" keeps its level too (tested by simulation in tests/unit/test_sequential.py).

With one look (a fixed number of seeds) the per-look confidence is the nominal one and
nothing changes. Pure: no torch, no Ray, no MLflow.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

from scalesweep.science.stats.replicates import CONFIDENCE, binom_cdf, order_statistic_rank

#: the fewest seeds a look may have: one seed has no interval at all
MIN_SEEDS = 2
METHOD = ("exact group-sequential sign test: one per-look confidence for every look, chosen so "
          "that the chance any look's interval excludes the truth is at most 1 - confidence")


@dataclass(frozen=True)
class Design:
    """When decisions are taken, and at what confidence each look's interval is read."""

    looks: tuple[int, ...]
    #: the nominal two-sided confidence of the whole design (1 − its error rate)
    confidence: float
    #: the confidence every look's interval is read at (the nominal one for a single look)
    per_look: float
    #: the exact two-sided probability, under "no difference", that some look decides a
    #: direction; at most 1 − confidence
    error: float

    @property
    def adaptive(self) -> bool:
        return len(self.looks) > 1


def boundary(n: int, per_look: float) -> int | None:
    """Seeds on one side of c needed at a look of n seeds for its interval to exclude c; None
    when no interval of n seeds reaches ``per_look`` (too few seeds to decide anything)."""
    k, coverage = order_statistic_rank(n, per_look)
    return None if coverage < per_look else n - k + 1


def _binomial_half(m: int) -> list[float]:
    return [binom_cdf(i, m) - binom_cdf(i - 1, m) for i in range(m + 1)]


def one_sided_error(looks: tuple[int, ...], per_look: float) -> float:
    """P(the count of seeds above the true median ever reaches a look's boundary)."""
    dist = [1.0]  # dist[s]: P(s seeds above so far, no boundary reached yet)
    crossed, seen = 0.0, 0
    for n in looks:
        step = _binomial_half(n - seen)
        grown = [0.0] * (len(dist) + len(step) - 1)
        for s, p in enumerate(dist):
            for j, q in enumerate(step):
                grown[s + j] += p * q
        dist, seen = grown, n
        edge = boundary(n, per_look)
        if edge is not None:
            crossed += sum(dist[edge:])
            dist = [p if s < edge else 0.0 for s, p in enumerate(dist)]
    return crossed


def check_looks(looks: tuple[int, ...]) -> None:
    if not looks or any(b <= a for a, b in itertools.pairwise(looks)) or looks[0] < MIN_SEEDS:
        raise ValueError(f"looks must rise and start at {MIN_SEEDS} seeds or more, but got {looks}")


@functools.cache  # pure: the plan, its rules, adaptive seeds and the report share one
def design(looks: tuple[int, ...], confidence: float = CONFIDENCE) -> Design:
    """The design whose looks each read their interval at one per-look confidence, the lowest
    (so the most decisive) at which the two-sided error over all looks stays within
    1 − ``confidence``."""
    check_looks(looks)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), but got {confidence=}")
    if len(looks) == 1:
        return Design(looks, confidence, confidence, 2.0 * one_sided_error(looks, confidence))
    # the boundaries change only at the coverages an order-statistic interval can have
    candidates = sorted({1.0 - 2.0 * binom_cdf(k - 1, n) for n in looks for k in range(1, (n + 1) // 2 + 1)}
                        | {confidence})
    for per_look in (c for c in candidates if c >= confidence):
        error = 2.0 * one_sided_error(looks, per_look)
        if error <= 1.0 - confidence:
            return Design(looks, confidence, per_look, error)
    # not even the widest intervals keep the error: nothing can be decided (never for n >= 2)
    return Design(looks, confidence, 1.0 - 1e-12, 0.0)


def adaptive_looks(min_seeds: int, max_seeds: int, step: int = 1) -> tuple[int, ...]:
    """min, min + step, ..., always ending at max."""
    if min_seeds < MIN_SEEDS or max_seeds < min_seeds or step < 1:
        raise ValueError(f"need {MIN_SEEDS} <= min <= max and step >= 1, but got "
                         f"{min_seeds=}, {max_seeds=}, {step=}")
    looks = list(range(min_seeds, max_seeds + 1, step))
    if looks[-1] != max_seeds:
        looks.append(max_seeds)
    return tuple(looks)
