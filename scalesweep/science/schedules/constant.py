"""A constant lr, the optimizer's own: schedule type ``constant``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scalesweep.science.schedules._types import NoMomentum, ScheduleType, check_update


@dataclass(frozen=True)
class Constant(NoMomentum):
    base: float

    def lr(self, update: float) -> float:
        check_update(update)
        return self.base

    def boundaries(self) -> tuple[int, ...]:
        return ()


def _make(p: dict[str, Any], base: float) -> Constant:
    return Constant(base)


TYPES = (ScheduleType("constant", None, (), (), True, False, {}, make=_make),)
ALIASES: dict[str, str] = {}
