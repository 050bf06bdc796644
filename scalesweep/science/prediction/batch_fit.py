"""Updates to target against global batch: S = S_min (1 + B_crit / B). Pure: no torch, no Ray.

McCandlish et al. (2018) show that, tuned well, the optimizer updates S needed to reach a
target and the samples E = S·B trade off as (S/S_min − 1)(E/E_min − 1) = 1, i.e.
S = S_min (1 + B_crit / B) with B_crit = E_min / S_min, the critical batch: well below it,
doubling B halves S (linear scaling pays); well above it, S stays near S_min and the extra
samples are wasted. The form is linear in 1/B, S = S_min + (S_min B_crit) / B, so ordinary
least squares in x = 1/B gives S_min (intercept) and S_min B_crit (slope).

:func:`judge` says, in words, why a fit should not be used: too few batch sizes to test the
form, a poor fit, parameters outside the form (updates not falling with B, or falling as fast
as 1/B everywhere measured), or a B_crit or target batch far outside the measured range.
:func:`recommend` picks an arm (lr rule × warmup rule) for a target batch: the measured best
where the target was measured, else the best trustworthy prediction, else nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

#: a recommendation needs at least this many distinct batch sizes that reached the target
#: (two fix both parameters exactly and test nothing)
MIN_BATCH_SIZES = 3
#: below this R² (in 1/B) the form does not describe the arm
MIN_R2 = 0.9
#: how far beyond the measured batch range (factor) a B_crit or a target is still believed
MAX_EXTRAPOLATION = 2.0


@dataclass(frozen=True)
class Fit:
    """S = s_min + slope / B fitted to ``batches`` and ``updates``."""

    s_min: float
    slope: float  # S_min * B_crit
    r2: float
    batches: tuple[float, ...]
    updates: tuple[float, ...]

    @property
    def b_crit(self) -> float:
        """slope / S_min; inf when S_min <= 0 < slope (1/B scaling everywhere measured), NaN
        when updates do not fall with the batch."""
        if self.slope <= 0:
            return math.nan
        return self.slope / self.s_min if self.s_min > 0 else math.inf

    def predict(self, batch: float) -> float:
        return self.s_min + self.slope / batch

    @property
    def residuals(self) -> tuple[float, ...]:
        """Relative residuals (measured − fitted) / fitted, one per point."""
        return tuple((s - self.predict(b)) / self.predict(b)
                     for b, s in zip(self.batches, self.updates, strict=True))  # fmt: skip

    @property
    def n_batches(self) -> int:
        return len(set(self.batches))


def fit(batches: Sequence[float], updates: Sequence[float]) -> Fit:
    """Least squares of S against 1/B; needs two distinct batch sizes, all values positive."""
    if len(batches) != len(updates):
        raise ValueError(f"batches and updates must pair up, but got {len(batches)=}, {len(updates)=}")
    for name, values in (("batches", batches), ("updates", updates)):
        bad = [v for v in values if not (math.isfinite(v) and v > 0)]
        if bad:
            raise ValueError(f"{name} must be finite and positive, but got {bad}")
    if len(set(batches)) < 2:
        raise ValueError(f"a fit needs at least 2 distinct batch sizes, but got {sorted(set(batches))}")
    x = [1.0 / b for b in batches]
    n = len(x)
    mx, my = sum(x) / n, sum(updates) / n
    sxx = sum((xi - mx) ** 2 for xi in x)
    sxy = sum((xi - mx) * (yi - my) for xi, yi in zip(x, updates, strict=True))
    slope = sxy / sxx
    s_min = my - slope * mx
    ss_res = sum((yi - (s_min + slope * xi)) ** 2 for xi, yi in zip(x, updates, strict=True))
    ss_tot = sum((yi - my) ** 2 for yi in updates)
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    return Fit(s_min, slope, r2, tuple(float(b) for b in batches), tuple(float(s) for s in updates))


def judge(fit: Fit, target_batch: float | None = None) -> list[str]:
    """Why ``fit`` should not be trusted; [] if nothing.

    Without ``target_batch``: for its B_crit (which must lie within a factor
    MAX_EXTRAPOLATION of the measured batches to be measured at all). With it: for predicting
    S there (which must lie within that factor of the measured batches; a B_crit outside them
    is no obstacle: the curve is then flat, or 1/B, across the range and just beyond it).
    """
    problems = []
    lo, hi = min(fit.batches), max(fit.batches)
    if fit.n_batches < MIN_BATCH_SIZES:
        problems.append(f"only {fit.n_batches} batch sizes reached the target: two points fix "
                        f"S_min and B_crit exactly and test nothing (need {MIN_BATCH_SIZES})")
    elif fit.r2 < MIN_R2:
        problems.append(f"poor fit: R² = {fit.r2:.3f} < {MIN_R2}")
    if fit.slope <= 0:
        problems.append("updates to target do not fall as the batch grows: no critical batch "
                        "of the form S_min (1 + B_crit/B)")
    elif fit.s_min <= 0:
        problems.append(f"S_min <= 0: updates fall like 1/B (or faster) over the whole measured "
                        f"range {lo:g}..{hi:g}; B_crit lies beyond it and is unknown")
    elif target_batch is None and not lo / MAX_EXTRAPOLATION <= fit.b_crit <= hi * MAX_EXTRAPOLATION:
        problems.append(f"B_crit = {fit.b_crit:.4g} lies far outside the measured batch range "
                        f"{lo:g}..{hi:g}")
    if target_batch is not None and not lo / MAX_EXTRAPOLATION <= target_batch <= hi * MAX_EXTRAPOLATION:
        problems.append(f"target batch {target_batch:g} is more than {MAX_EXTRAPOLATION:g}x outside "
                        f"the measured range {lo:g}..{hi:g}")
    return problems


@dataclass(frozen=True)
class Arm:
    """One lr rule × warmup rule: updates to target at each measured global batch (None: no
    trial of this arm reached the target there)."""

    name: str
    updates: Mapping[float, float | None]

    def reached(self) -> dict[float, float]:
        return {b: s for b, s in sorted(self.updates.items()) if s is not None}

    def fit(self) -> Fit | None:
        points = self.reached()
        if len(points) < 2:
            return None
        return fit(list(points), list(points.values()))


@dataclass(frozen=True)
class Recommendation:
    """An arm and its updates to target at ``batch``; ``arm`` None means: no recommendation,
    and ``reasons`` say why. ``measured``: read off a trial, not predicted."""

    batch: float
    arm: str | None
    updates: float | None = None
    measured: bool = False
    reasons: list[str] = field(default_factory=list)  # why not (or, with an arm, caveats)


def recommend(arms: Sequence[Arm], batch: float) -> Recommendation:
    """The arm with the fewest updates to target at ``batch``.

    Where ``batch`` was measured, the measurement decides (no model needed). Elsewhere only arms
    whose fit :func:`judge` finds nothing against, and that reached the target at every
    measured batch up to ``batch`` (an arm that failed at a smaller batch will not do better
    at a larger one), are predicted; none left means no recommendation.
    """
    if not batch > 0:
        raise ValueError(f"batch must be positive, but got {batch=}")
    here = {a.name: a.updates[batch] for a in arms if batch in a.updates}
    if here:
        reached = {name: s for name, s in here.items() if s is not None}
        if not reached:
            return Recommendation(batch, None, reasons=[
                f"no arm measured at global batch {batch:g} reached the target"])
        best = min(reached, key=lambda name: (reached[name], name))
        return Recommendation(batch, best, reached[best], measured=True)
    reasons: list[str] = []
    candidates: dict[str, float] = {}
    for arm in arms:
        failed = [b for b, s in arm.updates.items() if s is None and b <= batch]
        if failed:
            reasons.append(f"{arm.name}: never reached the target at batch {min(failed):g}")
            continue
        f = arm.fit()
        if f is None:
            reasons.append(f"{arm.name}: reached the target at fewer than 2 batch sizes")
            continue
        problems = judge(f, batch)
        if problems:
            reasons.append(f"{arm.name}: " + "; ".join(problems))
            continue
        candidates[arm.name] = f.predict(batch)
    if not candidates:
        return Recommendation(batch, None, reasons=reasons or ["no arms"])
    best = min(candidates, key=lambda name: (candidates[name], name))
    return Recommendation(batch, best, candidates[best], reasons=reasons)
