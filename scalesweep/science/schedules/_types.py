"""What every schedule family is made of: ``Param``, ``ScheduleConfig`` (a family's typed,
keyword-only config, torchtitan's configurable pattern: its fields and their rules, and
``build``), ``ScheduleType`` (a family's declaration of one schedule, hooks included) and the
pieces the schedule classes share. A problem found is the project's one ``Problem``
(scalesweep.errors: field path, value, rule)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, MISSING, dataclass, field, fields
from typing import Any, ClassVar, Literal, Protocol

from scalesweep.errors import Problem


class Schedule(Protocol):
    def lr(self, update: float) -> float: ...

    def momentum(self, update: float) -> float | None: ...

    def betas(self, update: float) -> tuple[float, float] | None: ...


class BuiltSchedule(Schedule, Protocol):
    """What a family's ``make`` returns: a schedule that also knows its phase boundaries."""

    def boundaries(self) -> tuple[int, ...]: ...


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


def param(kind: Kind, default: Any = MISSING, **rules: Any) -> Any:
    """A ``ScheduleConfig`` field and its rules (``Param``); without a default it is required.
    The config class is then the one place a family's params, defaults and order are written."""
    if default is MISSING:
        return field(metadata={"param": Param(kind, required=True, **rules)})
    return field(default=default, metadata={"param": Param(kind, default=default, **rules)})


@dataclass(frozen=True, kw_only=True)
class ScheduleConfig:
    """A schedule family's typed config: one frozen, keyword-only dataclass per schedule type,
    its fields made with ``param`` (their rules), in the type's own param order. Made only from
    params ``resolve`` judged, every ``auto`` filled in (``ScheduleSpec.config``), so ``build``
    trusts its fields: ``warmup_steps: int`` here is the int the schedule object counts with."""

    #: the schedule type's canonical name, as the sweep file writes it
    name: ClassVar[str]

    def build(self, base_lr: float) -> BuiltSchedule:
        """The schedule object; ``base_lr`` is the optimizer's lr."""
        raise NotImplementedError


def config_params(config: type[ScheduleConfig]) -> dict[str, Param]:
    """A config's params and their rules, in its field order."""
    return {f.name: f.metadata["param"] for f in fields(config)}

@dataclass(frozen=True)
class Change:
    """A param a scaling hook sets, and why (scaling.apply notes it with both numbers)."""

    key: str
    value: Any
    reason: str


#: a count of updates at the reference batch -> the same count at this trial's batch
ScaleCount = Callable[[int], int]


def _no_cross_checks(v: dict[str, Any], base_lr: float | None) -> list[Problem]:
    return []


def _no_lr_hook(params: Mapping[str, Any], optimizer_lr: float, new_lr: float) -> list[Change]:
    return []


@dataclass(frozen=True)
class ScheduleType:
    name: str
    warmup_param: str | None  # what a warmup rule rewrites
    step_params: tuple[str, ...]  # counted in optimizer updates; "scaled" rescales all of them
    lr_params: tuple[str, ...]  # absolute lrs; an lr scaling rule multiplies them
    uses_optimizer_lr: bool  # lr is relative to the optimizer's lr
    drives_momentum: bool
    #: the family's typed config: its params (fields, rules, defaults, order) and ``build``
    config: type[ScheduleConfig]
    # lr params whose None means "the optimizer's lr" (DeepSpeed's warmup_max_lr)
    optimizer_lr_fallbacks: tuple[str, ...] = ()
    #: the original's own count at update k is k - 1 + counts_from: WeNet's step_num is k (1),
    #: DeepSpeed's warmups read last_batch_iteration k - 2 (-1), LambdaLR-style ones k - 1 (0).
    #: A batch-size ramp's clock (science.batch_ramp) keeps that count proportional to the
    #: samples, which makes a stage's lr the one a trial at its batch would have
    counts_from: int = 0
    # The family's hooks (docs/design.md §1.3), so that no caller branches on a name:
    _: KW_ONLY
    #: rules between params, only called when each param is valid on its own
    cross_checks: Callable[[dict[str, Any], float | None], list[Problem]] = _no_cross_checks
    #: after an lr scaling rule: params that follow the reference and the new lr
    #: (``params``, the reference lr, the new lr) -> the changes
    scale_lr: Callable[[Mapping[str, Any], float, float], list[Change]] = _no_lr_hook
    #: the "scaled" warmup rule, where scaling every count on its own does not fit:
    #: (``params``, the counts given as auto, the scaling, the reason) -> the changes
    scale_counts: Callable[[Mapping[str, Any], Sequence[str], ScaleCount, str],
                           list[Change]] | None = None

    @functools.cached_property
    def params(self) -> dict[str, Param]:
        return config_params(self.config)

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


def is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def at_most(v: Mapping[str, Any], lo: str, hi: str, hi_value: Any) -> list[Problem]:
    """``lo`` must not exceed ``hi`` (named in the rule); no problem when ``hi_value`` is None."""
    if hi_value is not None and v[lo] > hi_value:
        return [Problem(lo, v[lo], f"must be <= {hi} ({hi_value:g})")]
    return []


def or_(value: Any, fallback: Any) -> Any:
    return fallback if value is None else value


def check_update(update: float) -> float:
    # Updates count from 1. A float is a batch-size ramp's schedule clock counting samples
    # (scalesweep.science.batch_ramp): 1.25 is a quarter of an update past the first; for
    # a schedule counted from 1 (WeNet's) a stage's first updates sit below 1 (0.25: a quarter)
    if isinstance(update, bool) or not isinstance(update, int | float) or not (
            math.isfinite(update) and update > 0) or (isinstance(update, int) and update < 1):
        raise ValueError(f"update must be an integer of at least 1 (or a ramp's position > 0), "
                         f"but got {update=}")
    return update


class NoMomentum:
    """For schedules that leave the optimizer's momentum and betas alone."""

    def momentum(self, update: float) -> float | None:
        check_update(update)
        return None

    def betas(self, update: float) -> tuple[float, float] | None:
        check_update(update)
        return None
