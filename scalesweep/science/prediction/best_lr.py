"""The best lr at a global batch nobody ran, with an interval (docs/beyond.md, "Predict, then
verify", "Best lr at M"). Pure: no torch, no Ray, no MLflow.

At each measured batch the study's lr grid has a best value: the lr whose seeds have the fewest
median epochs to target (a seed that never reached counts as +inf). Across batches the best lr
is taken to follow a power law, ``lr*(B) = c · B^k`` (k = 1 is the linear rule, 1/2 the square
root one), fitted by least squares in log-log and read at the target batch. The interval, in
log space, carries:

* **seeds**: a percentile bootstrap: each (batch, lr) cell's seeds drawn with replacement, the
  best lr per batch picked again, the line refitted, the prediction made again;
* **grid**: a grid only says the optimum lies within half a step of the best grid value on
  either side; those half-steps, carried through the line's weights at the target batch
  (worst case, a bias bound: added, not in quadrature);
* **fit**: with three batches or more, the residuals' scale times Student's t on n − 2 degrees
  of freedom, widened by the leverage of the target batch (two batches fix the line).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scalesweep.science.prediction.epochs import MAX_FACTOR, bootstrap_half_width, student_t

#: Mapping: global batch -> lr -> each seed's epochs to target (+inf: never reached)
Cells = Mapping[float, Mapping[float, Sequence[float]]]
DRAWS = 1000
METHOD = ("lr*(B) = c B^k fitted in log-log to the best lr of each measured batch's grid; "
          "interval: seed bootstrap and fit residuals (Student t, leverage) in quadrature, plus "
          "half a grid step per batch carried through the fit")


class BestLrUnknown(ValueError):
    """The study cannot say which lr is best at that batch; the message says why."""


@dataclass(frozen=True)
class BestLr:
    batch: float
    median: float
    ci: tuple[float, float]
    confidence: float
    exponent: float  # k of lr* ∝ B^k
    best_by_batch: dict[float, float]  # measured batch -> its best grid lr
    #: True where a batch's best lr is the smallest or largest of its grid: the optimum may lie
    #: beyond it and the grid term understates the error there
    at_grid_edge: tuple[float, ...]
    method: str = METHOD


def _best(lrs: Mapping[float, Sequence[float]]) -> float | None:
    meds = {lr: statistics.median(seeds) for lr, seeds in lrs.items() if seeds}
    finite = {lr: m for lr, m in meds.items() if math.isfinite(m)}
    if not finite:
        return None
    return min(sorted(finite), key=lambda lr: finite[lr])  # ties: the smaller lr


def _half_step(grid: Sequence[float], best: float) -> float:
    """Half the log distance from ``best`` to its wider grid neighbour."""
    logs = sorted(math.log(x) for x in grid)
    i = logs.index(math.log(best))
    gaps = [logs[j] - logs[j - 1] for j in (i, i + 1) if 0 < j < len(logs)]
    return max(gaps) / 2


def _weights(xs: Sequence[float], x0: float) -> list[float]:
    """Ordinary least squares' prediction at x0 as a weighted sum of the ys."""
    n, mx = len(xs), statistics.fmean(xs)
    sxx = sum((x - mx) ** 2 for x in xs)
    return [1 / n + (x0 - mx) * (x - mx) / sxx for x in xs]


def _fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = (sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
             / sum((x - mx) ** 2 for x in xs))
    return my - slope * mx, slope


def predict_best_lr(cells: Cells, batch: float, *, confidence: float = 0.90,
                    draws: int = DRAWS, seed: int = 0) -> BestLr:
    """The best lr at ``batch`` from the per-batch best lr of the study's lr grids."""
    if not 0.5 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0.5, 1), but got {confidence!r}")
    swept = {b: lrs for b, lrs in cells.items() if len([lr for lr, s in lrs.items() if s]) >= 2}
    if not swept:
        raise BestLrUnknown("the study did not sweep lr (one lr per batch): no best lr to predict")
    best = {b: _best(lrs) for b, lrs in sorted(swept.items())}
    never = sorted(b for b, lr in best.items() if lr is None)
    usable = {b: lr for b, lr in best.items() if lr is not None}
    if len(usable) < 2:
        where = ", ".join(f"{b:g}" for b in usable) or "none"
        raise BestLrUnknown(
            f"lr was swept with a usable best at {len(usable)} batch size(s) ({where}"
            + (f"; at {', '.join(f'{b:g}' for b in never)} no lr reached the target" if never else "")
            + "): how the best lr moves with the batch needs two or more")
    lo_b, hi_b = min(usable), max(usable)
    if not lo_b / MAX_FACTOR <= batch <= hi_b * MAX_FACTOR:
        raise BestLrUnknown(f"batch {batch:g} is more than {MAX_FACTOR:g}x outside the batches "
                            f"with an lr sweep ({lo_b:g}..{hi_b:g})")
    xs = [math.log(b) for b in usable]
    x0 = math.log(batch)
    a, k = _fit(xs, [math.log(lr) for lr in usable.values()])
    center = a + k * x0
    tail = (1 - confidence) / 2

    weights = _weights(xs, x0)
    grid_hw = sum(abs(w) * _half_step(list(swept[b]), lr)
                  for w, (b, lr) in zip(weights, usable.items(), strict=True))
    fit_hw = 0.0
    if len(usable) > 2:
        resid = [math.log(lr) - (a + k * x) for x, lr in zip(xs, usable.values(), strict=True)]
        scale = math.sqrt(sum(r * r for r in resid) / (len(xs) - 2))
        h = sum(w * w for w in weights)  # the leverage of x0 under OLS
        fit_hw = student_t(1 - tail, len(xs) - 2) * scale * math.sqrt(1 + h)

    rng = random.Random(seed)
    boot = []
    for _ in range(draws):
        picks = {}
        for b in usable:
            drawn = {lr: rng.choices(list(s), k=len(s)) for lr, s in swept[b].items() if s}
            pick = _best(drawn)
            if pick is not None:
                picks[b] = pick
        if len(picks) == len(usable):
            ba, bk = _fit(xs, [math.log(lr) for lr in picks.values()])
            boot.append(ba + bk * x0)
    seeds_hw = bootstrap_half_width(boot, center, tail, draws)
    half = math.hypot(seeds_hw, fit_hw) + grid_hw
    edges = tuple(b for b, lr in usable.items() if lr in (min(swept[b]), max(swept[b])))
    return BestLr(batch, math.exp(center), (math.exp(center - half), math.exp(center + half)),
                  confidence, k, dict(usable), edges)
