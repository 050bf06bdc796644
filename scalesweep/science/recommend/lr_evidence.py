"""Where a study's own arms put the best lr at one batch, with an interval. Pure.

At the batch N the study ran its lr rules (none, sqrt, linear, an explicit factor): each is an
lr factor f (× the reference's lr) with one paired epochs ratio per seed (the arm's epochs to
target over the baseline's on the same seed). Near its best, epochs to target against lr is a
bowl; in log lr it is taken as a parabola,

    log ratio = a_s + b u + c u²,   u = log f,

a_s one level per seed (the paired baseline seed's epochs divide every arm's ratio on that
seed, so a seed's ratios share an offset that says nothing about the lr), and the best factor
is the bottom, u* = −b / (2c), which needs c > 0 (a bowl, not a hill) and three or more
factors. The fit is ordinary least squares on every seed's log ratio, the seed levels taken
out by centring within each seed (where every seed ran two arms or more; otherwise one level
for all).

**Interval: Fieller's** (Fieller 1954) for the ratio −b / (2c): the set of u at which
b + 2cu = 0 is not rejected by a t test, {u : (b̂ + 2ĉu)² ≤ t² Var(b̂ + 2ĉu)}, t Student's on
the residual degrees of freedom. Exact under Gaussian log-ratio noise of one variance, and it
says so when the data do not locate the bottom: where ĉ is not significantly above 0 the set is
unbounded and the interval is (0, ∞) in f; the lr model then bounds the factor at M, not
the evidence (:mod:`.recipe`). A bowl fitted to three factors has as many levels as points:
the seeds, not the arms, give the degrees of freedom.

A seed that never reached the target has no ratio (+inf): it is left out and counted; an arm
whose median seed never reached is left out and named (its lr is past the usable range).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from scalesweep.science.prediction.epochs import student_t

METHOD = ("log ratio = a_seed + b log f + c (log f)² by least squares on every seed's paired "
          "epochs ratio; best factor exp(−b/2c); interval: Fieller's for −b/2c (Student t on "
          "the residual degrees of freedom)")


@dataclass(frozen=True)
class LrArm:
    """One lr factor run at the batch: each seed's paired epochs ratio (+inf: never reached)."""

    factor: float
    ratios: Mapping[int, float]  # seed -> ratio

    def __post_init__(self) -> None:
        if not (math.isfinite(self.factor) and self.factor > 0):
            raise ValueError(f"factor must be finite and positive, but got {self.factor!r}")
        if not self.ratios or any(not r > 0 for r in self.ratios.values()):
            raise ValueError(f"ratios must be one or more positive values (+inf: never reached), "
                             f"but got {dict(self.ratios)!r}")

    @property
    def median(self) -> float:
        return statistics.median(self.ratios.values())


@dataclass(frozen=True)
class BowlFit:
    """The best lr factor at the batch, from the arms' evidence."""

    #: exp(−b/2c); None where the arms show no bowl (ĉ ≤ 0): no bottom to read
    factor: float | None
    #: Fieller's interval in factor units; (0, inf) where it is unbounded
    ci: tuple[float, float]
    confidence: float
    curvature: float  # ĉ: log ratio per (log f)²
    dof: int
    #: the measured factor with the lowest median ratio (what a grid alone would pick)
    best_measured: float
    #: whether seed levels were taken out (every seed ran two arms or more)
    blocked: bool
    notes: tuple[str, ...]
    method: str = METHOD

    @property
    def located(self) -> bool:
        """Whether the interval is bounded: the evidence pins the bottom down."""
        return self.factor is not None and self.ci[0] > 0 and math.isfinite(self.ci[1])


class NoLrEvidence(ValueError):
    """The arms cannot be fitted at all; the message says why."""


@lru_cache(maxsize=64)
def _t(q: float, dof: int) -> float:
    return student_t(q, dof)


def _observations(arms: Sequence[LrArm]) -> tuple[list[tuple[int, float, float]], list[str]]:
    notes: list[str] = []
    obs: list[tuple[int, float, float]] = []
    for arm in arms:
        if not math.isfinite(arm.median):
            notes.append(f"lr factor {arm.factor:.3g}: the median seed never reached the target; "
                         "left out (past the usable lr)")
            continue
        never = [s for s, r in arm.ratios.items() if not math.isfinite(r)]
        if never:
            notes.append(f"lr factor {arm.factor:.3g}: {len(never)} seed(s) never reached; left "
                         "out of the fit")
        obs += [(s, math.log(arm.factor), math.log(r)) for s, r in arm.ratios.items()
                if math.isfinite(r)]
    return obs, notes


