"""The low end of `solve`'s lr factor range, so that the space holds the surge (issue 52,
item 2). Pure: `solve` calls :func:`lr_low`; its reason is the line `solve`'s plan prints.

`solve`'s default range starts at the square-root rule, sqrt(k). Under the surge (Li et al.
2024, :mod:`.lr_models`) an Adam-style optimizer's best factor at k = B_M / B_ref > 1 is never
above sqrt(k) and falls towards 1/sqrt(k) as B_noise drops below the batch; under McCandlish's
SGD law it lies between 1 and k, near 1 while B_noise is small. Either way the best can lie
below sqrt(k), and a space starting there cannot find it. So the low end is

* with a measured noise scale: the model's factor at M with b_noise at the low end of
  ``NOISE_SCALE_RANGE`` × the measured value (McCandlish et al. find the critical batch within
  about an order of magnitude of B_simple; the same band `predict` uses), one grid step lower
  still, so that an answer there is not at the edge; never above the default's sqrt(k);
* without one: one grid step below 1× (the reference's own lr), since both models allow a best
  factor at or near 1 (the surge's even below it) and nothing measured says otherwise.

For k < 1 (a smaller batch) `solve`'s default already spans 2k..sqrt(k), below 1, and this
module only lowers it where the model puts the best lower still.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scalesweep.science.prediction.epochs import NOISE_SCALE_RANGE
from scalesweep.science.recommend.lr_models import LrModel, factor_between
from scalesweep.science.solve import GRID_STEP, LR_HIGH_OF_LINEAR


@dataclass(frozen=True)
class LrLow:
    """The low end of the lr factor range and the reason `solve`'s plan prints beside it."""

    low: float
    reason: str


def _default_low(k: float) -> float:
    """solve.default_space's own low end."""
    return min(math.sqrt(k), LR_HIGH_OF_LINEAR * k)


def lr_low(model: LrModel, batch: float, reference_batch: float,
           noise_scale: float | None) -> LrLow:
    """The low end for the lr factor at ``batch`` (module docs)."""
    for name, value in (("batch", batch), ("reference_batch", reference_batch)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be finite and positive, but got {value!r}")
    k = batch / reference_batch
    default = _default_low(k)
    measured = noise_scale is not None and math.isfinite(noise_scale) and noise_scale > 0
    if not measured:
        low = min(default, 1.0 / GRID_STEP)
        where = "at or below" if model == "surge" else "near"
        return LrLow(low, f"lr factor from {low:.3g}: no noise scale measured, and the best lr "
                          f"at a larger batch may lie {where} the reference's ({model} model)")
    assert noise_scale is not None
    lo_noise = noise_scale * NOISE_SCALE_RANGE[0]
    span = factor_between(model, batch, reference_batch,
                          (lo_noise, noise_scale * NOISE_SCALE_RANGE[1]))
    low = min(default, span[0] / GRID_STEP)
    where = ("one grid step below the lowest" if low < default
             else "the default's own low end lies below that already")
    return LrLow(low, f"lr factor from {low:.3g}: the {model} model puts the best at "
                      f"{span[0]:.3g}..{span[1]:.3g} for B_noise {lo_noise:.4g}.."
                      f"{noise_scale * NOISE_SCALE_RANGE[1]:.4g} (the measured noise scale "
                      f"{noise_scale:.4g} × {NOISE_SCALE_RANGE[0]:g}..{NOISE_SCALE_RANGE[1]:g}); {where}")
