"""Epochs to target at a global batch nobody ran, with an interval (docs/beyond.md, "Predict,
then verify"). Pure: no torch, no Ray, no MLflow.

The model is McCandlish et al. (2018): tuned well, the epochs needed to reach a target grow
linearly with the batch, ``E(B) = E_min (1 + B / B_crit)`` (the same law as
``S = S_min (1 + B_crit / B)`` in :mod:`scalesweep.science.prediction.batch_fit`, counted in epochs,
where it is a straight line in B). Measured epochs at two or more batch sizes fix the line;
one batch size and a gradient noise scale fix it through ``B_crit``.

The interval carries three sources of error, each as a relative (log) half-width:

* **seeds**: a percentile bootstrap. Each batch size's seeds are drawn with replacement, the
  medians refitted, the prediction made again; the spread of those predictions is what the
  seeds leave open.
* **fit**: how far the law misses the measured batches beyond what the seeds explain
  (:func:`misfit`: the residuals' variance less each median's seed variance, n − 2 degrees of
  freedom), times Student's t on those degrees of freedom, widened by the leverage of the
  predicted batch. With two batch sizes the line passes through both points and tests nothing:
  the half-width is then ``TWO_POINT_FIT_ERROR``.
* **disagreement**: where a noise scale is known too, the law with ``B_crit`` read off it is a
  second prediction (through the measured batch nearest the target); the interval spans both.
  With the noise scale alone (one batch size), ``B_crit`` is only known to lie between
  ``NOISE_SCALE_RANGE`` times it, and the interval spans that whole range.

Seeds and fit add in quadrature (independent); the disagreement is a union (a bias, not a noise).

Beyond the measured batches (above the largest or below the smallest, with two or more of them),
the seeds-and-fit half-width is multiplied by ``1 + EXTRAPOLATION_SLOPE * s`` before the union,
``s = |log(M/N)|`` the step from the nearest measured batch N to the predicted M: on real models
the line's interval covers less than its nominal rate there, and the less the further it goes
(the two-point fit error is a constant, the law's bend is not). The slope is what a backtest on
MLPerf's reference convergence points needs, fitted leave-one-benchmark-out
(benchmarks/predict_backtest.py). Between measured batches it is left alone, and at their edge
(s = 0) the factor is 1: no jump between a batch just inside and one just outside.
A seed that never reached the target is +inf: it enters the medians (never dropped), so a batch
whose median never reached cannot be used and is refused by name.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: how far (factor) outside the measured batches a prediction is still made
MAX_FACTOR = 4.0
#: the relative half-width for a line through two points (the fit tests nothing there). MLPerf's
#: reference convergence points interpolate between measured batch sizes with a leave-one-out
#: error up to 12 % (mlcommons/logging); a two-point line extrapolated is no better.
TWO_POINT_FIT_ERROR = 0.12
#: B_crit / B_noise between these, where only the noise scale says where B_crit is: McCandlish
#: et al. find B_crit near B_simple within about an order of magnitude; on the WeNet study
#: here the updates-to-target fit puts it 6-7x above the measured noise scale
NOISE_SCALE_RANGE = (1.0, 10.0)
#: where the batch lies outside the measured ones (with two or more), the seeds-and-fit
#: half-width (log scale) is multiplied by 1 + this * s, s = |log(M/N)| (N the nearest measured
#: batch): linear in the step, 1 at the edge. Set by benchmarks/predict_backtest.py on MLPerf
#: Training's reference convergence points: the smallest slope at which the backtest's
#: extrapolations (one step up from the 2 nearest / all batches below, down from the 2 nearest
#: above) cover the observed median at the nominal 90 %, fitted on every benchmark; its
#: leave-one-benchmark-out version is the coverage the backtest reports, per step band. Rounded
#: up: a wider interval, never a narrower one. tests/unit/test_predict_backtest.py checks it
#: against the data.
EXTRAPOLATION_SLOPE = 1.13
#: bootstrap draws (a fixed seed: the same data give the same interval)
DRAWS = 2000
METHOD = ("E(B) = E_min (1 + B/B_crit) (McCandlish et al. 2018) fitted to the median epochs per "
          "batch; interval: seed bootstrap (percentile) and fit residuals (Student t, leverage) in "
          "quadrature, spanning the noise-scale prediction where one is given")


class PredictionRefused(ValueError):
    """The data cannot support a prediction at that batch; ``reasons`` say why, by name."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__("; ".join(reasons))
        self.reasons = reasons


