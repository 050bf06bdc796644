"""The Python API, for notebooks and scripts: what the CLI does, as objects and tables.

>>> import scalesweep
>>> study = scalesweep.load("sweeps/smoke.yaml", set={"training.epochs": 2})
>>> study.plan()                  # pandas: `scalesweep plan --json`, one row per trial
>>> result = study.run()          # `scalesweep run`; result.trials, .arms, .curves, .answer
>>> scalesweep.results("smoke")   # the same tables, read back from MLflow
>>> scalesweep.predict("smoke", world_size=8)
>>> scalesweep.recommend("smoke", world_size=8).lr
>>> scalesweep.advise("smoke").recommendation
>>> scalesweep.solve(study, world_size=8).answer

The top of the layers (docs/design.md §3.2): it re-exports the use cases
(scalesweep.orchestrator.usecases), which the CLI's commands call too, so the API and the CLI
are one code path; it imports nothing from the commands, and nothing of ours imports it.
``_calls`` adds a notebook's defaults to the use cases that run a study (``solve``,
``resume``). Nothing here prints: progress goes to the ``scalesweep`` logger (or a
``Progress`` the caller passes). Bad arguments raise ``InputError``
(scalesweep.orchestrator.spec.errors; ``InputError.problems`` name the field, the value and the
rule), before anything starts.
"""

from __future__ import annotations

from scalesweep.api._calls import resume, solve, submit
from scalesweep.orchestrator.spec.errors import InputError
from scalesweep.orchestrator.usecases.advise import advise
from scalesweep.orchestrator.usecases.predict import predict
from scalesweep.orchestrator.usecases.progress import Progress
from scalesweep.orchestrator.usecases.recommend import Recommendation, recommend
from scalesweep.orchestrator.usecases.results import NOT_IN_MLFLOW, Result, results, studies
from scalesweep.orchestrator.usecases.solve import SolveAnswer, Solved
from scalesweep.orchestrator.usecases.study import Study, load

__all__ = [
           "NOT_IN_MLFLOW",
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
]
