"""``Result``: a study's trials, arms and curves as tables, from a run or read back from MLflow
(:func:`results`, with the readers ``scalesweep report`` uses); :func:`studies`, the studies a
tracking store holds."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from scalesweep.mlflow_names import (
    ARM_PARAM,
    DESCRIPTION_TAG,
    ERROR_TAG,
    STATUS_TAG,
    TRIAL_NAME_TAG,
    store_uri_for_mlflow,
)
from scalesweep.orchestrator.spec.errors import InputError, Problem
from scalesweep.orchestrator.usecases.defaults import keyword
from scalesweep.orchestrator.usecases.tables import frame

if TYPE_CHECKING:
    import pandas as pd

    from scalesweep.dashboards.convergence_table import StudyTrial
    from scalesweep.dashboards.mlflow_data import Study as LoggedStudy
    from scalesweep.orchestrator.launch.run import Outcome

#: the plan fields of a trial's row that its MLflow run does not hold: ``results`` gives None
#: (``feasible`` is True and ``reason`` None there: a trial that ran was feasible; ``same_as``,
#: which the summary JSON has for merged trials only, is not a column)
NOT_IN_MLFLOW = ("epochs", "axes", "notes")
#: the first columns of ``Result.curves``, in order; every other logged metric follows
CURVE_COLUMNS = ("trial", "arm", "seed", "world_size", "update", "epoch", "samples_seen",
                 "dev_loss", "lr", "train_loss", "wall_s")
#: the decisions ``Result.answer`` keeps: an arm decided against the baseline
DECIDED = ("faster", "slower", "equivalent")
#: ``Result.answer``'s columns, from arms.json's
ANSWER_COLUMNS = ("arm", "decision", "epochs_ratio_vs_baseline_median",
                  "epochs_ratio_vs_baseline_median_kind", "epochs_ratio_vs_baseline_lower_bound",
                  "epochs_ratio_vs_baseline_ci", "confidence", "decision_at_every_level", "n_seeds")
Blocks = Literal["latest", "all"]


@dataclass(frozen=True, eq=False)
class Result:
    """A study's outcome: ``trials``, one row per trial with the summary JSON's fields
    (docs/design.md §4.4); ``arms``, one row per arm with arms.json's (seeds aggregated, each
    arm against the baseline arm); ``curves``, one row per trial and eval; ``answer``, the arms
    decided against the baseline with their intervals.

    From ``Study.run`` the tables are the run's own summary JSON and arms.json, in plan order,
    with ``report_dir`` and ``sweep_dir`` set. From :func:`results` they are computed from MLflow
    by the code the report runs, fastest trial first; a run's params hold neither ``epochs``,
    ``axes`` nor ``notes`` (None there, see ``NOT_IN_MLFLOW``) nor ``same_as`` (no column), and
    ``warmup_epochs`` rounded to 6 digits. Its ``arms`` is the report's arms.json: an arm's
    ``axes`` add the derived settings (global batch, warmup steps, peak lr, ramp) to the run's,
    and ``target_notes`` lack the driver's notes on how the target was set. Read with
    ``blocks="all"``, every table holds every parent run of the study (seed blocks,
    verifications), its first column ``parent_run_id`` naming each row's.

    >>> result.trials[["name", "status", "epochs_to_target", "speedup_vs_baseline"]]
    >>> result.arms[["arm", "epochs_to_target_median", "decision"]]
    """

    #: the MLflow experiment (the study's name) and its (latest) parent run
    experiment: str
    parent_run_id: str
    tracking_uri: str
    trials: pd.DataFrame = field(repr=False)
    arms: pd.DataFrame = field(repr=False)
    #: where the report was written (reports/<study>/), None when none was made
    report_dir: Path | None = None
    #: the sweep's directory (state, summary.json, arms.json; `scalesweep resume` takes it)
    sweep_dir: Path | None = None
    #: every parent run the tables hold, oldest first (one unless read with blocks="all")
    parent_run_ids: tuple[str, ...] = ()
    _curves: list[pd.DataFrame] = field(default_factory=list, repr=False)

    @property
    def failed(self) -> list[str]:
        """The trials that failed (``scalesweep run`` exits 1 when there is one)."""
        if self.trials.empty:
            return []
        return [str(n) for n in self.trials.loc[self.trials[STATUS_TAG] == "failed", "name"]]

    @property
    def curves(self) -> pd.DataFrame:
        """One row per trial and eval, as MLflow holds them: ``trial``, ``arm``, ``seed``,
        ``world_size``, ``update`` (the optimizer update the eval was logged at), ``epoch``,
        ``samples_seen``, ``dev_loss``, ``lr``, ``train_loss``, ``wall_s``, then any other
        metric the trials logged (``dev_<name>``, ``noise_scale``) and ``run_id``. An eval is a
        step at which the study's target metric was logged; a diverged eval is NaN, not left
        out. Read from MLflow on first use."""
        if not self._curves:  # a run's Result: its parent run read back once, in its trials' order
            curves = _read_curves(self.tracking_uri, self.parent_run_ids or (self.parent_run_id,),
                                  len(self.parent_run_ids) > 1)
            rank = {name: i for i, name in enumerate(self.trials.get("name", []))}
            self._curves.append(curves.sort_values(["trial", "update"], key=lambda c: c.map(rank)
                                                   if c.name == "trial" else c, kind="stable",
                                                   ignore_index=True))
        return self._curves[0]

    @property
    def answer(self) -> pd.DataFrame:
        """The arms decided against the baseline (faster, slower, equivalent at the headline
        target), each with its paired epochs ratio's estimate (or the bound it is known to be
        at least), its interval and the confidence it was read at."""
        arms = self.arms
        if arms.empty or "decision" not in arms:
            return arms.iloc[0:0]
        columns = [c for c in ("parent_run_id", *ANSWER_COLUMNS) if c in arms.columns]
        return arms.loc[arms["decision"].isin(DECIDED), columns].reset_index(drop=True)


def from_outcome(outcome: Outcome, report_dir: Path | None) -> Result:
    """A run's result: its summary JSON and arms.json as tables (the objects its files hold)."""
    return Result(experiment=outcome.experiment, parent_run_id=outcome.parent_run_id,
                  tracking_uri=outcome.tracking_uri, trials=frame(outcome.trials),
                  arms=frame([a.as_json() for a in outcome.arms]),
                  report_dir=None if report_dir is None else report_dir.resolve(),
                  sweep_dir=outcome.sweep_dir, parent_run_ids=(outcome.parent_run_id,))


