"""DeepSpeed's schedules (``deepspeed/runtime/lr_schedules.py``, read at v0.19.8): schedule types
``onecycle``, ``ds_warmuplr``, ``ds_warmup_decay`` and ``ds_warmup_cosine``, also by their
DeepSpeed names (``ALIASES``).

DeepSpeed starts ``last_batch_iteration`` at -1 and adds one per ``step()``, so update k has
``last_batch_iteration = k - 2``; update 1 holds whatever the constructor set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from scalesweep.science.schedules._types import (
    NoMomentum,
    Problem,
    ScheduleConfig,
    ScheduleType,
    at_most,
    check_update,
    or_,
    param,
)

#: OneCycle cycles beta1 and holds beta2 at 0.99 (lr_schedules.py)
ONECYCLE_BETA2 = 0.99

_WARMUP_TYPES = ("log", "linear")
_WARMUP_STEPS = 1000  # DeepSpeed's default; it raises for < 1 since v0.19.3


def _warmup_gamma(i: float, steps: int, warmup_type: str) -> float:
    """DeepSpeed's warmup fraction at last_batch_iteration i (0 <= i < steps)."""
    if warmup_type == "log":
        return 1.0 / math.log(steps) * math.log(i + 1)
    return i / steps


@dataclass(frozen=True)
class DeepSpeedWarmupLR(NoMomentum):
    """WarmupLR, and WarmupDecayLR when ``total`` is given."""

    min_lr: float
    max_lr: float
    num_steps: int  # already max(2, warmup_num_steps): log(1) would divide by zero
    warmup_type: str
    total: int | None = None

    def lr(self, update: float) -> float:
        i = check_update(update) - 2
        if i < 0:
            return self.min_lr  # the constructor sets min_lr (get_lr before any step)
        # quirk: i = 0 gives gamma 0 too, so updates 1 and 2 both run at min_lr; log warmup
        # reaches max at i = W-1 (update W+1), linear only at i = W (update W+2)
        if i < self.num_steps:
            gamma = _warmup_gamma(i, self.num_steps, self.warmup_type)
        elif self.total is None:
            gamma = 1.0
        else:
            gamma = max(0.0, float(self.total - i) / float(max(1.0, self.total - self.num_steps)))
        return self.min_lr + (self.max_lr - self.min_lr) * gamma

    def boundaries(self) -> tuple[int, ...]:
        return (self.num_steps + 1, self.num_steps + 2) + (
            () if self.total is None else (self.total + 2,))


@dataclass(frozen=True)
class DeepSpeedWarmupCosineLR(NoMomentum):
    base: float
    total: int
    warmup_min_ratio: float
    num_steps: int  # max(2, warmup_num_steps)
    cos_min_ratio: float
    warmup_type: str

    def lr(self, update: float) -> float:
        i = check_update(update) - 2
        if i < 0:
            # quirk: the constructor sets lr = 0.0, whatever warmup_min_ratio says
            return 0.0
        if i < self.num_steps:
            ratio = _warmup_gamma(i, self.num_steps, self.warmup_type)
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
        k = check_update(update)
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
        k = check_update(update)
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

    def betas(self, update: float) -> tuple[float, float] | None:
        """(beta1, beta2) for an optimizer with ``betas``; None where momentum is not cycled."""
        beta1 = self.momentum(update)
        return None if beta1 is None else (float(beta1), ONECYCLE_BETA2)

    def boundaries(self) -> tuple[int, ...]:
        return (self.first + 1, self.first + self.second + 1)


@dataclass(frozen=True, kw_only=True)
class DeepSpeedOneCycleConfig(ScheduleConfig):
    name: ClassVar[str] = "onecycle"
    cycle_min_lr: float = param("float", ge=0)
    cycle_max_lr: float = param("float", ge=0)
    decay_lr_rate: float = param("float", 0.0, ge=0)
    cycle_first_step_size: int = param("int", 2000, ge=1)
    #: None: same as the first half
    cycle_second_step_size: int | None = param("int", None, nullable=True, ge=0)
    #: <= 0: continuous; > 0: that many flat stairs per half (DeepSpeed >= 0.19.4)
    cycle_first_stair_count: int = param("int", 0)
    cycle_second_stair_count: int | None = param("int", None, nullable=True)
    decay_step_size: int = param("int", 0, ge=0)  # 0: no decay at all
    cycle_momentum: bool = param("bool", True)
    cycle_min_mom: float = param("float", 0.8, ge=0, lt=1)
    cycle_max_mom: float = param("float", 0.9, ge=0, lt=1)
    decay_mom_rate: float = param("float", 0.0, ge=0)

    def build(self, base_lr: float) -> DeepSpeedOneCycle:
        first, stairs = self.cycle_first_step_size, self.cycle_first_stair_count
        return DeepSpeedOneCycle(
            float(self.cycle_min_lr), float(self.cycle_max_lr), float(self.decay_lr_rate),
            first, or_(self.cycle_second_step_size, first),
            stairs, or_(self.cycle_second_stair_count, stairs), self.decay_step_size,
            self.cycle_momentum, float(self.cycle_min_mom), float(self.cycle_max_mom),
            float(self.decay_mom_rate))


