"""Learning-rate schedules as pure functions of the optimizer update. No torch, no Ray.

One family per module (docs/design.md §1.3): ``wenet`` (``warmuplr``), ``deepspeed``
(``onecycle``, ``ds_warmuplr``, ``ds_warmup_decay``, ``ds_warmup_cosine``), ``gradual_warmup``,
``wsd`` and ``constant``; each owns its params, checks, scaling hooks and momentum, and is
listed once, in ``_registry``. A type's params are the fields of its typed, keyword-only config
(``WeNetWarmupLRConfig(warmup_steps=...)``), whose ``build`` makes the schedule object: from
``ScheduleSpec.config`` to ``lr(k)`` every value is typed. This module is the public API.

Contract: ``lr(k)`` (k >= 1) is the lr that the ORIGINAL scheduler object holds after its
construction and k-1 calls of ``step()``, so update k runs with ``lr(k)`` (each family's
module doc says how its original counts). ``gradual_warmup`` and ``wsd`` have no original
class; their reference is a torch ``LambdaLR`` (update k runs at step ``t = k - 1``).

The arithmetic follows the originals' operation order, so values agree to the last bit or
two, not just approximately. Where the originals do something surprising it is kept (the loop must
match DeepSpeed and WeNet runs) and said in a comment marked "quirk".
"""

from __future__ import annotations

from scalesweep.science.schedules._registry import ALIASES, SCHEDULE_TYPES, canonical_name
from scalesweep.science.schedules._spec import (
    ScheduleError,
    ScheduleSpec,
    fill_auto,
    resolve,
)
from scalesweep.science.schedules._types import (
    AUTO,
    BuiltSchedule,
    Change,
    Param,
    Problem,
    Schedule,
    ScheduleConfig,
    ScheduleType,
    is_number,
)
from scalesweep.science.schedules._validation import integral_counts, validate
from scalesweep.science.schedules.constant import Constant, ConstantConfig
from scalesweep.science.schedules.deepspeed import (
    DeepSpeedOneCycle,
    DeepSpeedOneCycleConfig,
    DeepSpeedWarmupCosineLR,
    DeepSpeedWarmupCosineLRConfig,
    DeepSpeedWarmupDecayLRConfig,
    DeepSpeedWarmupLR,
    DeepSpeedWarmupLRConfig,
)
from scalesweep.science.schedules.gradual_warmup import GradualWarmup, GradualWarmupConfig
from scalesweep.science.schedules.wenet import WeNetWarmupLR, WeNetWarmupLRConfig
from scalesweep.science.schedules.wsd import WarmupStableDecay, WarmupStableDecayConfig

__all__ = [
    "ALIASES",
    "AUTO",
    "SCHEDULE_TYPES",
    "Change",
    "Constant",
    "ConstantConfig",
    "DeepSpeedOneCycle",
    "DeepSpeedOneCycleConfig",
    "DeepSpeedWarmupCosineLR",
    "DeepSpeedWarmupCosineLRConfig",
    "DeepSpeedWarmupDecayLRConfig",
    "DeepSpeedWarmupLR",
    "DeepSpeedWarmupLRConfig",
    "GradualWarmup",
    "GradualWarmupConfig",
    "Param",
    "Problem",
    "Schedule",
    "ScheduleConfig",
    "ScheduleError",
    "ScheduleSpec",
    "ScheduleType",
    "WarmupStableDecay",
    "WarmupStableDecayConfig",
    "WeNetWarmupLR",
    "WeNetWarmupLRConfig",
    "build",
    "canonical_name",
    "fill_auto",
    "integral_counts",
    "peak_lr",
    "require_spec",
    "resolve",
    "table",
    "validate",
    "warmup_steps",
]


def require_spec(spec: ScheduleSpec, caller: str) -> ScheduleSpec:
    """``spec`` itself, when ``resolve`` made it; a TypeError naming ``caller`` otherwise (a
    notebook's dict: ``resolve`` is the one judge of a schedule)."""
    if not isinstance(spec, ScheduleSpec):
        raise TypeError(f"{caller} takes a ScheduleSpec, but got {spec!r}: make it "
                        "with schedules.resolve(spec, base_lr), which judges it")
    return spec


def build(spec: ScheduleSpec, base_lr: float) -> BuiltSchedule:
    """The schedule of a resolved spec (``resolve`` judged it, once); ``base_lr`` is the
    optimizer's lr."""
    spec = require_spec(spec, "schedules.build")
    if not is_number(base_lr) or base_lr < 0:
        raise ValueError(f"base_lr must be a finite number >= 0, but got {base_lr=}")
    return spec.config.build(float(base_lr))


def peak_lr(spec: ScheduleSpec, base_lr: float) -> float:
    """The largest lr over all updates. Every schedule is monotone between its phase boundaries
    (and constant or decreasing after the last), so the max is at one of a few updates next to
    a boundary; evaluating those gives exactly what ``table`` would show."""
    schedule = build(spec, base_lr)
    candidates = {1, 2, 3}
    for b in schedule.boundaries():
        candidates.update(k for k in range(b - 2, b + 3) if k >= 1)
    return max(schedule.lr(k) for k in candidates)


def warmup_steps(spec: ScheduleSpec) -> int | None:
    """The warmup param's value with defaults applied; None for schedules without one."""
    return require_spec(spec, "schedules.warmup_steps").warmup_steps


def table(schedule: Schedule, updates: int) -> list[tuple[int, float, float | None]]:
    """(update, lr, momentum) for updates 1..updates."""
    if not isinstance(updates, int) or isinstance(updates, bool) or updates < 0:
        raise ValueError(f"updates must be an integer of at least 0, but got {updates=}")
    return [(k, schedule.lr(k), schedule.momentum(k)) for k in range(1, updates + 1)]