def results(experiment: str | None = None, *, run_id: str | None = None,
            tracking_uri: str | None = None, blocks: Blocks = "latest") -> Result:
    """A finished study read back from MLflow: the latest study of ``experiment`` (verification
    sweeps of ``predict --verify`` passed over), or the one of parent run ``run_id``; with
    ``blocks="all"``, every parent run of ``experiment`` (seed blocks, resumed sweeps, the
    verifications of ``predict --verify`` and ``solve``), oldest first, as one set of tables.
    ``tracking_uri``: else ``MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db``, as the CLI.

    Each trial's summary is recomputed from its logged evals and the arms from those summaries,
    by the code ``scalesweep report`` runs (scalesweep.dashboards), which is the code the driver
    ran at the end of the sweep: the same values as its summary JSON and arms.json.

    >>> result = scalesweep.results("smoke", tracking_uri="sqlite:///mlflow.db")
    >>> result.arms.set_index("arm")["epochs_ratio_vs_baseline_median"]
    """
    from scalesweep.orchestrator.usecases.defaults import tracking_uri_of
    from scalesweep.orchestrator.usecases.stores import check_readable

    for name, value in (("experiment", experiment), ("run_id", run_id), ("tracking_uri", tracking_uri)):
        if value is not None and (not isinstance(value, str) or not value):
            raise InputError("scalesweep.results", [Problem(name, value, "must be a non-empty string")])
    if (experiment is None) == (run_id is None):
        raise InputError("scalesweep.results", [Problem("experiment", experiment,
                                                        f"give exactly one of experiment and run_id "
                                                        f"(run_id={run_id!r})")])
    if blocks not in ("latest", "all") or (blocks == "all" and experiment is None):
        raise InputError("scalesweep.results", [Problem("blocks", blocks, "must be 'latest' or "
                                                        "'all' ('all' with an experiment: its "
                                                        "every parent run)")])
    uri = tracking_uri_of(tracking_uri)
    check_readable(uri)
    if blocks == "latest":
        return _read_back(uri, experiment, run_id)
    assert experiment is not None
    return _all_blocks(uri, experiment)


