"""WeNet's ``WarmupLR`` (``wenet/utils/scheduler.py``): schedule type ``warmuplr``.

A torch ``_LRScheduler``: construction already calls ``step()`` once, so update k has
``step_num = k``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from scalesweep.science.schedules._types import (
    NoMomentum,
    ScheduleConfig,
    ScheduleType,
    check_update,
    param,
)


@dataclass(frozen=True)
class WeNetWarmupLR(NoMomentum):
    base: float
    warmup: int

    def lr(self, update: float) -> float:
        s = check_update(update)
        if self.warmup == 0:
            return self.base * s**-0.5
        # = base * w^0.5 * min(s^-0.5, s * w^-1.5), written so that s = w gives base exactly
        return self.base * min(s / self.warmup, math.sqrt(self.warmup / s))

    def boundaries(self) -> tuple[int, ...]:
        return (self.warmup,)


@dataclass(frozen=True, kw_only=True)
class WeNetWarmupLRConfig(ScheduleConfig):
    name: ClassVar[str] = "warmuplr"
    warmup_steps: int = param("int", 25000, ge=0)

    def build(self, base_lr: float) -> WeNetWarmupLR:
        return WeNetWarmupLR(base_lr, self.warmup_steps)


TYPES = (
    ScheduleType("warmuplr", "warmup_steps", ("warmup_steps",), (), True, False, WeNetWarmupLRConfig,
                 counts_from=1),
)
ALIASES: dict[str, str] = {}
