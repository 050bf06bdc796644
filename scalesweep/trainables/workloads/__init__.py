"""Workload registry: built-in names and ``package.module:function`` paths to factories."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from scalesweep.errors import ScalesweepError
from scalesweep.trainables.module_path import ModulePathError, import_callable

if TYPE_CHECKING:
    from scalesweep.trainables.workloads.base import Workload

Factory = Callable[[Mapping[str, Any]], "Workload"]

#: built-in workloads; values are import paths so that naming one does not import the others.
BUILTIN: dict[str, str] = {
    "mini_asr": "scalesweep.trainables.workloads.mini_asr:make",
    "digits_cnn": "scalesweep.trainables.workloads.digits_cnn:make",
    "mlp_regression": "scalesweep.trainables.workloads.mlp_regression:make",
}


class UnknownWorkloadError(ScalesweepError, ValueError):
    pass


def resolve(name: str) -> Factory:
    """The factory for a built-in name or a ``package.module:function`` path."""
    path = BUILTIN.get(name, name)
    if ":" not in path:
        raise UnknownWorkloadError(
            f"unknown workload {name!r}: use one of {sorted(BUILTIN)} or 'package.module:function'"
        )
    try:
        factory: Factory = import_callable(path, "workload factory make(options)")
    except ModulePathError as exc:
        raise UnknownWorkloadError(str(exc)) from None
    return factory


def make(name: str, options: Mapping[str, Any] | None = None) -> Workload:
    return resolve(name)(dict(options or {}))
