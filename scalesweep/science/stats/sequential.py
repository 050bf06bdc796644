"""Seeds added where they decide, without inflating the error rate (docs/design.md §4,
"Adaptive seeds").

An adaptive design looks at an arm's paired seeds after ``min`` of them, and again each time
seeds are added, up to ``max``; an arm stops at the first look that decides it. Looking often
and stopping at the first answer would turn a 10 % error rate into far more if every look used
the fixed-sample 90 % interval. So every look uses one wider interval, at the *per-look
confidence* chosen here: the smallest one at which the probability that **any** look's interval
excludes the true centre is at most 1 − confidence.

The interval at a look of n pairs is the Hodges–Lehmann one of
:mod:`scalesweep.science.stats.signed_rank`; it excludes a value c exactly when the signed-rank
statistic W+ of the pairs' log ratios minus c reaches the look's boundary (or its mirror). When
c is the true centre, each pair's sign is a fair coin given the magnitudes, and a new pair's
magnitude falls at a uniformly random rank among those before it. So the pairs, ordered by
magnitude, form a random string of signs that grows by inserting one random sign at a random
place, and W+ is the sum of the places that hold a "+". The chance that W+ ever reaches a
look's boundary is summed exactly over every such string (2^max of them) up to
:data:`EXACT_MAX` pairs, and beyond that estimated from :data:`PATHS` simulated paths with a
fixed seed, the per-look confidence then chosen with two standard errors to spare. Pairs with
a censored side only lower the error (their bounds widen the interval), and so does an arm
stopped early as equivalent. The same argument holds at each end of the equivalence band, so
"equivalent" keeps its level too (tested by simulation in tests/unit/test_sequential.py).

With one look (a fixed number of seeds) the per-look confidence is the nominal one and
nothing changes. Pure: no torch, no Ray, no MLflow.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from scalesweep.science.stats.decisions import decide_pairs
from scalesweep.science.stats.replicates import CONFIDENCE, Observation, observe
from scalesweep.science.stats.signed_rank import boundary, coverage, null_cdf, walsh_count

__all__ = ["FALLING", "METHOD", "Design", "PairsModel", "Power", "adaptive_looks", "boundary", "check_looks",
           "design", "error", "expected_power"]

#: the fewest seeds a look may have: one seed has no interval at all
MIN_SEEDS = 2
#: designs up to this many pairs are summed exactly (2^n sign strings); larger ones simulated
EXACT_MAX = 16
#: simulated paths for larger designs, and their seed (the same design always gets the same answer)
PATHS = 200_000
SEED = 20261128
METHOD = ("exact group-sequential signed-rank test: the looks before the last at one confidence, the "
          "last at its own, chosen so that the chance any look's interval excludes the truth is at "
          "most 1 - confidence")


@dataclass(frozen=True)
class Design:
    """When decisions are taken, and at what confidence each look's interval is read."""

    looks: tuple[int, ...]
    #: the nominal two-sided confidence of the whole design (1 − its error rate)
    confidence: float
    #: the confidence every look but the last reads its interval at (the nominal one for a
    #: single look)
    per_look: float
    #: the two-sided probability, under "no difference", that some look decides a direction:
    #: exact up to EXACT_MAX pairs, else simulated; at most 1 − confidence
    error: float
    #: the confidence the last look reads its interval at (None: ``per_look``, as for a single look)
    last: float | None = None

    @property
    def adaptive(self) -> bool:
        return len(self.looks) > 1

    def confidence_at(self, n: int) -> float:
        """The confidence an interval of n pairs is read at: the last look's from its seeds on."""
        return self.last if self.last is not None and n >= self.looks[-1] else self.per_look


def _edge(looks: tuple[int, ...], n: int, per_look: float, last: float | None) -> int | None:
    """The look's boundary (None: not a look, or no interval of n pairs reaches its confidence)."""
    if n not in looks:
        return None
    return boundary(n, last if last is not None and n == looks[-1] else per_look)


@functools.lru_cache(maxsize=32)
def _plus_sums(n: int) -> np.ndarray:
    """W+ of every sign string of length n (bit i: the pair of rank i + 1 lies above c)."""
    strings = np.arange(1 << n, dtype=np.int64)
    sums = np.zeros(1 << n, dtype=np.int64)
    for i in range(n):
        sums += ((strings >> i) & 1) * (i + 1)
    return sums


def _exact_error(looks: tuple[int, ...], per_look: float, last: float | None = None) -> float:
    """P(some look's interval excludes the true centre), summed over every sign string."""
    mass = np.ones(1)
    crossed = 0.0
    for n in range(1, looks[-1] + 1):
        strings = np.arange(1 << (n - 1), dtype=np.int64)
        grown = np.zeros(1 << n)
        share = mass / (2 * n)
        for place in range(n):  # the new pair's rank, each equally likely, and its sign
            spread = (strings & ((1 << place) - 1)) | ((strings >> place) << (place + 1))
            grown[spread] += share
            grown[spread | (1 << place)] += share
        mass = grown
        edge = _edge(looks, n, per_look, last)
        if edge is not None:
            w = _plus_sums(n)
            hit = (w >= edge) | (w <= walsh_count(n) - edge)
            crossed += float(mass[hit].sum())
            mass[hit] = 0.0
    return crossed


