"""``Result``: a study's trials and arms as tables, from a run (``Study.run``) or read back from
MLflow (:func:`results`, with the readers ``scalesweep report`` uses)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scalesweep.mlflow_names import ERROR_TAG, STATUS_TAG, TRIAL_NAME_TAG
from scalesweep.orchestrator.spec.errors import InputError, Problem

if TYPE_CHECKING:
    import pandas as pd

    from scalesweep.orchestrator.launch.run import Outcome

#: the plan fields of a trial's row that its MLflow run does not hold: ``results`` gives None
#: (``feasible`` is True and ``reason`` None there: a trial that ran was feasible; ``same_as``,
#: which the summary JSON has for merged trials only, is not a column)
NOT_IN_MLFLOW = ("epochs", "axes", "notes")


@dataclass(frozen=True, eq=False)
class Result:
    """A study's outcome: ``trials``, one row per trial with the summary JSON's fields
    (docs/design.md §4.4), and ``arms``, one row per arm with arms.json's (seeds aggregated,
    each arm against the baseline arm).

    From ``Study.run`` the tables are the run's own summary JSON and arms.json, in plan order,
    with ``report_dir`` and ``sweep_dir`` set. From :func:`results` they are computed from MLflow
    by the code the report runs, fastest trial first; a run's params hold neither ``epochs``,
    ``axes`` nor ``notes`` (None there, see ``NOT_IN_MLFLOW``) nor ``same_as`` (no column), and
    ``warmup_epochs`` rounded to 6 digits. Its ``arms`` is the report's arms.json: an arm's
    ``axes`` add the derived settings (global batch, warmup steps, peak lr, ramp) to the run's,
    and ``target_notes`` lack the driver's notes on how the target was set.

    >>> result.trials[["name", "status", "epochs_to_target", "speedup_vs_baseline"]]
    >>> result.arms[["arm", "epochs_to_target_median", "decision"]]
    """

    #: the MLflow experiment (the study's name) and its parent run
    experiment: str
    parent_run_id: str
    tracking_uri: str
    trials: pd.DataFrame = field(repr=False)
    arms: pd.DataFrame = field(repr=False)
    #: where the report was written (reports/<study>/), None when none was made
    report_dir: Path | None = None
    #: the sweep's directory (state, summary.json, arms.json; `scalesweep resume` takes it)
    sweep_dir: Path | None = None

    @property
    def failed(self) -> list[str]:
        """The trials that failed (``scalesweep run`` exits 1 when there is one)."""
        if self.trials.empty:
            return []
        return [str(n) for n in self.trials.loc[self.trials[STATUS_TAG] == "failed", "name"]]


def from_outcome(outcome: Outcome, report_dir: Path | None) -> Result:
    """A run's result: its summary JSON and arms.json as tables (the objects its files hold)."""
    return Result(experiment=outcome.experiment, parent_run_id=outcome.parent_run_id,
                  tracking_uri=outcome.tracking_uri, trials=frame(outcome.trials),
                  arms=frame([a.as_json() for a in outcome.arms]),
                  report_dir=None if report_dir is None else report_dir.resolve(),
                  sweep_dir=outcome.sweep_dir)


def results(experiment: str | None = None, *, run_id: str | None = None,
            tracking_uri: str | None = None) -> Result:
    """A finished study read back from MLflow: the latest study of ``experiment`` (verification
    sweeps of ``predict --verify`` passed over), or the one of parent run ``run_id``.
    ``tracking_uri``: else ``MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db``, as the CLI.

    Each trial's summary is recomputed from its logged evals and the arms from those summaries,
    by the code ``scalesweep report`` runs (scalesweep.dashboards), which is the code the driver
    ran at the end of the sweep: the same values as its summary JSON and arms.json.

    >>> result = scalesweep.results("smoke", tracking_uri="sqlite:///mlflow.db")
    >>> result.arms.set_index("arm")["epochs_ratio_vs_baseline_median"]
    """
    from scalesweep.orchestrator.commands._common import tracking_uri as resolve_uri

    for name, value in (("experiment", experiment), ("run_id", run_id), ("tracking_uri", tracking_uri)):
        if value is not None and (not isinstance(value, str) or not value):
            raise InputError("scalesweep.results", [Problem(name, value, "must be a non-empty string")])
    if (experiment is None) == (run_id is None):
        raise InputError("scalesweep.results", [Problem("experiment", experiment,
                                                        f"give exactly one of experiment and run_id "
                                                        f"(run_id={run_id!r})")])
    return _read_back(resolve_uri(tracking_uri), experiment, run_id)


