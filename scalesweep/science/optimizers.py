"""The optimizers a trial may use: one table of names and settings that the sweep file's
checks, the loop (which torch class) and the lr rules (which have Adam's betas) all read, and
``OptimizerSpec``, an optimizer block resolved once. Pure: no torch (the loop looks the class
up in ``torch.optim`` by the table's name)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scalesweep.errors import Problem, ScalesweepError
from scalesweep.science.typed_params import TypedParams


@dataclass(frozen=True)
class OptimizerType:
    name: str  # as the sweep file writes it
    torch_class: str  # torch.optim.<torch_class>
    params: tuple[str, ...]  # the torch settings a sweep may give
    #: Adam's betas: sqrt_adam scales them, OneCycle cycles beta1 (SGD's momentum is left alone)
    has_betas: bool


_ADAM = ("lr", "betas", "eps", "weight_decay", "amsgrad")
OPTIMIZER_TYPES: dict[str, OptimizerType] = {
    "adam": OptimizerType("adam", "Adam", _ADAM, has_betas=True),
    "adamw": OptimizerType("adamw", "AdamW", _ADAM, has_betas=True),
    "sgd": OptimizerType("sgd", "SGD", ("lr", "momentum", "dampening", "weight_decay", "nesterov"),
                         has_betas=False),
}
#: the names whose optimizers have betas (sqrt_adam's, a schedule's momentum cycle)
BETAS_TYPES = tuple(name for name, kind in OPTIMIZER_TYPES.items() if kind.has_betas)


class OptimizerError(ScalesweepError, ValueError):
    """An optimizer block that breaks its rules; ``problems`` lists each."""

    def __init__(self, found: list[Problem]) -> None:
        super().__init__("invalid optimizer: " + "; ".join(map(str, found)))
        self.problems = found


def _frozen(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


@dataclass(frozen=True, eq=False)
class OptimizerSpec(TypedParams):
    """An optimizer block as ``resolve`` made it: its ``type`` and the settings given, in the
    order given (torch's defaults stay torch's, so its JSON form is the block as before).
    Frozen; as a read-only mapping it is that JSON form, lists (betas) as lists."""

    type: str
    #: (setting, value), lists as tuples so that the record is immutable and hashes
    param_items: tuple[tuple[str, Any], ...] = ()

    @property
    def kind(self) -> OptimizerType:
        return OPTIMIZER_TYPES[self.type]

    @property
    def lr(self) -> float:
        return float(self.params["lr"])

    @property
    def params(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.param_items}

    def torch_kwargs(self) -> dict[str, Any]:
        """The settings as the torch class takes them (betas as a tuple)."""
        return dict(self.param_items)

    def with_params(self, changes: Mapping[str, Any]) -> OptimizerSpec:
        """This spec with ``changes`` set (a new key goes last), unjudged."""
        merged = {**dict(self.param_items), **changes}
        return OptimizerSpec(self.type, tuple((k, _frozen(v)) for k, v in merged.items()))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OptimizerSpec:
        """The record back from its JSON form, not judged again (``resolve`` did, at plan
        time); only a type outside the table is refused, since no class would build it."""
        kind = str(data.get("type", "")).lower()
        if kind not in OPTIMIZER_TYPES:
            raise ValueError(f"optimizer type must be one of {sorted(OPTIMIZER_TYPES)}, "
                             f"but got {kind!r}")
        return cls(kind, tuple((k, _frozen(v)) for k, v in data.items() if k != "type"))


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _setting_problem(key: str, value: Any) -> str | None:
    if key in ("lr", "eps"):
        return None if _is_number(value) and value > 0 else "must be a finite number > 0"
    if key in ("weight_decay", "dampening"):
        return None if _is_number(value) and value >= 0 else "must be a number >= 0"
    if key == "momentum":
        return None if _is_number(value) and 0 <= value < 1 else "must be a number in [0, 1)"
    if key == "betas":
        ok = (isinstance(value, list | tuple) and len(value) == 2
              and all(_is_number(b) and 0 <= b < 1 for b in value))
        return None if ok else "must be two numbers in [0, 1)"
    if key in ("amsgrad", "nesterov") and not isinstance(value, bool):
        return "must be true or false"
    return None


def validate(opt: Mapping[str, Any]) -> list[Problem]:
    """Every problem with an optimizer block ``{"type": ..., "lr": ..., ...}``; paths relative
    to it (``resolve`` raises them; the spec layer lists them under its own paths)."""
    kind = opt.get("type")
    if kind not in OPTIMIZER_TYPES:
        return [Problem("type", kind, f"must be one of {sorted(OPTIMIZER_TYPES)}")]
    problems: list[Problem] = []
    allowed = OPTIMIZER_TYPES[kind].params
    for key, value in opt.items():
        if key == "type":
            continue
        if key not in allowed:
            problems.append(Problem(key, value, f"unknown {kind} setting; allowed: {list(allowed)}"))
        elif (rule := _setting_problem(key, value)) is not None:
            problems.append(Problem(key, value, rule))
    if "lr" not in opt:
        problems.append(Problem("lr", None, "is required (set optimizer.lr or use a recipe)"))
    return problems


def resolve(opt: Mapping[str, Any]) -> OptimizerSpec:
    """The one judge of an optimizer block: an ``OptimizerSpec``, or ``OptimizerError``
    naming every problem."""
    if isinstance(opt, OptimizerSpec):
        opt = opt.as_dict()
    found = validate(opt)
    if found:
        raise OptimizerError(found)
    return OptimizerSpec(opt["type"], tuple((k, _frozen(v)) for k, v in opt.items() if k != "type"))