@functools.lru_cache(maxsize=8)
def _simulated_sums(looks: tuple[int, ...]) -> dict[int, np.ndarray]:
    """W+ at each look over PATHS simulated paths of null pairs (magnitudes uniform, signs fair)."""
    rng = np.random.default_rng(SEED)
    most = looks[-1]
    size = rng.random((PATHS, most))
    plus = rng.random((PATHS, most)) < 0.5
    w = np.zeros(PATHS, dtype=np.int64)
    out = {}
    for i in range(most):
        new = size[:, i:i + 1]
        # the new pair's rank, and the ranks it pushes up among the earlier "+" pairs
        rank = 1 + (size[:, :i] < new).sum(axis=1)
        pushed = ((size[:, :i] > new) & plus[:, :i]).sum(axis=1)
        w += np.where(plus[:, i], rank, 0) + pushed
        if i + 1 in looks:
            out[i + 1] = w.copy()
    return out


def _simulated_error(looks: tuple[int, ...], per_look: float, last: float | None = None
                     ) -> tuple[float, float]:
    """The simulated error and its standard error."""
    sums = _simulated_sums(looks)
    alive = np.ones(PATHS, dtype=bool)
    crossed = 0
    for n in looks:
        edge = _edge(looks, n, per_look, last)
        if edge is None:
            continue
        hit = alive & ((sums[n] >= edge) | (sums[n] <= walsh_count(n) - edge))
        crossed += int(hit.sum())
        alive &= ~hit
    p = crossed / PATHS
    return p, math.sqrt(p * (1.0 - p) / PATHS)


def error(looks: tuple[int, ...], per_look: float, last: float | None = None) -> float:
    """The design's two-sided error: exact up to EXACT_MAX pairs, else simulated."""
    check_looks(looks)
    if looks[-1] <= EXACT_MAX:
        return _exact_error(looks, per_look, last)
    return _simulated_error(looks, per_look, last)[0]


def _keeps(looks: tuple[int, ...], per_look: float, last: float | None, alpha: float) -> bool:
    """Whether the design keeps its error within alpha (a simulated one with 2 SE to spare)."""
    if looks[-1] <= EXACT_MAX:
        return _exact_error(looks, per_look, last) <= alpha
    err, se = _simulated_error(looks, per_look, last)
    return err + 2.0 * se <= alpha


def check_looks(looks: tuple[int, ...]) -> None:
    if not looks or any(b <= a for a, b in itertools.pairwise(looks)) or looks[0] < MIN_SEEDS:
        raise ValueError(f"looks must rise and start at {MIN_SEEDS} seeds or more, but got {looks}")


