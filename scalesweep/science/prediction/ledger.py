"""Scoring predictions against what was later measured (docs/beyond.md, "Predict, then
verify"). Pure: no MLflow.

A prediction is an interval at a nominal confidence; once the study holds trials at the
predicted batch, its outcome is the observed median epochs to target there (a seed that never
reached counts as +inf, as in the predictor's own inputs) and whether the interval held it.
A median that never reached is right-censored at the epochs the verification trained (its
horizon): it lies beyond the horizon, a miss only when the interval ends before it; when the
interval reaches past the horizon the verification was too short to tell (censored). Over many
predictions the share of hits should approach the nominal coverage; pending ones (nothing
observed yet) and censored ones are not counted.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


def observed_median(epochs: Sequence[float]) -> float:
    """The seeds' median epochs to target (+inf entries kept: a seed that never reached)."""
    if not epochs or any(not e > 0 for e in epochs):
        raise ValueError(f"epochs must be one or more positive values (+inf: never reached), "
                         f"but got {list(epochs)!r}")
    return float(statistics.median(epochs))


def is_hit(observed: float, ci: tuple[float, float], horizon: float | None = None) -> bool | None:
    """Whether the interval (closed) holds the observed median. A median that never reached
    (+inf) lies beyond ``horizon``, the epochs its seeds trained: a miss when the interval ends
    before that, None (censored: cannot tell) when it reaches past it or the horizon is unknown."""
    lo, hi = ci
    if math.isfinite(observed):
        return lo <= observed <= hi
    if horizon is not None and hi < horizon:
        return False
    return None


def bounded_hit(lo: float, hi: float, ci: tuple[float, float]) -> bool | None:
    """Whether the closed interval ``ci`` holds a median known only to lie in ``[lo, hi]``
    (``lo == hi`` where it was measured; ``hi`` = +inf where it is only a lower bound, as
    :func:`is_hit`'s never-reached median beyond its horizon): a hit when all of ``[lo, hi]``
    lies inside, a miss when none of it does, else None (censored: cannot tell)."""
    if math.isnan(lo) or math.isnan(hi) or lo > hi:
        raise ValueError(f"lo must be at most hi, but got {lo=}, {hi=}")
    first, last = ci
    if first <= lo and hi <= last:
        return True
    if hi < first or lo > last:
        return False
    return None


@dataclass(frozen=True)
class Scored:
    """One prediction's line in the ledger; ``observed`` None while pending."""

    confidence: float
    observed: float | None
    hit: bool | None

    @property
    def result(self) -> str:
        """pending (nothing observed), censored (observed, cannot tell), hit or miss."""
        if self.observed is None:
            return "pending"
        if self.hit is None:
            return "censored"
        return "hit" if self.hit else "miss"


@dataclass(frozen=True)
class HitRate:
    verified: int
    hits: int
    #: the mean nominal confidence of the verified predictions (what the rate should approach)
    nominal: float | None

    @property
    def rate(self) -> float | None:
        return self.hits / self.verified if self.verified else None


def running_hit_rate(entries: Sequence[Scored]) -> list[HitRate]:
    """After each entry (in the order given), the hit rate so far over verified entries."""
    out, hits, confs = [], 0, []
    for e in entries:
        if e.hit is not None:
            hits += int(e.hit)
            confs.append(e.confidence)
        out.append(HitRate(len(confs), hits, statistics.fmean(confs) if confs else None))
    return out
