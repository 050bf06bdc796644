"""Goyal et al. 2017's gradual warmup: schedule type ``gradual_warmup``.

No original class; the reference is a torch ``LambdaLR``, whose construction evaluates the
lambda at step 0, so update k runs at step ``t = k - 1`` (Goyal et al.'s iteration count).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scalesweep.science.schedules._types import (
    Change,
    NoMomentum,
    Param,
    ScheduleType,
    check_update,
    or_,
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


def _make(p: dict[str, Any], base: float) -> GradualWarmup:
    # start_lr None (not filled in by scaling.apply) means the reference lr: base here
    return GradualWarmup(base, float(or_(p["start_lr"], base)), p["warmup_steps"])


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
        {
            "warmup_steps": Param("int", required=True, ge=0),
            # None: the reference lr, filled in by scaling.apply (Goyal et al. 2017)
            "start_lr": Param("float", default=None, nullable=True, ge=0),
        },
        make=_make, scale_lr=_scale_lr,
    ),
)
ALIASES: dict[str, str] = {}