@dataclass(frozen=True, kw_only=True)
class DeepSpeedWarmupLRConfig(ScheduleConfig):
    """DeepSpeed's WarmupLR (WeNet's ``warmuplr`` is another schedule)."""

    name: ClassVar[str] = "ds_warmuplr"
    warmup_min_lr: float = param("float", 0.0, ge=0)
    #: None: the optimizer's lr
    warmup_max_lr: float | None = param("float", None, nullable=True, ge=0)
    warmup_num_steps: int = param("int", _WARMUP_STEPS, ge=1)
    warmup_type: str = param("str", "log", choices=_WARMUP_TYPES)

    def build(self, base_lr: float) -> DeepSpeedWarmupLR:
        return DeepSpeedWarmupLR(
            float(self.warmup_min_lr), float(or_(self.warmup_max_lr, base_lr)),
            max(2, self.warmup_num_steps), self.warmup_type)


@dataclass(frozen=True, kw_only=True)
class DeepSpeedWarmupDecayLRConfig(ScheduleConfig):
    name: ClassVar[str] = "ds_warmup_decay"
    total_num_steps: int = param("int", ge=1, auto=True)
    warmup_min_lr: float = param("float", 0.0, ge=0)
    #: quirk: WarmupDecayLR defaults to 0.001, not to the optimizer lr as WarmupLR does; only
    #: an explicit null falls through to the optimizer lr
    warmup_max_lr: float | None = param("float", 0.001, nullable=True, ge=0)
    warmup_num_steps: int = param("int", _WARMUP_STEPS, ge=1)
    warmup_type: str = param("str", "log", choices=_WARMUP_TYPES)

    def build(self, base_lr: float) -> DeepSpeedWarmupLR:
        return DeepSpeedWarmupLR(
            float(self.warmup_min_lr), float(or_(self.warmup_max_lr, base_lr)),
            max(2, self.warmup_num_steps), self.warmup_type, self.total_num_steps)


@dataclass(frozen=True, kw_only=True)
class DeepSpeedWarmupCosineLRConfig(ScheduleConfig):
    name: ClassVar[str] = "ds_warmup_cosine"
    total_num_steps: int = param("int", ge=1, auto=True)
    warmup_min_ratio: float = param("float", 0.0, ge=0, le=1)
    warmup_num_steps: int = param("int", _WARMUP_STEPS, ge=1)
    cos_min_ratio: float = param("float", 0.0001, ge=0, le=1)
    warmup_type: str = param("str", "log", choices=_WARMUP_TYPES)

    def build(self, base_lr: float) -> DeepSpeedWarmupCosineLR:
        return DeepSpeedWarmupCosineLR(
            base_lr, self.total_num_steps, float(self.warmup_min_ratio),
            max(2, self.warmup_num_steps), float(self.cos_min_ratio), self.warmup_type)


def _onecycle_checks(v: dict[str, Any], base_lr: float | None) -> list[Problem]:
    out = at_most(v, "cycle_min_lr", "cycle_max_lr", v["cycle_max_lr"])
    if v["cycle_momentum"]:
        out += at_most(v, "cycle_min_mom", "cycle_max_mom", v["cycle_max_mom"])
    return out


def _warmup_checks(v: dict[str, Any], base_lr: float | None) -> list[Problem]:
    if v["warmup_max_lr"] is None:
        return at_most(v, "warmup_min_lr", "the optimizer lr", base_lr)
    return at_most(v, "warmup_min_lr", "warmup_max_lr", v["warmup_max_lr"])


TYPES = (
    ScheduleType(
        "onecycle", "cycle_first_step_size",
        ("cycle_first_step_size", "cycle_second_step_size", "decay_step_size"),
        ("cycle_min_lr", "cycle_max_lr"), False, True, DeepSpeedOneCycleConfig,
        cross_checks=_onecycle_checks,
    ),
    ScheduleType(
        "ds_warmuplr", "warmup_num_steps", ("warmup_num_steps",),
        ("warmup_min_lr", "warmup_max_lr"), False, False, DeepSpeedWarmupLRConfig,
        optimizer_lr_fallbacks=("warmup_max_lr",), counts_from=-1, cross_checks=_warmup_checks,
    ),
    ScheduleType(
        "ds_warmup_decay", "warmup_num_steps", ("warmup_num_steps", "total_num_steps"),
        ("warmup_min_lr", "warmup_max_lr"), False, False, DeepSpeedWarmupDecayLRConfig,
        optimizer_lr_fallbacks=("warmup_max_lr",), counts_from=-1, cross_checks=_warmup_checks,
    ),
    ScheduleType(
        "ds_warmup_cosine", "warmup_num_steps", ("warmup_num_steps", "total_num_steps"),
        (), True, False, DeepSpeedWarmupCosineLRConfig, counts_from=-1,
    ),
)
# Case matters: WeNet's "warmuplr" and DeepSpeed's "WarmupLR" are different schedules.
ALIASES: dict[str, str] = {
    "WarmupLR": "ds_warmuplr",
    "OneCycle": "onecycle",
    "WarmupDecayLR": "ds_warmup_decay",
    "WarmupCosineLR": "ds_warmup_cosine",
}
