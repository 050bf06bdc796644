"""The rules a schedule spec ``{"type": name, **params}`` must meet: each param against its
``Param``, then the family's ``cross_checks``; every problem, not just the first.
``_spec.resolve`` is the one caller that turns them into a refusal."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from scalesweep.science.schedules._registry import (
    ALIASES,
    ALL_STEP_PARAMS,
    SCHEDULE_TYPES,
    canonical_name,
)
from scalesweep.science.schedules._types import AUTO, Param, Problem, is_number


def _integral(v: Any) -> bool:
    return isinstance(v, float) and math.isfinite(v) and v.is_integer()


def integral_counts(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``{"type": ..., **params}`` with integral floats (``warmup_steps: 25000.0``) as integers
    where the schedule counts updates: WeNet and DeepSpeed do plain arithmetic with them, and
    YAML axes give such floats."""
    out = dict(spec)
    try:
        kind = SCHEDULE_TYPES[canonical_name(out.get("type"))]  # type: ignore[arg-type]
    except ValueError:
        return out  # the rules report the type
    for key, value in out.items():
        param = kind.params.get(key)
        if param is not None and param.kind == "int" and _integral(value):
            out[key] = int(value)
    return out


def check_param(name: str, p: Param, v: Any) -> Problem | None:
    if v is None:
        return None if p.nullable else Problem(name, v, "must not be null")
    if p.auto and v == AUTO:
        return None
    if p.kind == "bool":
        return None if isinstance(v, bool) else Problem(name, v, "must be true or false")
    if p.kind == "str":
        if not isinstance(v, str) or (p.choices and v not in p.choices):
            # quirk: DeepSpeed warns and silently uses "log" for an unknown warmup_type;
            # a sweep should fail loudly instead
            return Problem(name, v, f"must be one of {', '.join(map(repr, p.choices))}")
        return None
    if p.kind == "int" and (not isinstance(v, int) or isinstance(v, bool)):
        return Problem(name, v, ("must be an integer (a count of optimizer updates)"
                                 if name in ALL_STEP_PARAMS else "must be an integer")
                       + (" or auto (the run's own number of updates)" if p.auto else ""))
    if isinstance(v, bool):
        return Problem(name, v, "must be a number, not true/false")
    if not is_number(v):
        return Problem(name, v, "must be a finite number")
    if p.ge is not None and not v >= p.ge:
        return Problem(name, v, f"must be >= {p.ge:g}")
    if p.le is not None and not v <= p.le:
        return Problem(name, v, f"must be <= {p.le:g}")
    if p.lt is not None and not v < p.lt:
        return Problem(name, v, f"must be < {p.lt:g}")
    return None


def problems(spec: Mapping[str, Any], base_lr: float | None = None) -> list[Problem]:
    if not isinstance(spec, Mapping):
        return [Problem("type", spec, "a schedule must be a mapping with a type")]
    raw = spec.get("type")
    if raw is None:
        return [Problem("type", None, f"is required; one of {', '.join(SCHEDULE_TYPES)}")]
    try:
        kind = SCHEDULE_TYPES[canonical_name(raw)]
    except ValueError:
        known = ", ".join([*SCHEDULE_TYPES, *ALIASES])
        return [Problem("type", raw, f"unknown schedule type; known (case-sensitive): {known}")]
    out = []
    for key, value in spec.items():
        if key != "type" and key not in kind.params:
            known = ", ".join(kind.params) or "none"
            rule = f"unknown parameter of {kind.name}; known: {known}"
            out.append(Problem(str(key), value, rule))
    merged = {**kind.defaults(), **{k: v for k, v in spec.items() if k in kind.params}}
    for key, p in kind.params.items():
        if p.required and spec.get(key) is None:
            out.append(Problem(key, spec.get(key), f"is required by {kind.name}"))
        elif (problem := check_param(key, p, merged[key])) is not None:
            out.append(problem)
    if not out:
        out.extend(kind.cross_checks(merged, base_lr))
    return out


def validate(spec: Mapping[str, Any], base_lr: float | None = None) -> list[Problem]:
    """Every problem in ``{"type": name, **params}``, not just the first (``resolve`` raises
    them; the spec layer lists them under its own paths)."""
    return problems(spec, base_lr)
