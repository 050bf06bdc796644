"""Scoring predictions against what was later measured (docs/beyond.md, "Predict, then
verify"). Pure: no MLflow.

A prediction is an interval at a nominal confidence; once the study holds trials at the
predicted batch, its outcome is the observed median epochs to target there (a seed that never
reached counts as +inf, as in the predictor's own inputs) and whether the interval held it.
Over many predictions the share of hits should approach the nominal coverage; pending ones
(nothing observed yet) are not counted.
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


def is_hit(observed: float, ci: tuple[float, float]) -> bool:
    """The interval (closed) holds the observed median; +inf is never inside a finite one."""
    lo, hi = ci
    return lo <= observed <= hi and math.isfinite(observed)


@dataclass(frozen=True)
class Scored:
    """One prediction's line in the ledger; ``observed`` None while pending."""

    confidence: float
    observed: float | None
    hit: bool | None


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
