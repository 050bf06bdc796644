"""The recipe at world size M from a study at N alone: the lr factor, the warmup, and the
epochs ratio it is predicted to reach, each with the model it came from. Pure.

**lr factor** (:func:`lr_at`). The lr model (:mod:`.lr_models`: the surge for Adam-style
optimizers, McCandlish's law for SGD) has one unknown, b_noise. The study's arms at N locate
the best factor there (:func:`.lr_evidence.fit_bowl`); the model solved for b_noise through that
factor, and read at M, gives the factor at M. The interval is Fieller's at N carried through
the same map, which is monotone, so it keeps its coverage where the model holds; an end of it
beyond what the model can reach at N is carried as the model's end (b_noise 0 or ∞). Where the
arms locate no bottom, the measured noise scale places b_noise within ``NOISE_SCALE_RANGE`` of
it, and the interval is the model's factors over that band (a range, not a confidence
interval); with neither, the whole range the model allows at M.

**Which model.** The optimizer's family picks it (:func:`.lr_models.model_for`), unless the
arms' best factor at N lies outside that model's range and inside the other's (an Adam study
whose best at N is above sqrt(k), say): the arms then decide, and the reason says so.

**Epochs ratio against N** (:func:`epochs_ratio`): the epochs to target at M over N's, from
:func:`scalesweep.science.prediction.epochs.predict` (McCandlish's E(B) = E_min (1 + B/B_crit)
through the reference's and N's tuned epochs, and the noise scale), which assumes the recipe's
lr is the best at M. Its upper end is raised by what the lr interval leaves open: the bowl's
curvature ĉ times the square of the interval's wider half in log lr (a recipe that far from the
best trains exp(ĉ δ²) times longer, if M's bowl is as steep as N's).

:func:`recommend` puts the three together (with :func:`.warmup.warmup_at`) into a
:class:`Recipe`: what the `recommend` command will print and record.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scalesweep.science.prediction.epochs import (
    NOISE_SCALE_RANGE,
    BatchPoint,
    PredictionRefused,
    predict,
)
from scalesweep.science.recommend.lr_evidence import BowlFit, LrArm, NoLrEvidence, fit_bowl
from scalesweep.science.recommend.lr_models import (
    LR_MODELS,
    LrModel,
    factor_between,
    factor_range,
    noise_for_factor,
)
from scalesweep.science.recommend.warmup import Warmup, warmup_at


@dataclass(frozen=True)
class LrAtM:
    """The lr factor at M (× the reference's lr): a point, an interval and where they came from."""

    batch: float
    factor: float
    ci: tuple[float, float]
    #: the confidence of ``ci``; None where it is a range (the noise-scale band, or the model's
    #: whole range), not a confidence interval
    confidence: float | None
    model: LrModel
    #: b_noise the factor was read at (solved from the evidence, or the noise scale's band centre)
    b_noise: float | None
    source: str
    notes: tuple[str, ...] = ()
    bowl: BowlFit | None = None


def choose_model(family: LrModel, fit: BowlFit | None, batch: float,
                 reference_batch: float) -> tuple[LrModel, str]:
    """The optimizer family's model, unless the arms' best at N fits only the other one."""
    if fit is None or fit.factor is None:
        return family, f"{family}: the optimizer's family"
    other: LrModel = next(m for m in LR_MODELS if m != family)
    inside = {m: _inside(fit.factor, factor_range(m, batch, reference_batch)) for m in LR_MODELS}
    if not inside[family] and inside[other]:
        lo, hi = factor_range(family, batch, reference_batch)
        return other, (f"{other}: the arms' best factor at N, {fit.factor:.3g}, lies outside what "
                       f"the {family} model (the optimizer's family) can give there "
                       f"({lo:.3g}..{hi:.3g})")
    return family, f"{family}: the optimizer's family"


def _inside(x: float, span: tuple[float, float]) -> bool:
    return span[0] < x < span[1]


def _carry(model: LrModel, factor_n: float, batch_n: float, batch_m: float,
           reference_batch: float) -> tuple[float, float]:
    """(b_noise, factor at M) for the model through ``factor_n`` at N (0 and inf allowed:
    the evidence's interval ends)."""
    if factor_n <= 0.0 or math.isinf(factor_n):
        lo, hi = factor_range(model, batch_n, reference_batch)
        factor_n = lo if factor_n <= 0.0 else hi  # past an end: the model's end (x = 0 or ∞)
        x = noise_for_factor(model, batch_n, reference_batch, factor_n)
    else:
        x = noise_for_factor(model, batch_n, reference_batch, factor_n)
    return x, factor_between(model, batch_m, reference_batch, (x, x))[0]


def lr_at(family: LrModel, batch_m: float, reference_batch: float, *,
          batch_n: float | None = None, arms: Sequence[LrArm] = (),
          noise_scale: float | None = None, confidence: float = 0.90) -> LrAtM:
    """The lr factor at ``batch_m`` (module docs); ``arms``: the lr factors the study ran at
    ``batch_n`` with their paired ratios."""
    notes: list[str] = []
    fit: BowlFit | None = None
    if arms and batch_n is not None:
        try:
            fit = fit_bowl(arms, confidence)
            notes += fit.notes
        except NoLrEvidence as e:
            notes.append(f"lr evidence at N: {e}")
    model, why = choose_model(family, fit, batch_n or reference_batch, reference_batch)
    if fit is not None and fit.factor is not None and batch_n is not None:
        x, f_m = _carry(model, fit.factor, batch_n, batch_m, reference_batch)
        ends = sorted(_carry(model, e, batch_n, batch_m, reference_batch)[1] for e in fit.ci)
        lo_n, hi_n = factor_range(model, batch_n, reference_batch)
        if not _inside(fit.factor, (lo_n, hi_n)):
            notes.append(f"the arms' best at N ({fit.factor:.3g}) lies outside the {model} model's "
                         f"range there ({lo_n:.3g}..{hi_n:.3g}): carried as the model's end")
        if noise_scale is not None and math.isfinite(noise_scale) and noise_scale > 0:
            band = factor_between(model, batch_m, reference_batch,
                                  (noise_scale * NOISE_SCALE_RANGE[0], noise_scale * NOISE_SCALE_RANGE[1]))
            if band[1] < ends[0] or band[0] > ends[1]:
                notes.append(f"the measured noise scale ({noise_scale:.4g}) puts the factor at "
                             f"{band[0]:.3g}..{band[1]:.3g}, outside the evidence's interval: "
                             "the model, or the noise scale as its b_noise, is off here")
        return LrAtM(batch_m, f_m, (ends[0], ends[1]), confidence, model, x,
                     f"{why}; b_noise {x:.4g} solved from the arms' best factor at N "
                     f"({fit.factor:.3g}, Fieller {confidence:.0%})", tuple(notes), fit)
    if noise_scale is not None and math.isfinite(noise_scale) and noise_scale > 0:
        band_x = (noise_scale * NOISE_SCALE_RANGE[0], noise_scale * NOISE_SCALE_RANGE[1])
        x = math.sqrt(band_x[0] * band_x[1])
        f_m = factor_between(model, batch_m, reference_batch, (x, x))[0]
        return LrAtM(batch_m, f_m, factor_between(model, batch_m, reference_batch, band_x), None,
                     model, x, f"{why}; b_noise the measured noise scale × "
                     f"{NOISE_SCALE_RANGE[0]:g}..{NOISE_SCALE_RANGE[1]:g} (a range, not an interval)",
                     tuple(notes), fit)
    span = factor_range(model, batch_m, reference_batch)
    notes.append("no lr evidence locates the best and no noise scale was measured: the factor "
                 "is only known to lie in the model's range")
    return LrAtM(batch_m, math.sqrt(span[0] * span[1]), span, None, model, None,
                 f"{why}; the model's whole range at M, its centre as the point", tuple(notes), fit)


@dataclass(frozen=True)
class EpochsRatio:
    """Epochs to target at M with the recipe over N's: median and interval."""

    median: float
    ci: tuple[float, float]
    confidence: float
    #: the factor the upper end was raised by for the lr's own uncertainty (1: none)
    lr_penalty: float
    source: str
    notes: tuple[str, ...] = field(default_factory=tuple)


def epochs_ratio(reference: BatchPoint, at_n: BatchPoint, batch_m: float, lr: LrAtM, *,
                 noise_scale: float | None = None, confidence: float = 0.90) -> EpochsRatio:
    """The predicted epochs ratio M over N (module docs); ``reference`` and ``at_n``: the
    tuned epochs at the reference batch (the baseline's seeds) and at N (the best arm's).
    Raises :class:`PredictionRefused` where the epochs cannot be predicted."""
    pred = predict([reference, at_n], batch_m, noise_scale=noise_scale, confidence=confidence)
    base = at_n.median
    notes: list[str] = []
    penalty = 1.0
    bowl = lr.bowl
    if bowl is not None and bowl.curvature > 0 and lr.confidence is not None:
        wide = max(abs(math.log(e / lr.factor)) if 0 < e < math.inf else math.inf for e in lr.ci)
        penalty = math.exp(bowl.curvature * wide * wide) if math.isfinite(wide) else math.inf
    else:
        notes.append("the lr's own uncertainty is not carried into the epochs (no fitted bowl): "
                     "the interval assumes the recipe's lr is the best at M")
    hi = pred.ci[1] / base * penalty
    return EpochsRatio(pred.median / base, (pred.ci[0] / base, hi), confidence, penalty,
                       f"E(B) = E_min (1 + B/B_crit) (McCandlish et al. 2018) through the reference "
                       f"and N ({pred.method})", tuple(notes))


@dataclass(frozen=True)
class Recipe:
    """The recipe at M: lr factor, warmup and the epochs ratio M over N (None, with the reason
    in ``notes``, where the epochs cannot be predicted), each naming its source."""

    batch: float
    lr: LrAtM
    warmup: Warmup
    epochs_ratio: EpochsRatio | None
    notes: tuple[str, ...] = ()


def recommend(family: LrModel, *, reference_batch: float, batch_n: float, batch_m: float,
              reference_warmup: float, arms: Sequence[LrArm] = (),
              warmup_arms: Mapping[str, Mapping[int, float]] | None = None,
              reference_epochs: BatchPoint | None = None, n_epochs: BatchPoint | None = None,
              noise_scale: float | None = None, confidence: float = 0.90) -> Recipe:
    """:func:`lr_at`, :func:`.warmup.warmup_at` and :func:`epochs_ratio` together: what the
    `recommend` command prints and records."""
    lr = lr_at(family, batch_m, reference_batch, batch_n=batch_n, arms=arms,
               noise_scale=noise_scale, confidence=confidence)
    warmup = warmup_at(reference_warmup, reference_batch, batch_m, warmup_arms)
    notes: list[str] = []
    ratio = None
    if reference_epochs is None or n_epochs is None:
        notes.append("no tuned epochs at the reference and N: no epochs ratio")
    else:
        try:
            ratio = epochs_ratio(reference_epochs, n_epochs, batch_m, lr, noise_scale=noise_scale,
                                 confidence=confidence)
        except PredictionRefused as e:
            notes += [f"epochs ratio refused: {r}" for r in e.reasons]
    return Recipe(batch_m, lr, warmup, ratio, tuple(notes))


__all__ = ["EpochsRatio", "LrAtM", "PredictionRefused", "Recipe", "choose_model", "epochs_ratio",
           "lr_at", "recommend"]
