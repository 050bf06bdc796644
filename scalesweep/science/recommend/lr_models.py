"""The best lr against the global batch B, two models, each with one unknown: where the noise
sits, ``b_noise`` (samples). Pure.

**SGD** (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training", §2.2): a
step along a gradient averaged over B samples lowers the loss most at

    ε_opt(B) = ε_max / (1 + B_noise / B)

which grows linearly in B well below B_noise and saturates at ε_max well above it.

**Adam-style** (Li et al. 2024, "Surge Phenomenon in Optimal Learning Rate and Batch Size
Scaling", arXiv 2405.14578): an update that follows the sign of the gradient (Adam, RMSprop,
Lion, ...) is best at

    ε_opt(B) = ε_max / ( ½ (sqrt(B_noise / B) + sqrt(B / B_noise)) )

which rises like sqrt(B) below B_noise, peaks at B = B_noise with ε_max, and falls like
1/sqrt(B) above it (the "surge"). What this module relied on: the paper's abstract (that the
optimal lr first rises and then falls with the batch, the peak moving to larger batches as
training goes on) and two secondary write-ups that state this formula and its three limits; the
full text with the theorem was not available to read here. Li et al.'s B_noise is the noise of
the gradient's sign, not McCandlish's tr(HΣ)/GᵀHG, so a measured B_simple places the peak only
roughly (docs/beyond.md says where that fails).

A study tunes the lr at the reference batch B_ref; taking that lr as the best there, the best
lr at B is the reference's times the **lr factor** ε_opt(B) / ε_opt(B_ref). Both models give
the same shape for it,

    factor(B) = a(B) (x + B_ref) / (x + B),   x = B_noise,
    a(B) = B / B_ref (SGD),   a(B) = sqrt(B / B_ref) (surge),

monotone in x, so one factor measured at one batch fixes x (:func:`noise_for_factor`), and x
fixes the factor at any other batch. Over all x, the SGD factor lies between 1 (none) and k
(linear), the surge's between 1/sqrt(k) and sqrt(k), k = B / B_ref: no Adam-style optimizer's
best lr grows faster than the square-root rule under the surge model.
"""

from __future__ import annotations

import math
from typing import Literal

LrModel = Literal["sgd", "surge"]
LR_MODELS: tuple[LrModel, ...] = ("sgd", "surge")
#: the optimizer types (science.optimizers) whose update follows the gradient's sign: the surge
SIGN_LIKE_TYPES = ("adam", "adamw")


def _check(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be finite and positive, but got {name}={value!r}")


def sgd_optimal_lr(batch: float, b_noise: float, lr_max: float = 1.0) -> float:
    """McCandlish et al. (2018), §2.2: ε_max / (1 + B_noise / B)."""
    _check("batch", batch)
    _check("b_noise", b_noise)
    return lr_max / (1.0 + b_noise / batch)


def surge_optimal_lr(batch: float, b_noise: float, lr_max: float = 1.0) -> float:
    """Li et al. (2024, arXiv 2405.14578): ε_max / (½ (sqrt(B_noise/B) + sqrt(B/B_noise))),
    its peak ε_max at B = B_noise."""
    _check("batch", batch)
    _check("b_noise", b_noise)
    return lr_max / (0.5 * (math.sqrt(b_noise / batch) + math.sqrt(batch / b_noise)))


def optimal_lr(model: LrModel, batch: float, b_noise: float, lr_max: float = 1.0) -> float:
    if model == "sgd":
        return sgd_optimal_lr(batch, b_noise, lr_max)
    if model == "surge":
        return surge_optimal_lr(batch, b_noise, lr_max)
    raise ValueError(f"model must be one of {LR_MODELS}, but got {model!r}")


def model_for(optimizer_type: str) -> LrModel:
    """The surge for Adam-style optimizers, McCandlish's law for SGD."""
    return "surge" if optimizer_type.lower() in SIGN_LIKE_TYPES else "sgd"


def lr_factor(model: LrModel, batch: float, reference_batch: float, b_noise: float) -> float:
    """ε_opt(batch) / ε_opt(reference_batch): what the reference's (best) lr is multiplied by."""
    return optimal_lr(model, batch, b_noise) / optimal_lr(model, reference_batch, b_noise)


def _slope(model: LrModel, batch: float, reference_batch: float) -> float:
    """a(B) of the module's closed form."""
    k = batch / reference_batch
    return k if model == "sgd" else math.sqrt(k)


def factor_range(model: LrModel, batch: float, reference_batch: float) -> tuple[float, float]:
    """The factors the model can give at ``batch`` over every b_noise (x → 0 and x → ∞), low
    first: [1, k] for SGD, [1/sqrt(k), sqrt(k)] for the surge (mirrored when k < 1)."""
    _check("batch", batch)
    _check("reference_batch", reference_batch)
    a = _slope(model, batch, reference_batch)
    ends = (a * reference_batch / batch, a)  # x → 0, x → ∞
    return min(ends), max(ends)


def noise_for_factor(model: LrModel, batch: float, reference_batch: float, factor: float) -> float:
    """The b_noise at which the model's factor at ``batch`` is ``factor`` (the closed form
    solved for x); 0 or +inf where ``factor`` lies at or beyond the model's range (the model
    cannot reach it: the nearest it comes is at that end). Raises where batch is the
    reference's (every b_noise gives factor 1 there)."""
    _check("factor", factor)
    if math.isclose(batch, reference_batch, rel_tol=1e-12):
        raise ValueError("at the reference batch every b_noise gives factor 1: nothing to solve")
    a = _slope(model, batch, reference_batch)
    lo_end = a * reference_batch / batch  # the factor as x → 0
    rising = a > lo_end  # batch > reference: the factor grows with x
    if (factor <= lo_end) if rising else (factor >= lo_end):
        return 0.0
    if (factor >= a) if rising else (factor <= a):
        return math.inf
    return (factor * batch - a * reference_batch) / (a - factor)


def factor_between(model: LrModel, batch: float, reference_batch: float,
                   b_noise_range: tuple[float, float]) -> tuple[float, float]:
    """The factors at ``batch`` for b_noise over a range (0 and inf allowed), low first."""
    ends = [_factor_at(model, batch, reference_batch, x) for x in b_noise_range]
    return min(ends), max(ends)


def _factor_at(model: LrModel, batch: float, reference_batch: float, x: float) -> float:
    """:func:`lr_factor` with x = 0 and x = inf allowed (the range's ends)."""
    a = _slope(model, batch, reference_batch)
    if x == 0.0:
        return a * reference_batch / batch
    if math.isinf(x):
        return a
    return lr_factor(model, batch, reference_batch, x)