def studies(tracking_uri: str | None = None) -> pd.DataFrame:
    """The studies a tracking store holds: one row per MLflow experiment with a study's parent
    run, ``experiment``, ``parent_runs`` (how many: seed blocks, verifications),
    ``latest_parent_run_id``, ``latest_start`` (UTC) and ``description``, newest first."""
    import pandas as pd
    from mlflow.tracking import MlflowClient

    from scalesweep.orchestrator.usecases.defaults import tracking_uri_of
    from scalesweep.orchestrator.usecases.stores import check_readable

    if tracking_uri is not None and (not isinstance(tracking_uri, str) or not tracking_uri):
        raise InputError("scalesweep.studies", [Problem("tracking_uri", tracking_uri,
                                                        "must be a non-empty string")])
    uri = tracking_uri_of(tracking_uri)
    check_readable(uri)
    client = MlflowClient(store_uri_for_mlflow(uri))
    rows = []
    for exp in client.search_experiments():
        parents = _parent_runs(client, exp.experiment_id)
        if parents:
            latest = parents[-1]
            rows.append({"experiment": exp.name, "parent_runs": len(parents),
                         "latest_parent_run_id": latest.info.run_id,
                         "latest_start": pd.Timestamp(latest.info.start_time, unit="ms", tz="UTC"),
                         "description": latest.data.tags.get(DESCRIPTION_TAG)})
    table = pd.DataFrame(rows, columns=["experiment", "parent_runs", "latest_parent_run_id",
                                        "latest_start", "description"])
    return table.sort_values("latest_start", ascending=False, ignore_index=True)


def _parent_runs(client: Any, experiment_id: str) -> list[Any]:
    """The experiment's parent runs (a sweep's, tagged so), oldest first."""
    from scalesweep.mlflow_names import ROLE_TAG

    runs: list[Any] = []
    token: str | None = None
    while True:
        page = client.search_runs([experiment_id], f"tags.`{ROLE_TAG}` = 'parent'", max_results=1000,
                                  order_by=["attributes.start_time ASC"], page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _load(uri: str, experiment: str | None, run_id: str | None) -> LoggedStudy:
    from scalesweep.dashboards.mlflow_data import load_study

    with study_lookup("scalesweep.results", uri, experiment=experiment, run_id=run_id,
                      spell=keyword):
        return load_study(uri, experiment=experiment, parent_run_id=run_id)
    raise AssertionError("unreachable")  # mypy: the with block returns or raises


def _tables(uri: str, study: LoggedStudy) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """A logged study's trials, arms and curves, as ``scalesweep report`` computes them."""
    from scalesweep.dashboards.arms_table import arm_summaries
    from scalesweep.dashboards.convergence_table import study_trials

    trials = study_trials(study)
    arms = arm_summaries(study, trials)
    errors = _errors(uri, [t.run for t in trials])
    rows = [_trial_row(t.run, t.summary.arm, t.summary.as_json(), errors) for t in trials]
    return frame(rows), frame([a.as_json() for a in arms]), _curves_of(study, trials)


def _read_back(uri: str, experiment: str | None, run_id: str | None) -> Result:
    study = _load(uri, experiment, run_id)
    trials, arms, curves = _tables(uri, study)
    return Result(experiment=study.experiment_name, parent_run_id=study.parent_run_id,
                  tracking_uri=uri, trials=trials, arms=arms,
                  parent_run_ids=(study.parent_run_id,), _curves=[curves])


def _all_blocks(uri: str, experiment: str) -> Result:
    """Every parent run of ``experiment``, oldest first, its tables stacked under a first
    column ``parent_run_id``."""
    import pandas as pd
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store_uri_for_mlflow(uri))
    exp = client.get_experiment_by_name(experiment)
    parents = [] if exp is None else _parent_runs(client, exp.experiment_id)
    if not parents:
        _load(uri, experiment, None)  # names the experiment's problem as blocks="latest" does
        raise InputError("scalesweep.results", [Problem("experiment", experiment, f"has no parent "
                                                        f"run tagged as a study's (at {uri})")])
    ids = tuple(str(p.info.run_id) for p in parents)
    stacked: list[list[pd.DataFrame]] = [[], [], []]
    for pid in ids:
        for tables, table in zip(stacked, _tables(uri, _load(uri, None, pid)), strict=True):
            tables.append(table.assign(parent_run_id=pid)[["parent_run_id", *table.columns]])
    trials, arms, curves = (pd.concat(t, ignore_index=True) for t in stacked)
    return Result(experiment=experiment, parent_run_id=ids[-1], tracking_uri=uri, trials=trials,
                  arms=arms, parent_run_ids=ids, _curves=[curves])


