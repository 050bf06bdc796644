"""scalesweep: sweep world size x warmup x lr-scaling rule over Ray Train DDP workers, tracked in
MLflow, and say how fast each setting converges.

The Python API (docs/api.md), the names of this package, each imported on first use (PEP 562),
so that ``import scalesweep`` imports neither torch, Ray, MLflow nor pandas:

>>> import scalesweep
>>> study = scalesweep.load("sweeps/smoke.yaml", set={"training.epochs": 2})
>>> study.plan()                  # a DataFrame, `scalesweep plan --json`
>>> result = study.run()          # `scalesweep run`: result.trials, .arms, .curves, .answer
>>> scalesweep.results("smoke")   # the same Result, read back from MLflow
>>> scalesweep.predict("smoke", world_size=8)
>>> scalesweep.solve(study, world_size=8).answer   # `scalesweep solve --json`'s fields

``scalesweep.workloads`` is the module for workload authors (``Workload``, ``make``, ...).

Layers, imports pointing down only (docs/design.md §3): ``errors`` and ``mlflow_names``;
``science`` (the pure math: schedules, lr and warmup rules, batches, statistics; torch-free);
``trainables`` (worker side: the loop, its world, workloads) and ``workloads`` (its public
face); ``loop_helpers`` and ``adapters`` (users' own loops); ``dashboards`` (MLflow read back
into tables, figures, the report); ``orchestrator`` (driver side: spec, plan, launch,
cluster, tracking, commands, the CLI); ``api`` at the top. One import namespace, so an
environment that installs scalesweep gets no top-level ``orchestrator``, ``trainables`` or
``dashboards`` of ours.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scalesweep import workloads
    from scalesweep.api import (
        InputError,
        Progress,
        Recommendation,
        Result,
        SolveAnswer,
        Solved,
        Study,
        advise,
        load,
        predict,
        recommend,
        results,
        resume,
        solve,
        studies,
        submit,
    )

__all__ = [
    "InputError",
    "Progress",
    "Recommendation",
    "Result",
    "SolveAnswer",
    "Solved",
    "Study",
    "advise",
    "load",
    "predict",
    "recommend",
    "results",
    "resume",
    "solve",
    "studies",
    "submit",
    "workloads",
]

#: each public name -> the module that defines it (imported on first use)
_LAZY = {name: "scalesweep.api" for name in __all__ if name != "workloads"}


def _version() -> str:
    """The installed distribution's version (pyproject.toml's); a source tree that was never
    installed has no metadata, and says so rather than failing."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("scalesweep")
    except PackageNotFoundError:
        return "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":  # on first use: the metadata lookup costs tens of milliseconds
        globals()[name] = _version()
        return globals()[name]
    if name == "workloads":
        return importlib.import_module("scalesweep.workloads")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'scalesweep' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, "__version__"})
