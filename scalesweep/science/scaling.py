"""LR-scaling and warmup rules for a change of global batch. Pure: no torch, no Ray.

With k = B / B0 (global batch over the reference global batch where lr and warmup were tuned):

- lr rules: ``none`` keeps lr0, ``linear`` gives k * lr0 (Goyal et al. 2017), ``sqrt`` gives
  sqrt(k) * lr0 (Krizhevsky 2014; Malladi et al. 2022 for Adam), ``sqrt_adam`` is Malladi et
  al.'s full rule for Adam: sqrt(k) * lr0 together with beta_i -> 1 - k (1 - beta_i) and
  eps -> eps / sqrt(k) (:func:`adam_hyperparameters` maps the optimizer's betas and eps).
- an explicit factor (a number > 0, e.g. 2.5) gives factor * lr0: what `scalesweep solve` found
  at one world size, written as a rule so a study can verify it.
- warmup rules: ``fixed`` keeps every count of updates, ``scaled`` multiplies them by B0 / B so
  the schedule covers the same samples (the same epochs), ``proportional`` multiplies them by
  T / T0 (this trial's updates over the reference trial's) so the warmup stays the same fraction
  of the run, an int sets the warmup param outright.
- optimizer rules, beside the lr rule (:func:`optimizer_hyperparameters`): ``beta2_halflife``
  (Marek et al. 2025) gives beta2 ** k, ``weight_decay_linear`` (Bergsma et al. 2025) gives
  k * weight_decay.

WeNet's case: warmup_steps 25000 tuned on 4 GPUs becomes 25000 * 4/16 = 6250 on 16.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Literal

from scalesweep.errors import ScalesweepError
from scalesweep.science.optimizers import BETAS_TYPES
from scalesweep.science.schedules import Change, ScheduleError, ScheduleSpec, require_spec, resolve

__all__ = ["OPTIMIZER_RULES", "SCALING_RULES", "AutoTotalError", "ScalingRule", "WarmupRule",
           "adam_hyperparameters", "apply", "beta2_halflife", "is_explicit_factor", "lr_factor",
           "optimizer_hyperparameters", "rule_label", "step_factor", "weight_decay_linear"]

ScalingRule = Literal["none", "linear", "sqrt", "sqrt_adam"]
SCALING_RULES: tuple[str, ...] = ("none", "linear", "sqrt", "sqrt_adam")
#: torch.optim.Adam's defaults, which sqrt_adam scales when the optimizer does not set them
ADAM_DEFAULTS: dict[str, Any] = {"betas": (0.9, 0.999), "eps": 1e-8}
ADAM_TYPES = BETAS_TYPES
WarmupRule = Literal["fixed", "scaled", "proportional"] | int
WARMUP_RULES: tuple[str, ...] = ("fixed", "scaled", "proportional")
OptimizerRule = Literal["none", "beta2_halflife", "weight_decay_linear"]
OPTIMIZER_RULES: tuple[str, ...] = ("none", "beta2_halflife", "weight_decay_linear")
#: decoupled weight decay (torch.optim.AdamW: p -= lr * weight_decay * p), which the timescale
#: B / (lr * weight_decay * D) of weight_decay_linear describes
DECOUPLED_DECAY_TYPES = ("adamw",)


def _check_batches(global_batch: int, reference_global_batch: int) -> None:
    for name, value in (("global_batch", global_batch),
                        ("reference_global_batch", reference_global_batch)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an integer of at least 1, but got {name}={value!r}")


def _check_warmup_rule(rule: Any) -> None:
    explicit = isinstance(rule, int) and not isinstance(rule, bool) and rule >= 0
    if not (explicit or (isinstance(rule, str) and rule in WARMUP_RULES)):
        raise ValueError(f"warmup_rule must be 'fixed', 'scaled', 'proportional' or an update "
                         f"count >= 0, "
                         f"but got {rule=}")


def is_explicit_factor(rule: Any) -> bool:
    """A scaling rule given as a number: the lr factor itself."""
    return (isinstance(rule, int | float) and not isinstance(rule, bool)
            and math.isfinite(rule) and rule > 0)


def rule_label(rule: str | float) -> str:
    """A rule as trial and arm names show it: ``linear``, or ``x2.5`` for an explicit factor."""
    return f"x{rule:g}" if is_explicit_factor(rule) else str(rule)


def lr_factor(rule: str | float, global_batch: int, reference_global_batch: int) -> float:
    """What the reference lr is multiplied by at ``global_batch``."""
    _check_batches(global_batch, reference_global_batch)
    if is_explicit_factor(rule):
        return float(rule)
    if rule not in SCALING_RULES:
        raise ValueError(f"rule must be one of {', '.join(SCALING_RULES)} or a factor > 0, "
                         f"but got {rule=}")
    k = global_batch / reference_global_batch
    return {"none": 1.0, "linear": k, "sqrt": math.sqrt(k), "sqrt_adam": math.sqrt(k)}[rule]


def adam_hyperparameters(
    optimizer: Mapping[str, Any], global_batch: int, reference_global_batch: int
) -> tuple[dict[str, Any], list[str]]:
    """Malladi et al. (2022)'s square-root rule for Adam, beyond the lr: with k = B / B0,
    beta_i -> 1 - k (1 - beta_i) and eps -> eps / sqrt(k). The lr itself (sqrt(k) * lr0) is
    :func:`lr_factor`'s part, applied with the schedule's by :func:`apply`.

    ``optimizer`` is ``{"type": "adam" | "adamw", ...}``; betas and eps left out are torch's
    defaults (0.9, 0.999) and 1e-8. Returns (the optimizer with betas and eps set, notes with
    both numbers). Raises ValueError for a non-Adam optimizer, and where k is so large that a
    beta would reach 0 or below (k >= 1 / (1 - beta)): the SDE approximation behind the rule
    no longer holds there, and clamping would silently be another rule.
    """
    _check_batches(global_batch, reference_global_batch)
    kind = str(optimizer.get("type", "")).lower()
    if kind not in ADAM_TYPES:
        raise ValueError(f"sqrt_adam scales Adam's betas and eps, so optimizer.type must be one "
                         f"of {ADAM_TYPES}, but got {kind!r}")
    k = global_batch / reference_global_batch
    if k == 1:  # the reference itself: the same trial as every other rule's
        return dict(optimizer), []
    betas = tuple(float(b) for b in optimizer.get("betas", ADAM_DEFAULTS["betas"]))
    eps = float(optimizer.get("eps", ADAM_DEFAULTS["eps"]))
    new_betas = tuple(1.0 - k * (1.0 - b) for b in betas)
    # <= 0, rounding included: 1 - 10 * (1 - 0.9) is 2e-16 in floats, and means 0
    bad = [(i, b, nb) for i, (b, nb) in enumerate(zip(betas, new_betas, strict=True))
           if nb <= 0 or math.isclose(k * (1.0 - b), 1.0, rel_tol=1e-9)]
    if bad:
        i, b, nb = bad[0]
        raise ValueError(
            f"sqrt_adam: beta{i + 1} = 1 - k(1 - beta{i + 1}) = 1 - {k:g} * (1 - {b:g}) = {nb:.6g} "
            f"<= 0 at global_batch({global_batch}) / reference_global_batch"
            f"({reference_global_batch}) = k({k:g}); the rule holds only for k < "
            f"1 / (1 - beta{i + 1}) = {1.0 / (1.0 - b):g}: tune at a larger reference batch")
    new_eps = eps / math.sqrt(k)
    out = {**optimizer, "betas": [*new_betas], "eps": new_eps}
    why = f"sqrt_adam, k = {k:g}"
    notes = [f"optimizer.betas ({', '.join(_fmt(b) for b in betas)}) -> "
             f"({', '.join(_fmt(b) for b in new_betas)}) (1 - k(1 - beta); {why})",
             f"optimizer.eps {_fmt(eps)} -> {_fmt(new_eps)} (eps / sqrt(k); {why})"]
    return out, notes


def beta2_halflife(beta2: float, global_batch: int, reference_global_batch: int) -> float:
    """Adam's beta2 at ``global_batch`` with the half-life of its second-moment average held
    fixed in samples: Marek et al., "Small Batch Size Training for Language Models: When
    Vanilla SGD Works, and Why Gradient Accumulation Is Wasteful", NeurIPS 2025,
    arXiv:2507.07101 (hold beta2's half-life fixed in tokens rather than beta2 itself).

    Derivation (the paper's abstract states the rule; its equation was not read here): the
    average forgets half its weight after ln(1/2) / ln(beta2) updates, that is
    B * ln(1/2) / ln(beta2) samples at global batch B. Equal at B and B0 gives
    ln(beta2') = (B / B0) * ln(beta2), so beta2' = beta2 ** (B / B0). The paper counts tokens;
    samples are tokens where every sample has the same length.
    """
    _check_batches(global_batch, reference_global_batch)
    if isinstance(beta2, bool) or not isinstance(beta2, int | float) or not 0 <= beta2 < 1:
        raise ValueError(f"beta2 must be a number in [0, 1), but got {beta2=}")
    return float(beta2) ** (global_batch / reference_global_batch)


def weight_decay_linear(weight_decay: float, global_batch: int,
                        reference_global_batch: int) -> float:
    """AdamW's weight decay at ``global_batch``: weight_decay * B / B0. Bergsma et al., "Power
    Lines: Scaling Laws for Weight Decay and Batch Size in LLM Pre-training", 2025,
    arXiv:2505.13738: the AdamW timescale tau = B / (eta * lambda * D) should stay constant,
    "and we verify the implication that optimal lambda scales linearly with B, for a fixed N
    and D" (abstract). At a fixed lr eta and dataset D that is lambda' = lambda * B / B0; this
    rule is that, whatever the lr rule does to eta (with an lr rule that changes eta, tau moves
    by eta0 / eta': docs/schedules.md)."""
    _check_batches(global_batch, reference_global_batch)
    if isinstance(weight_decay, bool) or not isinstance(weight_decay, int | float) or not (
            math.isfinite(weight_decay) and weight_decay > 0):
        raise ValueError(f"weight_decay must be a finite number > 0, but got {weight_decay=}")
    return float(weight_decay) * global_batch / reference_global_batch


def optimizer_hyperparameters(
    rule: str, optimizer: Mapping[str, Any], global_batch: int, reference_global_batch: int
) -> tuple[dict[str, Any], list[str]]:
    """An optimizer rule applied to ``optimizer`` (``{"type": ..., ...}``): ``none`` leaves it,
    ``beta2_halflife`` sets beta2 (:func:`beta2_halflife`; beta1 and eps stay), and
    ``weight_decay_linear`` sets weight_decay (:func:`weight_decay_linear`). Returns (the
    optimizer, notes with both numbers). Raises ValueError naming the optimizer setting where
    the rule has nothing to scale: no betas (SGD), or no decoupled decay to scale (Adam's is an
    L2 term, and a weight decay of 0 stays 0 at any batch)."""
    _check_batches(global_batch, reference_global_batch)
    if rule not in OPTIMIZER_RULES:
        raise ValueError(f"optimizer_rule must be one of {', '.join(OPTIMIZER_RULES)}, "
                         f"but got {rule=}")
    why_not = _optimizer_rule_problem(rule, str(optimizer.get("type", "")).lower(),
                                      optimizer.get("weight_decay"))
    if why_not is not None:  # at the reference too: a sweep is refused whatever its sizes
        raise ValueError(why_not)
    k = global_batch / reference_global_batch
    if rule == "none" or k == 1:  # the reference itself: the same trial as every other rule's
        return dict(optimizer), []
    why = f"{rule}, k = {k:g}"
    if rule == "beta2_halflife":
        beta1, beta2 = (float(b) for b in optimizer.get("betas", ADAM_DEFAULTS["betas"]))
        new = beta2_halflife(beta2, global_batch, reference_global_batch)
        return ({**optimizer, "betas": [beta1, new]},
                [f"optimizer.betas ({_fmt(beta1)}, {_fmt(beta2)}) -> ({_fmt(beta1)}, {_fmt(new)}) "
                 f"(beta2 ** k: the same half-life in samples; {why})"])
    old_decay = float(optimizer["weight_decay"])  # checked above: a number > 0
    new_decay = weight_decay_linear(old_decay, global_batch, reference_global_batch)
    return ({**optimizer, "weight_decay": new_decay},
            [f"optimizer.weight_decay {_fmt(old_decay)} -> {_fmt(new_decay)} "
             f"(weight_decay * k; {why})"])


def _optimizer_rule_problem(rule: str, kind: str, decay: Any) -> str | None:
    if rule == "beta2_halflife" and kind not in ADAM_TYPES:
        return (f"beta2_halflife scales Adam's beta2, so optimizer.type must be one of "
                f"{ADAM_TYPES}, but got {kind!r}")
    if rule != "weight_decay_linear":
        return None
    if kind not in DECOUPLED_DECAY_TYPES:
        # torch's Adam and SGD add weight_decay * p to the gradient: no lr * weight_decay EMA
        return (f"weight_decay_linear keeps AdamW's timescale B / (lr * weight_decay * D), so "
                f"optimizer.type must be one of {DECOUPLED_DECAY_TYPES} (decoupled decay), but "
                f"got {kind!r}, whose weight_decay is an L2 term")
    if isinstance(decay, bool) or not isinstance(decay, int | float) or decay <= 0:
        return (f"weight_decay_linear scales optimizer.weight_decay, which must be given and "
                f"> 0 (0 stays 0 at any batch), but got weight_decay={decay!r}")
    return None


def step_factor(rule: WarmupRule, global_batch: int, reference_global_batch: int) -> float:
    """What counts of updates are multiplied by. An explicit warmup sets one value and leaves
    every other count alone, so its factor is 1. ``proportional``'s factor is the runs' lengths,
    T / T0, not the batches': refused here (``apply`` takes both lengths)."""
    _check_warmup_rule(rule)
    _check_batches(global_batch, reference_global_batch)
    if rule == "proportional":
        raise ValueError("warmup_rule='proportional' multiplies counts by T / T0, this run's "
                         "updates over the reference run's, which the batches alone do not give")
    return reference_global_batch / global_batch if rule == "scaled" else 1.0


def _scale_count(value: int, numerator: int, denominator: int) -> int:
    # exact arithmetic, half rounds up; a warmup never scales down to nothing
    x = Fraction(value) * Fraction(numerator, denominator)
    return max(1 if value >= 1 else 0, math.floor(x + Fraction(1, 2)))


def _count_ratio(warmup_rule: str, global_batch: int, reference_global_batch: int,
                 run_updates: int | None, reference_updates: int | None) -> tuple[int, int]:
    """What counts are multiplied by, as (numerator, denominator): B0 / B for ``scaled`` (the
    same samples), T / T0 for ``proportional`` (the same fraction of the run)."""
    if warmup_rule == "scaled":
        return reference_global_batch, global_batch
    for name, value in (("run_updates", run_updates), ("reference_updates", reference_updates)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"warmup_rule='proportional' keeps the warmup's share of the run, so "
                             f"{name} must be an update count >= 1, but got {name}={value!r}")
    assert run_updates is not None and reference_updates is not None
    return run_updates, reference_updates


def _fmt(x: Any) -> str:
    return "null" if x is None else f"{x:.6g}" if isinstance(x, float) else str(x)


class AutoTotalError(ScalesweepError, ValueError):
    """A schedule total given as ``auto`` that this run cannot fill in: ``field`` names it."""

    def __init__(self, field: str, rule: str) -> None:
        super().__init__(f"{field}: {rule}")
        self.field, self.rule = field, rule


def apply(
    scheduler: ScheduleSpec,
    optimizer_lr: float,
    *,
    lr_factor: float,
    warmup_rule: WarmupRule,
    global_batch: int,
    reference_global_batch: int,
    scaling_rule: str | None = None,
    run_updates: int | None = None,
    reference_updates: int | None = None,
) -> tuple[ScheduleSpec, float, list[str]]:
    """Rescale a schedule tuned at ``reference_global_batch`` for ``global_batch``.

    Returns (the trial's schedule, resolved against its optimizer lr; the optimizer lr;
    notes), one note per changed value with both numbers. ``scaling_rule`` only labels the
    notes ("linear x 4"). ``run_updates``: this run's own length in the schedule's counts,
    which a total given as ``auto`` becomes (after the warmup rule: it is this run's, not the
    reference's); under ``warmup_rule="proportional"`` also the numerator of T / T0, with
    ``reference_updates`` (the reference trial's updates) its denominator. Raises ValueError
    for invalid input, and when the result is invalid (an
    explicit warmup of 0 where DeepSpeed needs at least 1); ``AutoTotalError`` when an ``auto``
    total cannot be filled in or leaves the schedule invalid.
    """
    spec = require_spec(scheduler, "scaling.apply")
    factor = lr_factor
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not (
            math.isfinite(factor) and factor > 0):
        raise ValueError(f"lr_factor must be a finite number > 0, but got {lr_factor=}")
    if isinstance(optimizer_lr, bool) or not isinstance(optimizer_lr, int | float) or not (
            math.isfinite(optimizer_lr) and optimizer_lr >= 0):
        raise ValueError(f"optimizer_lr must be a finite number >= 0, but got {optimizer_lr=}")
    _check_warmup_rule(warmup_rule)
    _check_batches(global_batch, reference_global_batch)

    kind = spec.kind
    params = spec.params  # this call's working copy; the spec itself never changes
    notes: list[str] = []
    why = f"{scaling_rule} x {factor:g}" if scaling_rule else f"x {factor:g}"

    def take(changes: list[Change]) -> None:
        for c in changes:
            if c.value != params[c.key]:
                notes.append(f"scheduler.{c.key} {_fmt(params[c.key])} -> {_fmt(c.value)} "
                             f"({c.reason})")
                params[c.key] = c.value

    new_lr = float(optimizer_lr)
    if factor != 1:
        take([Change(key, params[key] * factor, why) for key in kind.lr_params
              if params[key] is not None])
        # a schedule that overwrites the optimizer lr (OneCycle, DeepSpeed's WarmupLR with an
        # explicit warmup_max_lr) keeps it: scaling it would change nothing but the log
        if kind.reads_optimizer_lr(params):
            new_lr = optimizer_lr * factor
            notes.append(f"optimizer.lr {_fmt(float(optimizer_lr))} -> {_fmt(new_lr)} ({why})")
    # params that follow the lr (gradual_warmup's start_lr): the family's hook
    take(kind.scale_lr(params, optimizer_lr, new_lr))

    auto = spec.auto_params()
    if auto and run_updates is None:
        raise AutoTotalError(auto[0], "auto needs the run's length, and none was given")
    if warmup_rule in ("scaled", "proportional"):
        num, den = _count_ratio(str(warmup_rule), global_batch, reference_global_batch,
                                run_updates, reference_updates)

        def scale(count: int) -> int:
            return _scale_count(count, num, den)

        how = f"{warmup_rule} x {num}/{den}"
        # which counts scale and how is the family's where each on its own does not fit (wsd
        # scales its decay through its start)
        take(kind.scale_counts(params, auto, scale, how) if kind.scale_counts is not None
             else [Change(key, scale(params[key]), how) for key in kind.step_params
                   if params[key] is not None and key not in auto])
    elif not isinstance(warmup_rule, str):
        if kind.warmup_param is None:
            raise ValueError(f"{kind.name} has no warmup to set, but got {warmup_rule=}")
        take([Change(kind.warmup_param, warmup_rule, "explicit")])

    take([Change(key, run_updates, "this trial's updates") for key in auto])
    try:
        out = resolve(spec.with_params(params), new_lr)
    except ScheduleError as exc:
        lines = "; ".join(f"{p.field} = {p.value!r}: {p.rule}" for p in exc.problems)
        if auto:
            raise AutoTotalError(auto[0], f"auto is this trial's {run_updates} updates, which "
                                 f"leaves the schedule invalid: {lines}") from None
        raise ValueError(f"warmup_rule={warmup_rule!r} makes the schedule invalid: {lines}"
                         ) from None
    return out, new_lr, notes