@dataclass(frozen=True)
class BatchPoint:
    """One measured global batch: each seed's epochs to target (+inf: never reached)."""

    batch: float
    epochs: tuple[float, ...]

    def __post_init__(self) -> None:
        if not (math.isfinite(self.batch) and self.batch > 0):
            raise ValueError(f"batch must be finite and positive, but got {self.batch!r}")
        if not self.epochs or any(not e > 0 for e in self.epochs):
            raise ValueError(f"epochs must be one or more positive values (+inf: never reached), "
                             f"but got {self.epochs!r}")

    @property
    def median(self) -> float:
        return statistics.median(self.epochs)


@dataclass(frozen=True)
class Line:
    """E(B) = e_min + slope * B, fitted by least squares on relative errors."""

    e_min: float
    slope: float  # E_min / B_crit
    #: relative residual scale (n − 2 degrees of freedom); None with two batch sizes
    scale: float | None
    batches: tuple[float, ...]

    @property
    def b_crit(self) -> float:
        return self.e_min / self.slope if self.slope > 0 else math.inf

    def at(self, batch: float) -> float:
        return self.e_min + self.slope * batch

    def leverage(self, batch: float) -> float:
        """h(B) of ordinary least squares in B (the weights are near-uniform on a log scale)."""
        n = len(self.batches)
        mean = sum(self.batches) / n
        sxx = sum((b - mean) ** 2 for b in self.batches)
        return 1.0 / n + (batch - mean) ** 2 / sxx


def fit_line(batches: Sequence[float], epochs: Sequence[float]) -> Line:
    """Weighted least squares of E on B with weights 1/E² (relative errors: a 5 % miss at 40
    epochs counts as much as one at 4)."""
    if len(set(batches)) < 2 or len(batches) != len(epochs):
        raise ValueError(f"a line needs two or more distinct batches paired with epochs, but got "
                         f"{list(batches)} and {list(epochs)}")
    w = [1.0 / (e * e) for e in epochs]
    sw = sum(w)
    mb = sum(wi * b for wi, b in zip(w, batches, strict=True)) / sw
    me = sum(wi * e for wi, e in zip(w, epochs, strict=True)) / sw
    sbb = sum(wi * (b - mb) ** 2 for wi, b in zip(w, batches, strict=True))
    sbe = sum(wi * (b - mb) * (e - me) for wi, b, e in zip(w, batches, epochs, strict=True))
    slope = sbe / sbb
    e_min = me - slope * mb
    scale = None
    if len(batches) > 2:
        resid = [math.log(e / (e_min + slope * b)) if e_min + slope * b > 0 else math.inf
                 for b, e in zip(batches, epochs, strict=True)]
        scale = math.sqrt(sum(r * r for r in resid) / (len(batches) - 2))
    return Line(e_min, slope, scale, tuple(batches))