def _read_back(uri: str, experiment: str | None, run_id: str | None) -> Result:
    from mlflow.exceptions import MlflowException

    # what `scalesweep report` reads and computes (dashboards/report.py, build_report)
    from scalesweep.dashboards.arms_table import arm_summaries
    from scalesweep.dashboards.convergence_table import study_trials
    from scalesweep.dashboards.mlflow_data import load_study

    try:
        study = load_study(uri, experiment=experiment, parent_run_id=run_id)
    except MlflowException as e:
        if run_id is None or getattr(e, "error_code", "") != "RESOURCE_DOES_NOT_EXIST":
            raise
        raise InputError("scalesweep.results", [Problem("run_id", run_id, f"no such MLflow run at "
                                                        f"{uri}")]) from None
    except ValueError as e:  # StudyNotFound: no such experiment, or no study in it
        raise InputError("scalesweep.results", [Problem("experiment", experiment,
                                                        f"{e} (at {uri})")]) from None
    trials = study_trials(study)
    arms = arm_summaries(study, trials)
    errors = _errors(uri, [t.run for t in trials])
    rows = [_trial_row(t.run, t.summary.arm, t.summary.as_json(), errors) for t in trials]
    return Result(experiment=study.experiment_name, parent_run_id=study.parent_run_id,
                  tracking_uri=uri, trials=frame(rows), arms=frame([a.as_json() for a in arms]))


def _trial_row(run: Mapping[str, Any], arm: str, summary: Mapping[str, Any],
               errors: Mapping[str, str]) -> dict[str, Any]:
    """A trial's summary JSON object, from what its run holds: params, tags and the summary."""
    from scalesweep.orchestrator.plan.rows import PLAN_FIELDS

    row: dict[str, Any] = {f: _param(run.get(f)) for f in PLAN_FIELDS}
    run_id = str(run["run_id"])
    row.update(name=run[TRIAL_NAME_TAG], arm=arm, feasible=True, reason=None,
               lr=_param(run.get("lr")))
    row.update(dict.fromkeys(NOT_IN_MLFLOW))
    row.update({STATUS_TAG: run[STATUS_TAG], "mlflow_run_id": run_id, **summary,
                ERROR_TAG: errors.get(run_id)})
    return row


def _errors(uri: str, runs: list[Mapping[str, Any]]) -> dict[str, str]:
    """The error tag of each failed trial's run (the study's table holds no error)."""
    failed = [str(r["run_id"]) for r in runs if r.get(STATUS_TAG) == "failed"]
    if not failed:
        return {}
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    tags = {run_id: client.get_run(run_id).data.tags.get(ERROR_TAG) for run_id in failed}
    return {k: v for k, v in tags.items() if v}


def _param(value: Any) -> Any:
    """A param as the plan wrote it: numbers as numbers, None for one not logged."""
    import pandas as pd

    if value is None or (not isinstance(value, str) and bool(pd.isna(value))):
        return None
    if hasattr(value, "item"):  # numpy and pandas scalars
        value = value.item()
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return value
        return parsed if isinstance(parsed, int | float) and not isinstance(parsed, bool) else value
    return value


def frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    """The records as a JSON file holds them (JSON's values: tuples as lists, keys as strings),
    one row each: the summary JSON, arms.json, ``plan --json``."""
    import pandas as pd

    return pd.DataFrame(json.loads(json.dumps(records, default=str)))