def _read_curves(uri: str, parent_run_ids: tuple[str, ...], stacked: bool) -> pd.DataFrame:
    import pandas as pd

    from scalesweep.dashboards.convergence_table import study_trials

    tables = []
    for pid in parent_run_ids:
        study = _load(uri, None, pid)
        curves = _curves_of(study, study_trials(study))
        tables.append(curves.assign(parent_run_id=pid)[["parent_run_id", *curves.columns]]
                      if stacked else curves)
    return pd.concat(tables, ignore_index=True)


def _curves_of(study: LoggedStudy, trials: list[StudyTrial]) -> pd.DataFrame:
    """``Result.curves`` of one logged study: its history at the steps its target metric was
    logged, each row named by its trial, arm, seed and world size, trials in ``trials``' order."""
    import pandas as pd

    logged = study.logged
    evals = logged.loc[logged["key"] == study.target_metric, ["run_id", "step"]].drop_duplicates()
    history = study.history.merge(evals, on=["run_id", "step"], how="inner")
    order = {t.run_id: i for i, t in enumerate(trials)}
    names = pd.DataFrame([{"run_id": t.run_id, "trial": t.summary.name, ARM_PARAM: t.summary.arm,
                           "seed": _param(t.run.get("seed")), "world_size": _param(t.run.get("world_size"))}
                          for t in trials], columns=["run_id", "trial", "arm", "seed", "world_size"])
    curves = names.merge(history.drop(columns=[TRIAL_NAME_TAG]), on="run_id", how="inner")
    curves = curves.rename(columns={"step": "update"})
    curves["_order"] = curves["run_id"].map(order)
    curves = curves.sort_values(["_order", "update"], ignore_index=True).drop(columns="_order")
    for column in CURVE_COLUMNS:
        if column not in curves:
            curves[column] = float("nan")
    rest = [c for c in curves.columns if c not in CURVE_COLUMNS and c != "run_id"]
    return curves[[*CURVE_COLUMNS, *rest, "run_id"]]


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

    client = MlflowClient(store_uri_for_mlflow(uri))
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


@contextlib.contextmanager
def study_lookup(command: str, uri: str, *, experiment: str | None, run_id: str | None,
                 spell: Callable[[str], str]) -> Iterator[None]:
    """A study read from MLflow by ``experiment`` or parent ``run_id``, from a store the caller
    checked is there (``stores.check_readable``: a read never creates one): a missing study or
    run is an ``InputError`` naming the argument as ``spell`` writes it and the studies the
    store holds (exit 2), not a traceback."""
    from mlflow.exceptions import MlflowException

    from scalesweep.dashboards.mlflow_data import StudyNotFound
    from scalesweep.orchestrator.usecases.stores import held_hint

    try:
        yield
    except StudyNotFound as e:
        raise InputError(command, [Problem(spell("experiment"), experiment,
                                           f"{e} (at {uri}); {held_hint(uri)}")]) from None
    except MlflowException as e:
        if run_id is None or getattr(e, "error_code", "") != "RESOURCE_DOES_NOT_EXIST":
            raise
        raise InputError(command, [Problem(spell("run_id"), run_id,
                                           f"no such MLflow run at {uri}")]) from None
