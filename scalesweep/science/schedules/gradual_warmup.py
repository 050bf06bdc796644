"""Goyal et al. 2017's gradual warmup: schedule type ``gradual_warmup``.

No original class; the reference is a torch ``LambdaLR``, whose construction evaluates the
lambda at step 0, so update k runs at step ``t = k - 1`` (Goyal et al.'s iteration count).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from scalesweep.science.schedules._types import (
    Change,
    NoMomentum,
    ScheduleConfig,
    ScheduleType,
    check_update,
    or_,
    param,
)


@dataclass(frozen=True)
class GradualWarmup(NoMomentum):
    base: float
    start: float
    steps: int

    def lr(self, update: float) -> float:
        t = check_update(update) - 1
        if t >= self.steps:
            return self.base
        return self.start + (self.base - self.start) * t / self.steps

    def boundaries(self) -> tuple[int, ...]:
        return (self.steps + 1,)


@dataclass(frozen=True, kw_only=True)
class GradualWarmupConfig(ScheduleConfig):
    name: ClassVar[str] = "gradual_warmup"
    warmup_steps: int = param("int", ge=0)
    #: None: the reference lr, filled in by scaling.apply (Goyal et al. 2017)
    start_lr: float | None = param("float", None, nullable=True, ge=0)

    def build(self, base_lr: float) -> GradualWarmup:
        # start_lr None (not filled in by scaling.apply) means the reference lr: base here
        return GradualWarmup(base_lr, float(or_(self.start_lr, base_lr)), self.warmup_steps)


def _scale_lr(params: Mapping[str, Any], optimizer_lr: float, new_lr: float) -> list[Change]:
    if params["start_lr"] is not None:
        return []
    # Goyal et al.: start at the reference lr and ramp to k * lr. Below the reference batch
    # (k < 1) that would ramp down, so start at the (smaller) target instead.
    return [Change("start_lr", float(min(optimizer_lr, new_lr)), "gradual warmup starts at the "
                   "reference lr" if optimizer_lr <= new_lr else "k < 1: no ramp down")]


TYPES = (
    ScheduleType(
        "gradual_warmup", "warmup_steps", ("warmup_steps",), ("start_lr",), True, False,
        GradualWarmupConfig, scale_lr=_scale_lr,
    ),
)
ALIASES: dict[str, str] = {}