def student_t(q: float, dof: int) -> float:
    """The q-quantile of Student's t (q in (0.5, 1)), by bisection on its CDF."""
    def cdf(t: float) -> float:  # regularized incomplete beta via a series, small dof only
        x = dof / (dof + t * t)
        return 1.0 - 0.5 * _betainc(dof / 2.0, 0.5, x)

    lo, hi = 0.0, 1000.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < q else (lo, mid)
    return (lo + hi) / 2


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) (continued fraction, Numerical Recipes' form)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log(1.0 - x))
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _betainc(b, a, 1.0 - x)
    f, c, d = 1.0, 1.0, 0.0
    for i in range(400):
        m = i // 2
        if i == 0:
            num = 1.0
        elif i % 2 == 0:
            num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:
            num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1.0 + num * d
        d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
        c = 1.0 + num / (c if abs(c) > 1e-300 else 1e-300)
        f *= c * d
        if abs(1.0 - c * d) < 1e-14:
            break
    return front * (f - 1.0) / a


@dataclass(frozen=True)
class Prediction:
    """Epochs to target at ``batch``: a median and its interval, with where the width came from."""

    batch: float
    median: float
    ci: tuple[float, float]
    confidence: float
    #: relative half-widths (log scale) of the seeds and the fit; the noise-scale prediction
    seeds: float
    fit: float
    noise_scale_epochs: tuple[float, float] | None
    b_crit: float
    method: str = METHOD
    #: the factor the seeds-and-fit half-width was multiplied by (:func:`widening` of the step
    #: where the batch lies outside the measured ones, else 1.0: not widened)
    widened: float = 1.0


def check_support(points: Sequence[BatchPoint], batch: float, noise_scale: float | None) -> None:
    """Refuse, by name, data that cannot support a prediction at ``batch``."""
    reasons = []
    usable = [p for p in points if math.isfinite(p.median)]
    never = sorted(p.batch for p in points if not math.isfinite(p.median))
    if never:
        reasons.append(f"at batch {', '.join(f'{b:g}' for b in never)} the median seed never "
                       "reached the target: no epochs to fit there")
    sizes = sorted({p.batch for p in usable})
    if len(sizes) < 2 and noise_scale is None:
        reasons.append(f"one batch size ({', '.join(f'{b:g}' for b in sizes) or 'none'}) and no "
                       "noise scale: nothing says how epochs change with the batch")
    if noise_scale is not None and not (math.isfinite(noise_scale) and noise_scale > 0):
        reasons.append(f"the noise scale must be finite and positive, but is {noise_scale!r}")
    if sizes and not sizes[0] / MAX_FACTOR <= batch <= sizes[-1] * MAX_FACTOR:
        reasons.append(f"batch {batch:g} is more than {MAX_FACTOR:g}x outside the measured "
                       f"{sizes[0]:g}..{sizes[-1]:g}")
    if reasons:
        raise PredictionRefused(reasons)


def misfit(line: Line, points: Sequence[BatchPoint], medians: Sequence[float],
           rng: random.Random, draws: int = 200) -> float:
    """The law's own error at a batch (relative, log scale), beyond what the seeds explain: the
    residuals' variance less each median's seed variance (bootstrapped), by moments over n − 2
    degrees of freedom; 0 when the seeds explain the residuals."""
    resid, seed_var = [], []
    for p, m in zip(points, medians, strict=True):
        resid.append(math.log(m / line.at(p.batch)) if line.at(p.batch) > 0 else math.inf)
        logs = [math.log(statistics.median(rng.choices(p.epochs, k=len(p.epochs))))
                for _ in range(draws)]
        seed_var.append(statistics.pvariance(logs) if all(map(math.isfinite, logs)) else 0.0)
    if not all(map(math.isfinite, resid)):
        return math.inf
    lev = [line.leverage(p.batch) for p in points]
    excess = sum(r * r - v * (1 - h) for r, v, h in zip(resid, seed_var, lev, strict=True))
    return math.sqrt(max(0.0, excess / (len(points) - 2)))


def _central(points: Sequence[BatchPoint], batch: float, noise_scale: float | None,
             medians: Sequence[float]) -> float:
    if len(points) >= 2:
        line = fit_line([p.batch for p in points], medians)
        return max(line.at(batch), 1e-12)
    assert noise_scale is not None
    return _through(points[0].batch, medians[0], batch, noise_scale * _geo(NOISE_SCALE_RANGE))


def bootstrap_half_width(boot: list[float], center: float, tail: float, draws: int) -> float:
    """The percentile interval's wider half around ``center``, on the scale of ``boot`` (the
    resamples that gave a value, of ``draws``); +inf when fewer than half did: most resamples
    never reached somewhere, and the seeds say little."""
    if len(boot) < draws // 2:
        return math.inf
    boot = sorted(boot)
    lo_q, hi_q = boot[int(tail * len(boot))], boot[min(len(boot) - 1, int((1 - tail) * len(boot)))]
    return max(center - lo_q, hi_q - center)


def _geo(pair: tuple[float, float]) -> float:
    return math.sqrt(pair[0] * pair[1])


def _through(anchor: float, epochs: float, batch: float, b_crit: float) -> float:
    """The law through (anchor, epochs) with this B_crit, read at ``batch``."""
    return epochs * (1.0 + batch / b_crit) / (1.0 + anchor / b_crit)


def extrapolates(points: Sequence[BatchPoint], batch: float) -> bool:
    """Whether ``batch`` lies outside the measured batches (two or more of them): where the
    line's interval is widened. One batch size leaves the noise scale as the only source, whose
    interval is its own range and is not widened."""
    sizes = sorted({p.batch for p in points if math.isfinite(p.median)})
    return len(sizes) >= 2 and not sizes[0] <= batch <= sizes[-1]


def extrapolation_step(points: Sequence[BatchPoint], batch: float) -> float:
    """s = |log(M/N)|: how far (log scale) ``batch`` lies outside the measured batches, N the
    nearest of them; 0 where :func:`extrapolates` is false (inside, or one batch size)."""
    if not extrapolates(points, batch):
        return 0.0
    sizes = [p.batch for p in points if math.isfinite(p.median)]
    return min(abs(math.log(batch / b)) for b in sizes)


def widening(step: float, slope: float = EXTRAPOLATION_SLOPE) -> float:
    """The factor on the seeds-and-fit half-width ``step`` (log scale) outside the measured
    batches: 1 at their edge, growing linearly with the step."""
    if not (math.isfinite(step) and step >= 0.0):
        raise ValueError(f"step must be finite and at least 0, but got {step!r}")
    return 1.0 + slope * step


def predict(points: Sequence[BatchPoint], batch: float, *, noise_scale: float | None = None,
            confidence: float = 0.90, draws: int = DRAWS, seed: int = 0,
            extrapolation_factor: float | None = None) -> Prediction:
    """Epochs to target at ``batch`` from the measured ``points`` (and a noise scale).
    Outside the measured batches the interval is widened by :func:`widening` of the step, or by
    ``extrapolation_factor`` where one is given (1.0: the bare method, as the backtest
    calibrates it)."""
    if not 0.5 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0.5, 1), but got {confidence!r}")
    if extrapolation_factor is not None and not (
            math.isfinite(extrapolation_factor) and extrapolation_factor >= 1.0):
        raise ValueError(f"extrapolation_factor must be finite and at least 1 (it only widens), "
                         f"but got {extrapolation_factor!r}")
    check_support(points, batch, noise_scale)
    points = sorted(points, key=lambda p: p.batch)
    medians = [p.median for p in points]
    center = _central(points, batch, noise_scale, medians)
    tail = (1.0 - confidence) / 2.0

    rng = random.Random(seed)
    boot = []
    for _ in range(draws):
        meds = [statistics.median(rng.choices(p.epochs, k=len(p.epochs))) for p in points]
        if all(math.isfinite(m) for m in meds):
            boot.append(math.log(_central(points, batch, noise_scale, meds)))
    seeds_hw = bootstrap_half_width(boot, math.log(center), tail, draws)

    b_crit = math.nan
    fit_hw = 0.0
    if len(points) >= 2:
        line = fit_line([p.batch for p in points], medians)
        b_crit = line.b_crit
        if len(points) == 2:
            fit_hw = TWO_POINT_FIT_ERROR
        else:
            tau = misfit(line, points, medians, rng)
            fit_hw = student_t(1 - tail, len(points) - 2) * tau * math.sqrt(1 + line.leverage(batch))
    widened = 1.0
    if extrapolates(points, batch):
        step = extrapolation_step(points, batch)
        widened = widening(step) if extrapolation_factor is None else extrapolation_factor
    half = math.hypot(seeds_hw, fit_hw) * widened
    lo, hi = center * math.exp(-half), center * math.exp(half)

    by_noise = None
    if noise_scale is not None:
        near = min(points, key=lambda p: abs(math.log(p.batch / batch)))
        ends = [_through(near.batch, near.median, batch, noise_scale * f) for f in NOISE_SCALE_RANGE]
        by_noise = (min(ends), max(ends))
        if len(points) == 1:
            b_crit = noise_scale * _geo(NOISE_SCALE_RANGE)
            lo, hi = min(lo, by_noise[0] * math.exp(-seeds_hw)), max(hi, by_noise[1] * math.exp(seeds_hw))
        else:
            lo, hi = min(lo, by_noise[0]), max(hi, by_noise[1])
    return Prediction(batch, center, (lo, hi), confidence, seeds_hw, fit_hw, by_noise, b_crit,
                      widened=widened)
