"""Learning-rate schedules as pure functions of the optimizer update. No torch, no Ray.

Contract: ``lr(k)`` (k >= 1) is the lr that the ORIGINAL scheduler object holds after its
construction and k-1 calls of ``step()``, so update k runs with ``lr(k)``:

- WeNet ``WarmupLR`` (``wenet/utils/scheduler.py``) is a torch ``_LRScheduler``: construction
  already calls ``step()`` once, so update k has ``step_num = k``.
- DeepSpeed (``deepspeed/runtime/lr_schedules.py``, read at v0.19.8) starts
  ``last_batch_iteration`` at -1 and adds one per ``step()``, so update k has
  ``last_batch_iteration = k - 2``; update 1 holds whatever the constructor set.
- ``gradual_warmup`` and ``wsd`` have no original class; their reference is a torch
  ``LambdaLR``, whose construction evaluates the lambda at step 0, so update k runs at
  step ``t = k - 1`` (Goyal et al.'s iteration count; Hugging Face's ``get_wsd_schedule``).

The arithmetic below follows the originals' operation order, so values agree to the last bit or
two, not just approximately. Where the originals do something surprising it is kept (the loop must
match DeepSpeed and WeNet runs) and said in a comment marked "quirk".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

__all__ = [
    "ALIASES",
    "SCHEDULE_TYPES",
    "Param",
    "Problem",
    "Schedule",
    "ScheduleType",
    "build",
    "canonical_name",
    "fill_auto",
    "peak_lr",
    "table",
    "validate",
    "warmup_steps",
]


class Schedule(Protocol):
    def lr(self, update: float) -> float: ...

    def momentum(self, update: float) -> float | None: ...


@dataclass(frozen=True)
class Problem:
    """One validation problem; the spec layer prefixes ``field`` with its own path."""

    field: str
    value: Any
    rule: str


Kind = Literal["int", "float", "bool", "str"]


@dataclass(frozen=True)
class Param:
    kind: Kind
    default: Any = None
    required: bool = False
    nullable: bool = False  # None is a meaningful value, not "left out"
    ge: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[str, ...] = ()
    #: "auto" is a value: the run's own number of updates, filled in before the schedule is
    #: built (``fill_auto``; the planner, per trial), as Hugging Face fills DeepSpeed's
    #: ``total_num_steps: auto`` with the trainer's number of optimizer steps
    auto: bool = False


AUTO = "auto"


@dataclass(frozen=True)
class ScheduleType:
    name: str
    warmup_param: str | None  # what a warmup rule rewrites
    step_params: tuple[str, ...]  # counted in optimizer updates; "scaled" rescales all of them
    lr_params: tuple[str, ...]  # absolute lrs; an lr scaling rule multiplies them
    uses_optimizer_lr: bool  # lr is relative to the optimizer's lr
    drives_momentum: bool
    params: dict[str, Param] = field(default_factory=dict)
    # lr params whose None means "the optimizer's lr" (DeepSpeed's warmup_max_lr)
    optimizer_lr_fallbacks: tuple[str, ...] = ()
    #: the original's own count at update k is k - 1 + counts_from: WeNet's step_num is k (1),
    #: DeepSpeed's warmups read last_batch_iteration k - 2 (-1), LambdaLR-style ones k - 1 (0).
    #: A batch-size ramp's clock (science.batch_ramp) keeps that count proportional to the
    #: samples, which makes a stage's lr the one a trial at its batch would have
    counts_from: int = 0

    def defaults(self) -> dict[str, Any]:
        return {name: p.default for name, p in self.params.items() if not p.required}

    def auto_params(self, params: Mapping[str, Any]) -> list[str]:
        """The params given as ``auto`` in ``params``."""
        return [k for k, p in self.params.items() if p.auto and params.get(k) == AUTO]

    def reads_optimizer_lr(self, params: Mapping[str, Any]) -> bool:
        """Whether a schedule with these params takes any lr from the optimizer."""
        merged = {**self.defaults(), **params}
        return self.uses_optimizer_lr or any(merged.get(p) is None
                                             for p in self.optimizer_lr_fallbacks)


_LR = Param("float", ge=0)
_WARMUP_TYPE = Param("str", default="log", choices=("log", "linear"))
_DS_WARMUP_STEPS = Param("int", default=1000, ge=1)  # DeepSpeed raises for < 1 since v0.19.3
_RATIO = Param("float", ge=0, le=1)
_WSD_DECAY_TYPES = ("linear", "cosine", "1-sqrt")

SCHEDULE_TYPES: dict[str, ScheduleType] = {
    t.name: t
    for t in (
        ScheduleType(
            "warmuplr", "warmup_steps", ("warmup_steps",), (), True, False,
            {"warmup_steps": Param("int", default=25000, ge=0)}, counts_from=1,
        ),
        ScheduleType(
            "onecycle", "cycle_first_step_size",
            ("cycle_first_step_size", "cycle_second_step_size", "decay_step_size"),
            ("cycle_min_lr", "cycle_max_lr"), False, True,
            {
                "cycle_min_lr": Param("float", required=True, ge=0),
                "cycle_max_lr": Param("float", required=True, ge=0),
                "decay_lr_rate": Param("float", default=0.0, ge=0),
                "cycle_first_step_size": Param("int", default=2000, ge=1),
                # None: same as the first half
                "cycle_second_step_size": Param("int", default=None, nullable=True, ge=0),
                # <= 0: continuous; > 0: that many flat stairs per half (DeepSpeed >= 0.19.4)
                "cycle_first_stair_count": Param("int", default=0),
                "cycle_second_stair_count": Param("int", default=None, nullable=True),
                "decay_step_size": Param("int", default=0, ge=0),  # 0: no decay at all
                "cycle_momentum": Param("bool", default=True),
                "cycle_min_mom": Param("float", default=0.8, ge=0, lt=1),
                "cycle_max_mom": Param("float", default=0.9, ge=0, lt=1),
                "decay_mom_rate": Param("float", default=0.0, ge=0),
            },
        ),
        ScheduleType(
            "ds_warmuplr", "warmup_num_steps", ("warmup_num_steps",),
            ("warmup_min_lr", "warmup_max_lr"), False, False,
            {
                "warmup_min_lr": Param("float", default=0.0, ge=0),
                "warmup_max_lr": Param("float", default=None, nullable=True, ge=0),
                "warmup_num_steps": _DS_WARMUP_STEPS,
                "warmup_type": _WARMUP_TYPE,
            },
            optimizer_lr_fallbacks=("warmup_max_lr",), counts_from=-1,
        ),
        ScheduleType(
            "ds_warmup_decay", "warmup_num_steps", ("warmup_num_steps", "total_num_steps"),
            ("warmup_min_lr", "warmup_max_lr"), False, False,
            {
                "total_num_steps": Param("int", required=True, ge=1, auto=True),
                "warmup_min_lr": Param("float", default=0.0, ge=0),
                # quirk: WarmupDecayLR defaults to 0.001, not to the optimizer lr as WarmupLR
                # does; only an explicit null falls through to the optimizer lr
                "warmup_max_lr": Param("float", default=0.001, nullable=True, ge=0),
                "warmup_num_steps": _DS_WARMUP_STEPS,
                "warmup_type": _WARMUP_TYPE,
            },
            optimizer_lr_fallbacks=("warmup_max_lr",), counts_from=-1,
        ),
        ScheduleType(
            "ds_warmup_cosine", "warmup_num_steps", ("warmup_num_steps", "total_num_steps"),
            (), True, False,
            {
                "total_num_steps": Param("int", required=True, ge=1, auto=True),
                "warmup_min_ratio": Param("float", default=0.0, ge=0, le=1),
                "warmup_num_steps": _DS_WARMUP_STEPS,
                "cos_min_ratio": Param("float", default=0.0001, ge=0, le=1),
                "warmup_type": _WARMUP_TYPE,
            }, counts_from=-1,
        ),
        ScheduleType(
            "gradual_warmup", "warmup_steps", ("warmup_steps",), ("start_lr",), True, False,
            {
                "warmup_steps": Param("int", required=True, ge=0),
                # None: the reference lr, filled in by scaling.apply (Goyal et al. 2017)
                "start_lr": Param("float", default=None, nullable=True, ge=0),
            },
        ),
        ScheduleType(
            # every count is in updates, so a "scaled" warmup rule rescales all three, as it
            # does ds_warmup_cosine's total_num_steps: at k x the global batch the run has 1/k
            # of the updates, and the decay must still end where the run does (in samples).
            # scaling.apply rescales decay_steps through the decay's start, not on its own, so
            # that rounding never pushes the warmup into the decay.
            "wsd", "warmup_steps", ("warmup_steps", "decay_steps", "total_steps"), (), True, False,
            {
                "warmup_steps": Param("int", required=True, ge=0),
                "decay_steps": Param("int", required=True, ge=1),
                "total_steps": Param("int", required=True, ge=1, auto=True),
                # same name and meaning as ds_warmup_cosine's: the warmup's first lr / base
                "warmup_min_ratio": Param("float", default=0.0, ge=0, le=1),
                "min_lr_ratio": Param("float", default=0.0, ge=0, le=1),
                # 1-sqrt: Hägele et al. 2024 find it beats linear for the same decay length
                "decay_type": Param("str", default="1-sqrt", choices=_WSD_DECAY_TYPES),
            },
        ),
        ScheduleType("constant", None, (), (), True, False, {}),
    )
}

# Case matters: WeNet's "warmuplr" and DeepSpeed's "WarmupLR" are different schedules.
ALIASES: dict[str, str] = {
    "WarmupLR": "ds_warmuplr",
    "OneCycle": "onecycle",
    "WarmupDecayLR": "ds_warmup_decay",
    "WarmupCosineLR": "ds_warmup_cosine",
}


def canonical_name(name: str) -> str:
    if isinstance(name, str):
        if name in SCHEDULE_TYPES:
            return name
        if name in ALIASES:
            return ALIASES[name]
    known = ", ".join([*SCHEDULE_TYPES, *ALIASES])
    raise ValueError(f"unknown schedule type {name!r}; known (case-sensitive): {known}")


# --- validation -----------------------------------------------------------------------------


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _check_param(name: str, p: Param, v: Any) -> Problem | None:
    if v is None:
        return None if p.nullable else Problem(name, v, "must not be null")
    if p.auto and v == AUTO:
        return None
    if p.kind == "bool":
        return None if isinstance(v, bool) else Problem(name, v, "must be true or false")
    if p.kind == "str":
        if not isinstance(v, str) or (p.choices and v not in p.choices):
            # quirk: DeepSpeed warns and silently uses "log" for an unknown warmup_type;
            # a sweep should fail loudly instead
            return Problem(name, v, f"must be one of {', '.join(map(repr, p.choices))}")
        return None
    if p.kind == "int" and (not isinstance(v, int) or isinstance(v, bool)):
        return Problem(name, v, ("must be an integer (a count of optimizer updates)"
                                 if name in _ALL_STEP_PARAMS else "must be an integer")
                       + (" or auto (the run's own number of updates)" if p.auto else ""))
    if isinstance(v, bool):
        return Problem(name, v, "must be a number, not true/false")
    if not _is_number(v):
        return Problem(name, v, "must be a finite number")
    if p.ge is not None and not v >= p.ge:
        return Problem(name, v, f"must be >= {p.ge:g}")
    if p.le is not None and not v <= p.le:
        return Problem(name, v, f"must be <= {p.le:g}")
    if p.lt is not None and not v < p.lt:
        return Problem(name, v, f"must be < {p.lt:g}")
    return None


_ALL_STEP_PARAMS = {p for t in SCHEDULE_TYPES.values() for p in t.step_params}


def _cross_checks(name: str, v: dict[str, Any], base_lr: float | None) -> list[Problem]:
    """Rules between params; only called when every param is valid on its own."""
    out = []

    def at_most(lo: str, hi: str, hi_value: Any) -> None:
        if hi_value is not None and v[lo] > hi_value:
            out.append(Problem(lo, v[lo], f"must be <= {hi} ({hi_value:g})"))

    if name == "onecycle":
        at_most("cycle_min_lr", "cycle_max_lr", v["cycle_max_lr"])
        if v["cycle_momentum"]:
            at_most("cycle_min_mom", "cycle_max_mom", v["cycle_max_mom"])
    elif name in ("ds_warmuplr", "ds_warmup_decay"):
        if v["warmup_max_lr"] is None:
            at_most("warmup_min_lr", "the optimizer lr", base_lr)
        else:
            at_most("warmup_min_lr", "warmup_max_lr", v["warmup_max_lr"])
    elif name == "wsd" and v["total_steps"] != AUTO:  # auto: checked once filled in
        # the phases must not overlap: warmup_steps + decay_steps <= total_steps
        if v["decay_steps"] > v["total_steps"]:
            at_most("decay_steps", "total_steps", v["total_steps"])
        else:
            at_most("warmup_steps", "total_steps - decay_steps",
                    v["total_steps"] - v["decay_steps"])
    return out


def _problems(spec: Mapping[str, Any], base_lr: float | None = None) -> list[Problem]:
    if not isinstance(spec, Mapping):
        return [Problem("type", spec, "a schedule must be a mapping with a type")]
    raw = spec.get("type")
    if raw is None:
        return [Problem("type", None, f"is required; one of {', '.join(SCHEDULE_TYPES)}")]
    try:
        kind = SCHEDULE_TYPES[canonical_name(raw)]
    except ValueError:
        known = ", ".join([*SCHEDULE_TYPES, *ALIASES])
        return [Problem("type", raw, f"unknown schedule type; known (case-sensitive): {known}")]
    out = []
    for key, value in spec.items():
        if key != "type" and key not in kind.params:
            known = ", ".join(kind.params) or "none"
            rule = f"unknown parameter of {kind.name}; known: {known}"
            out.append(Problem(str(key), value, rule))
    merged = {**kind.defaults(), **{k: v for k, v in spec.items() if k in kind.params}}
    for key, p in kind.params.items():
        if p.required and spec.get(key) is None:
            out.append(Problem(key, spec.get(key), f"is required by {kind.name}"))
        elif (problem := _check_param(key, p, merged[key])) is not None:
            out.append(problem)
    if not out:
        out.extend(_cross_checks(kind.name, merged, base_lr))
    return out


def validate(spec: Mapping[str, Any]) -> list[Problem]:
    """Every problem in ``{"type": name, **params}``, not just the first."""
    return _problems(spec)


def fill_auto(spec: Mapping[str, Any], updates: int) -> dict[str, Any]:
    """``spec`` with every ``auto`` param (a schedule's total) set to ``updates``, the run's
    own length in the schedule's counts."""
    kind = SCHEDULE_TYPES[canonical_name(spec["type"])]
    return {**spec, **dict.fromkeys(kind.auto_params(spec), updates)}


def _resolve(spec: Mapping[str, Any], base_lr: float | None = None) -> tuple[str, dict[str, Any]]:
    problems = _problems(spec, base_lr)
    if problems:
        lines = "; ".join(f"{p.field} = {p.value!r}: {p.rule}" for p in problems)
        raise ValueError(f"invalid schedule: {lines}")
    kind = SCHEDULE_TYPES[canonical_name(spec["type"])]
    if auto := kind.auto_params(spec):
        raise ValueError(f"{', '.join(auto)} = 'auto' is the run's length, which the schedule "
                         "alone does not know: fill it in first (schedules.fill_auto)")
    return kind.name, {**kind.defaults(), **{k: v for k, v in spec.items() if k != "type"}}


# --- the schedules ----------------------------------------------------------------------------


def _check_update(update: float) -> float:
    # Updates count from 1. A float is a batch-size ramp's schedule clock counting samples
    # (scalesweep.science.batch_ramp): 1.25 is a quarter of an update past the first; for
    # a schedule counted from 1 (WeNet's) a stage's first updates sit below 1 (0.25: a quarter)
    if isinstance(update, bool) or not isinstance(update, int | float) or not (
            math.isfinite(update) and update > 0) or (isinstance(update, int) and update < 1):
        raise ValueError(f"update must be an integer of at least 1 (or a ramp's position > 0), "
                         f"but got {update=}")
    return update


class _NoMomentum:
    def momentum(self, update: float) -> float | None:
        _check_update(update)
        return None


@dataclass(frozen=True)
class WeNetWarmupLR(_NoMomentum):
    base: float
    warmup: int

    def lr(self, update: float) -> float:
        s = _check_update(update)
        if self.warmup == 0:
            return self.base * s**-0.5
        # = base * w^0.5 * min(s^-0.5, s * w^-1.5), written so that s = w gives base exactly
        return self.base * min(s / self.warmup, math.sqrt(self.warmup / s))

    def boundaries(self) -> tuple[int, ...]:
        return (self.warmup,)


def _ds_warmup_gamma(i: float, steps: int, warmup_type: str) -> float:
    """DeepSpeed's warmup fraction at last_batch_iteration i (0 <= i < steps)."""
    if warmup_type == "log":
        return 1.0 / math.log(steps) * math.log(i + 1)
    return i / steps


@dataclass(frozen=True)
class DeepSpeedWarmupLR(_NoMomentum):
    """WarmupLR, and WarmupDecayLR when ``total`` is given."""

    min_lr: float
    max_lr: float
    num_steps: int  # already max(2, warmup_num_steps): log(1) would divide by zero
    warmup_type: str
    total: int | None = None

    def lr(self, update: float) -> float:
        i = _check_update(update) - 2
        if i < 0:
            return self.min_lr  # the constructor sets min_lr (get_lr before any step)
        # quirk: i = 0 gives gamma 0 too, so updates 1 and 2 both run at min_lr; log warmup
        # reaches max at i = W-1 (update W+1), linear only at i = W (update W+2)
        if i < self.num_steps:
            gamma = _ds_warmup_gamma(i, self.num_steps, self.warmup_type)
        elif self.total is None:
            gamma = 1.0
        else:
            gamma = max(0.0, float(self.total - i) / float(max(1.0, self.total - self.num_steps)))
        return self.min_lr + (self.max_lr - self.min_lr) * gamma

    def boundaries(self) -> tuple[int, ...]:
        return (self.num_steps + 1, self.num_steps + 2) + (
            () if self.total is None else (self.total + 2,))


@dataclass(frozen=True)
class DeepSpeedWarmupCosineLR(_NoMomentum):
    base: float
    total: int
    warmup_min_ratio: float
    num_steps: int  # max(2, warmup_num_steps)
    cos_min_ratio: float
    warmup_type: str

    def lr(self, update: float) -> float:
        i = _check_update(update) - 2
        if i < 0:
            # quirk: the constructor sets lr = 0.0, whatever warmup_min_ratio says
            return 0.0
        if i < self.num_steps:
            ratio = _ds_warmup_gamma(i, self.num_steps, self.warmup_type)
            ratio = self.warmup_min_ratio + ratio * (1.0 - self.warmup_min_ratio)
        else:
            # progress is clamped (DeepSpeed >= 0.19.3), so after total_num_steps the ratio
            # stays at cos_min_ratio instead of rising again
            progress = min(1.0, (i - self.num_steps + 1) / max(1, self.total - self.num_steps))
            ratio = (1 + math.cos(math.pi * progress)) / 2
            ratio = max(0.0, self.cos_min_ratio + (1.0 - self.cos_min_ratio) * ratio)
        return self.base * ratio

    def boundaries(self) -> tuple[int, ...]:
        return (self.num_steps + 1, self.num_steps + 2, self.total + 2)


@dataclass(frozen=True)
class DeepSpeedOneCycle:
    min_lr: float
    max_lr: float
    decay_lr_rate: float
    first: int
    second: int
    first_stairs: int
    second_stairs: int
    decay_step_size: int
    cycle_momentum: bool
    min_mom: float
    max_mom: float
    decay_mom_rate: float

    def _scale(self, batch: float) -> float:
        """Fraction of the way from min to max lr at batch_iteration = last_batch_iteration+1."""
        total = float(self.first) + float(self.second)
        step_ratio = self.first / total
        cycle = math.floor(1 + batch / total)
        x = 1.0 + batch / total - cycle
        if x <= step_ratio:
            scale, stairs = x / step_ratio, self.first_stairs
        else:
            scale, stairs = (x - 1) / (step_ratio - 1), self.second_stairs
        if stairs > 0:
            # DeepSpeed >= 0.19.4 holds lr flat on each stair (earlier versions ignored the
            # counts); the stair comes from the integer offset, so the peak is exact
            at = batch % total
            if at <= self.first:
                position = at * stairs / self.first
            else:
                position = (total - at) * stairs / self.second
            scale = math.floor(position) / stairs
        return scale

    def _decay_interval(self, update: float) -> float:
        # decay counts from 1 at the first update after the cycle: continuous, no stairs
        return (update - 2 - (self.first + self.second) + 1) / self.decay_step_size

    def _in_cycle(self, update: float) -> bool:
        return update - 2 < self.first + self.second

    def lr(self, update: float) -> float:
        k = _check_update(update)
        if k == 1:
            return self.min_lr  # set by the constructor
        if self._in_cycle(k):
            return self.min_lr + (self.max_lr - self.min_lr) * self._scale(k - 1)
        if self.decay_step_size == 0 or self.decay_lr_rate == 0:
            return self.min_lr
        return self.min_lr / (1 + self.decay_lr_rate * self._decay_interval(k))

    def momentum(self, update: float) -> float | None:
        """beta1. DeepSpeed cycles it only for optimizers with ``betas`` (Adam family; SGD's
        ``momentum`` is never touched) and always pairs it with beta2 = 0.99."""
        k = _check_update(update)
        if not self.cycle_momentum:
            return None
        if k == 1:
            # quirk: the constructor sets cycle_min_mom, but the cycle itself starts at
            # cycle_max_mom (momentum moves opposite to lr), so update 2 jumps up
            return self.min_mom
        if self._in_cycle(k):
            return self.max_mom - (self.max_mom - self.min_mom) * self._scale(k - 1)
        if self.decay_step_size == 0 or self.decay_mom_rate == 0:
            return self.max_mom
        # quirk: momentum "decay" multiplies, so beta1 grows past cycle_max_mom (even past 1)
        return self.max_mom * (1 + self.decay_mom_rate * self._decay_interval(k))

    def boundaries(self) -> tuple[int, ...]:
        return (self.first + 1, self.first + self.second + 1)


@dataclass(frozen=True)
class GradualWarmup(_NoMomentum):
    base: float
    start: float
    steps: int

    def lr(self, update: float) -> float:
        t = _check_update(update) - 1
        if t >= self.steps:
            return self.base
        return self.start + (self.base - self.start) * t / self.steps

    def boundaries(self) -> tuple[int, ...]:
        return (self.steps + 1,)


@dataclass(frozen=True)
class WarmupStableDecay(_NoMomentum):
    """Warmup-stable-decay (MiniCPM, Hu et al. 2024); the 1-sqrt decay from Hägele et al. 2024.

    There is no original scheduler class to match; the reference is a torch ``LambdaLR`` (as
    Hugging Face's ``get_wsd_schedule`` with a linear warmup), whose construction evaluates the
    lambda at step 0. So update k runs at t = k - 1 completed updates, as ``GradualWarmup``
    does. With W = warmup_steps, D = decay_steps, T = total_steps, S = T - D (W <= S),
    r0 = warmup_min_ratio, m = min_lr_ratio:

    - t < W (updates 1..W): ``base * (r0 + (1 - r0) * t / W)``; update 1 runs at r0 * base,
      update W at ``base * (r0 + (1 - r0) * (W - 1) / W)``, never yet at base.
    - W <= t < S (updates W+1..S): base, exactly; update W+1 is the first at base.
    - S <= t < T (updates S+1..T): ``base * (m + (1 - m) * f(p))`` with p = (t - S) / D and
      f = 1 - p (linear), (1 + cos(pi p)) / 2 (cosine) or 1 - sqrt(p) (1-sqrt). Update S+1
      has p = 0 and runs at base exactly; update S+2 is the first below it; the last update
      of the run, T, has p = (D - 1) / D and is still above m * base (for m < 1).
    - t >= T (updates T+1 on): m * base, exactly.

    With W = 0 there is no warmup (update 1 at base); with W = S there is no stable phase (the
    decay starts right after the warmup, at base).
    """

    base: float
    warmup: int
    decay: int
    total: int
    warmup_min_ratio: float
    min_ratio: float
    decay_type: str

    def _shape(self, p: float) -> float:
        """The decay's fraction of the way from min to base, 1 at p = 0 and 0 at p = 1."""
        if self.decay_type == "linear":
            return 1.0 - p
        if self.decay_type == "cosine":
            return (1.0 + math.cos(math.pi * p)) / 2
        return 1.0 - math.sqrt(p)

    def lr(self, update: float) -> float:
        t = _check_update(update) - 1
        start = self.total - self.decay
        if t < self.warmup:
            ratio = self.warmup_min_ratio + (1.0 - self.warmup_min_ratio) * t / self.warmup
        elif t < start:
            return self.base
        elif t < self.total:
            # m + (1 - m) * 1 is 1.0 exactly in floats, so update S+1 gives base itself
            ratio = self.min_ratio + (1.0 - self.min_ratio) * self._shape((t - start) / self.decay)
        else:
            ratio = self.min_ratio
        return self.base * ratio

    def boundaries(self) -> tuple[int, ...]:
        return (self.warmup + 1, self.total - self.decay + 1, self.total + 1)


@dataclass(frozen=True)
class Constant(_NoMomentum):
    base: float

    def lr(self, update: float) -> float:
        _check_update(update)
        return self.base

    def boundaries(self) -> tuple[int, ...]:
        return ()


_Built = WeNetWarmupLR | DeepSpeedWarmupLR | DeepSpeedWarmupCosineLR | DeepSpeedOneCycle | \
    GradualWarmup | WarmupStableDecay | Constant

def _make(name: str, p: dict[str, Any], base: float) -> _Built:
    def or_(value: Any, fallback: Any) -> Any:
        return fallback if value is None else value

    if name == "warmuplr":
        return WeNetWarmupLR(base, p["warmup_steps"])
    if name == "onecycle":
        first, stairs = p["cycle_first_step_size"], p["cycle_first_stair_count"]
        return DeepSpeedOneCycle(
            float(p["cycle_min_lr"]), float(p["cycle_max_lr"]), float(p["decay_lr_rate"]),
            first, or_(p["cycle_second_step_size"], first),
            stairs, or_(p["cycle_second_stair_count"], stairs), p["decay_step_size"],
            p["cycle_momentum"], float(p["cycle_min_mom"]), float(p["cycle_max_mom"]),
            float(p["decay_mom_rate"]))
    if name in ("ds_warmuplr", "ds_warmup_decay"):
        return DeepSpeedWarmupLR(
            float(p["warmup_min_lr"]), float(or_(p["warmup_max_lr"], base)),
            max(2, p["warmup_num_steps"]), p["warmup_type"], p.get("total_num_steps"))
    if name == "ds_warmup_cosine":
        return DeepSpeedWarmupCosineLR(
            base, p["total_num_steps"], float(p["warmup_min_ratio"]),
            max(2, p["warmup_num_steps"]), float(p["cos_min_ratio"]), p["warmup_type"])
    if name == "gradual_warmup":
        # start_lr None (not filled in by scaling.apply) means the reference lr: base here
        return GradualWarmup(base, float(or_(p["start_lr"], base)), p["warmup_steps"])
    if name == "wsd":
        return WarmupStableDecay(
            base, p["warmup_steps"], p["decay_steps"], p["total_steps"],
            float(p["warmup_min_ratio"]), float(p["min_lr_ratio"]), p["decay_type"])
    return Constant(base)


def _build(spec: Mapping[str, Any], base_lr: float) -> _Built:
    if not _is_number(base_lr) or base_lr < 0:
        raise ValueError(f"base_lr must be a finite number >= 0, but got {base_lr=}")
    name, params = _resolve(spec, float(base_lr))
    return _make(name, params, float(base_lr))


def build(spec: Mapping[str, Any], base_lr: float) -> Schedule:
    """The schedule for ``{"type": name, **params}``; ``base_lr`` is the optimizer's lr."""
    return _build(spec, base_lr)


def peak_lr(spec: Mapping[str, Any], base_lr: float) -> float:
    """The largest lr over all updates. Every schedule is monotone between its phase boundaries
    (and constant or decreasing after the last), so the max is at one of a few updates next to
    a boundary; evaluating those gives exactly what ``table`` would show."""
    schedule = _build(spec, base_lr)
    candidates = {1, 2, 3}
    for b in schedule.boundaries():
        candidates.update(k for k in range(b - 2, b + 3) if k >= 1)
    return max(schedule.lr(k) for k in candidates)


def warmup_steps(spec: Mapping[str, Any]) -> int | None:
    """The warmup param's value with defaults applied; None for schedules without one."""
    name, params = _resolve(spec)
    param = SCHEDULE_TYPES[name].warmup_param
    return None if param is None else params[param]


def table(schedule: Schedule, updates: int) -> list[tuple[int, float, float | None]]:
    """(update, lr, momentum) for updates 1..updates."""
    if not isinstance(updates, int) or isinstance(updates, bool) or updates < 0:
        raise ValueError(f"updates must be an integer of at least 0, but got {updates=}")
    return [(k, schedule.lr(k), schedule.momentum(k)) for k in range(1, updates + 1)]
