"""The Python API, for notebooks and scripts: what the CLI does, as objects and tables.

>>> import scalesweep
>>> study = scalesweep.load("sweeps/smoke.yaml", set={"training.epochs": 2})
>>> study.plan()                  # pandas: `scalesweep plan --json`, one row per trial
>>> result = study.run()          # `scalesweep run`; result.trials, result.arms
>>> scalesweep.results("smoke")   # the same tables, read back from MLflow
>>> scalesweep.predict("smoke", world_size=8)

The top of the layers (docs/design.md §3.2): it imports the orchestrator and the dashboards,
and nothing of ours imports it; the work is done by the functions the CLI's commands call
(orchestrator/commands/), so the API and the CLI are one code path. Small private modules
behind these names: ``_study`` (load, Study), ``_results`` (Result, results), ``_predict``.
Bad arguments raise ``InputError`` (scalesweep.orchestrator.spec.errors; ``InputError.problems``
name the field, the value and the rule), before anything starts.
"""

from __future__ import annotations

from scalesweep.api._predict import predict
from scalesweep.api._results import NOT_IN_MLFLOW, Result, results
from scalesweep.api._study import Study, load
from scalesweep.orchestrator.spec.errors import InputError

__all__ = ["NOT_IN_MLFLOW", "InputError", "Result", "Study", "load", "predict", "results"]
