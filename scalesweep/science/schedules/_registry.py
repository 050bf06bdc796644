"""The one place schedule families are listed (docs/design.md §1.3): each family module gives
its ``TYPES`` and ``ALIASES``; nothing else names a schedule."""

from __future__ import annotations

from types import ModuleType

from scalesweep.science.schedules import constant, deepspeed, gradual_warmup, wenet, wsd
from scalesweep.science.schedules._types import ScheduleType

#: in this order in SCHEDULE_TYPES, and so in every "known: ..." message
FAMILIES: tuple[ModuleType, ...] = (
    wenet,
    deepspeed,
    gradual_warmup,
    wsd,
    constant,
)


def _types() -> dict[str, ScheduleType]:
    out: dict[str, ScheduleType] = {}
    for family in FAMILIES:
        for kind in family.TYPES:
            if kind.name in out:
                raise RuntimeError(f"schedule type {kind.name!r} is registered twice")
            if kind.config.name != kind.name:
                raise RuntimeError(f"schedule type {kind.name!r} has {kind.config.name!r}'s config")
            out[kind.name] = kind
    return out


SCHEDULE_TYPES: dict[str, ScheduleType] = _types()
ALIASES: dict[str, str] = {k: v for family in FAMILIES for k, v in family.ALIASES.items()}
#: every param counted in optimizer updates, for "must be an integer (a count of ...)"
ALL_STEP_PARAMS = {p for t in SCHEDULE_TYPES.values() for p in t.step_params}


def canonical_name(name: str) -> str:
    if isinstance(name, str):
        if name in SCHEDULE_TYPES:
            return name
        if name in ALIASES:
            return ALIASES[name]
    known = ", ".join([*SCHEDULE_TYPES, *ALIASES])
    raise ValueError(f"unknown schedule type {name!r}; known (case-sensitive): {known}")
