"""Which optimizers a trial may use and what their settings must satisfy."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from scalesweep.orchestrator.spec.errors import Problem

_ADAM = ("lr", "betas", "eps", "weight_decay", "amsgrad")
PARAMS: dict[str, tuple[str, ...]] = {
    "adam": _ADAM,
    "adamw": _ADAM,
    "sgd": ("lr", "momentum", "dampening", "weight_decay", "nesterov"),
}


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def validate(opt: Mapping[str, Any]) -> list[Problem]:
    """Problems with an optimizer block ``{"type": ..., "lr": ..., ...}``; paths relative to it."""
    kind = opt.get("type")
    if kind not in PARAMS:
        return [Problem("type", kind, f"must be one of {sorted(PARAMS)}")]
    problems: list[Problem] = []
    allowed = PARAMS[kind]
    for key, value in opt.items():
        if key == "type":
            continue
        if key not in allowed:
            problems.append(Problem(key, value, f"unknown {kind} setting; allowed: {list(allowed)}"))
        elif key == "lr" or key in ("eps",):
            if not _is_number(value) or not value > 0:
                problems.append(Problem(key, value, "must be a finite number > 0"))
        elif key in ("weight_decay", "dampening"):
            if not _is_number(value) or value < 0:
                problems.append(Problem(key, value, "must be a number >= 0"))
        elif key == "momentum":
            if not _is_number(value) or not 0 <= value < 1:
                problems.append(Problem(key, value, "must be a number in [0, 1)"))
        elif key == "betas":
            ok = (
                isinstance(value, list | tuple)
                and len(value) == 2
                and all(_is_number(b) and 0 <= b < 1 for b in value)
            )
            if not ok:
                problems.append(Problem(key, value, "must be two numbers in [0, 1)"))
        elif key in ("amsgrad", "nesterov") and not isinstance(value, bool):
            problems.append(Problem(key, value, "must be true or false"))
    if "lr" not in opt:
        problems.append(Problem("lr", None, "is required (set optimizer.lr or use a recipe)"))
    return problems
