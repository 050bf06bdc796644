"""A constant lr, the optimizer's own: schedule type ``constant``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from scalesweep.science.schedules._types import (
    NoMomentum,
    ScheduleConfig,
    ScheduleType,
    check_update,
)


@dataclass(frozen=True)
class Constant(NoMomentum):
    base: float

    def lr(self, update: float) -> float:
        check_update(update)
        return self.base

    def boundaries(self) -> tuple[int, ...]:
        return ()


@dataclass(frozen=True, kw_only=True)
class ConstantConfig(ScheduleConfig):
    name: ClassVar[str] = "constant"

    def build(self, base_lr: float) -> Constant:
        return Constant(base_lr)


TYPES = (ScheduleType("constant", None, (), (), True, False, ConstantConfig),)
ALIASES: dict[str, str] = {}