def _centred(obs: list[tuple[int, float, float]], blocked: bool
             ) -> tuple[list[tuple[float, float, float]], int]:
    """(u, u², y) less their seed's means (or the overall means) and the levels taken out."""
    groups: dict[int, list[tuple[float, float, float]]] = {}
    for s, u, y in obs:
        groups.setdefault(s if blocked else 0, []).append((u, u * u, y))
    rows = []
    for members in groups.values():
        mu = [statistics.fmean(col) for col in zip(*members, strict=True)]
        rows += [(u - mu[0], v - mu[1], y - mu[2]) for u, v, y in members]
    return rows, len(groups)


def fit_bowl(arms: Sequence[LrArm], confidence: float = 0.90) -> BowlFit:
    """The bowl's bottom and Fieller's interval (module docs)."""
    if not 0.5 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0.5, 1), but got {confidence!r}")
    obs, notes = _observations(arms)
    factors = sorted({u for _, u, _ in obs})
    if len(factors) < 3:
        raise NoLrEvidence(f"{len(factors)} lr factor(s) with a usable ratio at this batch: a bowl "
                           "needs three or more (none, sqrt and linear give three)")
    usable = [a for a in arms if math.isfinite(a.median)]
    best_measured = min(usable, key=lambda a: (a.median, a.factor)).factor
    arms_of_seed: dict[int, set[float]] = {}
    for s, u, _ in obs:
        arms_of_seed.setdefault(s, set()).add(u)
    blocked = all(len(us) >= 2 for us in arms_of_seed.values())
    rows, levels = _centred(obs, blocked)
    dof = len(rows) - levels - 2
    if dof < 1:
        raise NoLrEvidence(f"{len(rows)} ratios and {levels + 2} parameters: no degrees of freedom "
                           "left to say how far the bottom is known (run two seeds or more)")
    suu = sum(u * u for u, _, _ in rows)
    suv = sum(u * v for u, v, _ in rows)
    svv = sum(v * v for _, v, _ in rows)
    suy = sum(u * y for u, _, y in rows)
    svy = sum(v * y for _, v, y in rows)
    det = suu * svv - suv * suv
    b = (svv * suy - suv * svy) / det
    c = (suu * svy - suv * suy) / det
    rss = sum((y - b * u - c * v) ** 2 for u, v, y in rows)
    s2 = rss / dof
    vbb, vbc, vcc = s2 * svv / det, -s2 * suv / det, s2 * suu / det
    t2 = _t(1.0 - (1.0 - confidence) / 2.0, dof) ** 2
    ci = _fieller(b, c, vbb, vbc, vcc, t2)
    if c <= 0:
        notes.append("the ratios show no bowl in log lr (curvature ≤ 0): the best lr lies at or "
                     "beyond the measured factors, and the evidence does not say where")
        return BowlFit(None, (0.0, math.inf), confidence, c, dof, best_measured, blocked, tuple(notes))
    if ci == (0.0, math.inf):
        notes.append("the bowl's curvature is not resolved from 0 at this confidence: the "
                     "evidence does not bound the best lr")
    return BowlFit(math.exp(-b / (2.0 * c)), ci, confidence, c, dof, best_measured, blocked,
                   tuple(notes))


def _fieller(b: float, c: float, vbb: float, vbc: float, vcc: float, t2: float
             ) -> tuple[float, float]:
    """{u : (b + 2cu)² ≤ t² (vbb + 4u vbc + 4u² vcc)} in factor units (exp u); (0, inf) where
    that set is unbounded (ĉ not significant) or is not an interval."""
    qa = 4.0 * (c * c - t2 * vcc)
    qb = 4.0 * (b * c - t2 * vbc)
    qc = b * b - t2 * vbb
    disc = qb * qb - 4.0 * qa * qc
    if c <= 0 or qa <= 0 or disc < 0:
        return 0.0, math.inf
    root = math.sqrt(disc)
    lo, hi = (-qb - root) / (2.0 * qa), (-qb + root) / (2.0 * qa)
    return _exp(lo), _exp(hi)


def _exp(u: float) -> float:
    """exp that saturates to 0 or inf instead of overflowing (a barely significant bowl can
    put an end of the set very far out)."""
    return math.exp(max(-700.0, min(700.0, u))) if abs(u) < 700.0 else (0.0 if u < 0 else math.inf)
