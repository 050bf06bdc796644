"""A schedule resolved once: ``ScheduleSpec`` and ``resolve``, the one place a schedule spec is
judged (docs/design.md §1.3). The planner resolves each trial's schedule and hands the record
on unchanged, through ``TrialConfig`` and Ray, to ``build`` in the worker, which trusts it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scalesweep.science.schedules._registry import SCHEDULE_TYPES, canonical_name
from scalesweep.science.schedules._types import AUTO, Problem, ScheduleConfig, ScheduleType
from scalesweep.science.schedules._validation import integral_counts, problems
from scalesweep.science.typed_params import TypedParams


class ScheduleError(ValueError):
    """A schedule spec that breaks its rules; ``problems`` lists each (field, value, rule)."""

    def __init__(self, found: list[Problem], prefix: str = "invalid schedule") -> None:
        lines = "; ".join(f"{p.field} = {p.value!r}: {p.rule}" for p in found)
        super().__init__(f"{prefix}: {lines}")
        self.problems = found


@dataclass(frozen=True, eq=False)
class ScheduleSpec(TypedParams):
    """A schedule as ``resolve`` made it: the canonical ``type`` and every param of that type,
    defaults applied, in the type's own order. Frozen and made of plain values, so that it
    pickles, hashes and compares; as a read-only mapping it is its JSON form
    ``{"type": ..., **params}`` (``as_dict``), so code that read the old dict reads it unchanged.
    A total may still be ``auto`` until ``fill_auto`` gives it the run's length."""

    type: str
    #: (param, value) in the order of the type's params; see ``params``
    param_items: tuple[tuple[str, Any], ...] = ()

    @property
    def kind(self) -> ScheduleType:
        return SCHEDULE_TYPES[self.type]

    @property
    def warmup_steps(self) -> int | None:
        """The warmup param's value; None for schedules without one."""
        param = self.kind.warmup_param
        return None if param is None else self.params[param]

    @property
    def config(self) -> ScheduleConfig:
        """The family's typed config of these params (``WarmupLRConfig(warmup_steps=...)``),
        from which ``build`` makes the schedule; a total still ``auto`` has no config yet."""
        if auto := self.auto_params():
            raise ValueError(f"{', '.join(auto)} = 'auto' is the run's length, which the schedule "
                             "alone does not know: fill it in first (schedules.fill_auto)")
        return self.kind.config(**self.params)

    def auto_params(self) -> list[str]:
        """The params still given as ``auto``."""
        return self.kind.auto_params(self.params)

    def with_params(self, changes: Mapping[str, Any]) -> ScheduleSpec:
        """This spec with ``changes`` set, unjudged: the caller resolves what it cannot vouch
        for (scaling.apply does)."""
        unknown = set(changes) - set(self.kind.params)
        if unknown:
            raise KeyError(f"{self.type} has no param {sorted(unknown)}")
        return ScheduleSpec(self.type, tuple((k, changes.get(k, v)) for k, v in self.param_items))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ScheduleSpec:
        """The record back from its JSON form (``as_dict``; a Tune config, a checkpoint's
        meta), not judged again: ``resolve`` judged it when it was planned. Defaults fill what
        an older record left out."""
        kind = SCHEDULE_TYPES[canonical_name(data["type"])]
        merged = {**kind.defaults(), **{k: v for k, v in data.items() if k != "type"}}
        unknown = set(merged) - set(kind.params)
        if unknown:
            raise ValueError(f"not a {kind.name} schedule record: unknown {sorted(unknown)}")
        return cls(kind.name, tuple((k, merged[k]) for k in kind.params))


def resolve(spec: Mapping[str, Any] | ScheduleSpec, base_lr: float | None = None,
            *, prefix: str = "invalid schedule") -> ScheduleSpec:
    """The one judge of a schedule: ``{"type": name, **params}`` (an alias for its canonical
    name) as a ``ScheduleSpec`` with every default applied; ``ScheduleError`` naming every
    problem. ``base_lr``: the optimizer lr, for the rules that read it (DeepSpeed's
    warmup_min_lr <= it). A count is an int: 2.0 is none (YAML's integral floats become ints
    where the sweep file's layers are merged, ``integral_counts``)."""
    raw = spec.as_dict() if isinstance(spec, ScheduleSpec) else dict(spec)
    found = problems(raw, base_lr)
    if found:
        raise ScheduleError(found, prefix)
    kind = SCHEDULE_TYPES[canonical_name(raw["type"])]
    merged = {**kind.defaults(), **{k: v for k, v in raw.items() if k != "type"}}
    return ScheduleSpec(kind.name, tuple((k, merged[k]) for k in kind.params))


def fill_auto(spec: ScheduleSpec, updates: int) -> ScheduleSpec:
    """``spec`` with every ``auto`` param (a schedule's total) set to ``updates``, the run's
    own length in the schedule's counts."""
    return spec.with_params(dict.fromkeys(spec.auto_params(), updates))


__all__ = ["AUTO", "ScheduleError", "ScheduleSpec", "fill_auto", "integral_counts", "resolve"]