def _coverages(ns: tuple[int, ...], floor: float) -> list[float]:
    """Every coverage a signed-rank interval of these pair counts can have, from ``floor`` up:
    the boundaries change only there."""
    return sorted({c for n in ns for k in range(1, walsh_count(n) // 2 + 1) if (c := coverage(n, k)) >= floor}
                  | {floor})


def _first(candidates: list[float], keeps: Callable[[float], bool]) -> float | None:
    """The lowest candidate that keeps the error (it only falls as the confidence rises: bisection)."""
    if not candidates or not keeps(candidates[-1]):
        return None
    lo, hi = 0, len(candidates) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if keeps(candidates[mid]) else (mid + 1, hi)
    return candidates[lo]


@functools.cache  # pure: the plan, its rules, adaptive seeds and the report share one
def design(looks: tuple[int, ...], confidence: float = CONFIDENCE) -> Design:
    """The design of these looks at a two-sided error of 1 − ``confidence``.

    The looks before the last read their interval at one *interim* confidence, the lowest of
    at least 1 − α/3 at which they spend at most half the error rate α together; the last look
    reads its own at the lowest confidence that keeps the whole design's error within α. Early
    looks stop the arms whose seeds all agree by a wide margin; the last one keeps nearly the
    power of a fixed design of as many seeds (the shape of Haybittle and Peto's designs, on the
    exact distribution of the signed-rank statistic)."""
    check_looks(looks)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), but got {confidence=}")
    alpha = 1.0 - confidence
    if all(boundary(n, confidence) is None for n in looks):
        # not even the last look can reach the nominal confidence: nothing is ever decided
        return Design(looks, confidence, confidence, 0.0)
    if len(looks) == 1:
        return Design(looks, confidence, confidence, _fixed_error(looks[0], confidence))
    interim = _first(_coverages(looks[:-1], 1.0 - alpha / 3.0),
                     lambda c: _keeps(looks, c, 1.0 - 1e-12, alpha / 2.0))
    if interim is None:  # the interim looks decide nothing: the last one alone is a fixed design
        interim = 1.0 - 1e-12
    last = _first(_coverages(looks[-1:], confidence), lambda c: _keeps(looks, interim, c, alpha))
    if last is None:
        return Design(looks, confidence, interim, 0.0, 1.0 - 1e-12)
    return Design(looks, confidence, interim, error(looks, interim, last), last)


def _fixed_error(n: int, confidence: float) -> float:
    """A fixed design's exact error: twice the chance W+ reaches its one boundary."""
    edge = boundary(n, confidence)
    return 0.0 if edge is None else 2.0 * (1.0 - null_cdf(edge - 1, n))


def adaptive_looks(min_seeds: int, max_seeds: int, step: int = 1) -> tuple[int, ...]:
    """min, min + step, ..., always ending at max."""
    if min_seeds < MIN_SEEDS or max_seeds < min_seeds or step < 1:
        raise ValueError(f"need {MIN_SEEDS} <= min <= max and step >= 1, but got "
                         f"{min_seeds=}, {max_seeds=}, {step=}")
    looks = list(range(min_seeds, max_seeds + 1, step))
    if looks[-1] != max_seeds:
        looks.append(max_seeds)
    return tuple(looks)


# -- what a design can expect to decide ----------------------------------------------------------

@dataclass(frozen=True)
class PairsModel:
    """How :func:`expected_power` draws one arm's seeds against its baseline: each trial's
    crossing of the target, in units of the baseline's typical crossing, is ``effect`` (the
    baseline: 1) times exp(a seed's shared part + the trial's own part); a trial is stuck (never
    reaches) with probability ``stuck``; the horizon lies at 1 / ``crossing_fraction``, and a
    crossing past it never happened. The defaults are the calibration benchmark's ``falling``
    shape (benchmarks/calibration.py): its pairs' measured robust sd of 0.058 in log ratio is
    ``own_sd`` x sqrt(2), its baseline crosses the headline target at about 70 % of the horizon,
    and 5 % of its trials are stuck. The model reproduces that shape's measured decisions
    (tests/unit/test_sequential.py); the horizon's censoring is what keeps it from promising
    more power than the shape has."""

    own_sd: float = 0.041
    shared_sd: float = 0.06
    stuck: float = 0.05
    crossing_fraction: float = 0.7


#: the calibration's falling shape
FALLING = PairsModel()
#: simulated arms per effect (standard error about 0.01 on a power near 0.85), and their seed
POWER_ARMS = 1000
POWER_SEED = 20261128


@dataclass(frozen=True)
class Power:
    """The share of simulated arms of a true per-epoch ratio ``effect`` each answer ends with,
    and the seeds they ran, through the real decision at every look."""

    effect: float
    slower: float
    equivalent: float
    not_resolved: float
    faster: float
    mean_seeds: float
    arms: int


def _crossing(c: float, spacing: float, horizon: float) -> Observation:
    """A crossing at ``c`` as evaluations every ``spacing`` up to ``horizon`` see it."""
    if c >= horizon:
        return observe("never", before=math.floor(horizon / spacing) * spacing, at=0.0)
    k = math.floor(c / spacing)
    if k == 0:
        return observe("at_first_eval", before=0.0, at=spacing)
    return observe("interpolated", before=k * spacing, at=(k + 1) * spacing, estimate=c)


@functools.cache  # pure and seeded: one sweep's plan asks once per effect
def expected_power(looks: tuple[int, ...], confidence: float, effect: float, margin: float,
                   evals_per_horizon: float, model: PairsModel = FALLING, arms: int = POWER_ARMS) -> Power:
    """What the design of these looks at ``confidence`` decides for an arm ``effect`` times as
    slow per epoch as its baseline, evaluated ``evals_per_horizon`` times over the run, under
    ``model``: each simulated arm runs its looks through
    :func:`scalesweep.science.stats.decisions.decide_pairs` and stops at the first decision,
    as the driver does."""
    d = design(looks, confidence)
    horizon = 1.0 / model.crossing_fraction
    spacing = horizon / max(evals_per_horizon, 1.0)
    rng = random.Random(f"{POWER_SEED}/{looks}/{confidence}/{effect}/{margin}/{evals_per_horizon}")
    counts: dict[str, int] = {}
    seeds = 0
    for _ in range(arms):
        pairs = []
        for _seed in range(looks[-1]):
            shared = rng.gauss(0.0, model.shared_sd)
            arm, base = (_drawn(rng, model, centre, shared) for centre in (effect, 1.0))
            pairs.append((_crossing(arm, spacing, horizon), _crossing(base, spacing, horizon)))
        answer = "not resolved"
        for n in looks:
            answer, _ = decide_pairs({i: p[0] for i, p in enumerate(pairs[:n])},
                                     {i: p[1] for i, p in enumerate(pairs[:n])}, d.confidence_at, margin)
            if answer != "not resolved":
                break
        counts[answer] = counts.get(answer, 0) + 1
        seeds += n
    share = {k: v / arms for k, v in counts.items()}
    return Power(effect, share.get("slower", 0.0), share.get("equivalent", 0.0),
                 share.get("not resolved", 0.0), share.get("faster", 0.0), seeds / arms, arms)


def _drawn(rng: random.Random, model: PairsModel, centre: float, shared: float) -> float:
    """One trial's crossing: +inf for a stuck trial."""
    if rng.random() < model.stuck:
        return math.inf
    return centre * math.exp(shared + rng.gauss(0.0, model.own_sd))
