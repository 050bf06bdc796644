"""Load one sweep (a parent run and its trial children) from MLflow into pandas.

Reads MLflow only; it knows the logging conventions of docs/design.md §4.5 and nothing of the
orchestrator. ``Study.trials`` has one row per child run; ``Study.history`` has one row per
(run, step) where step is the optimizer update every metric was logged at.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal, cast

import pandas as pd
from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from scalesweep.mlflow_names import (
    BASELINE_TRIAL_PARAM,
    DECISION_CONFIDENCE_PARAM,
    DEV_PREFIX,
    EQUIVALENCE_MARGIN_PARAM,
    PARENT_TAG,
    PROJECTION_PARAM,
    REPLICATES_PARAM,
    ROLE_TAG,
    STATUS_TAG,
    STUDY_RULES_PARAM,
    SUMMARY_METRICS,
    TARGET_BEST_METRIC,
    TARGET_LEVELS_PARAM,
    TARGET_METRIC,
    TARGET_METRIC_PARAM,
    TARGET_MODE_PARAM,
    TARGET_NOTES_PARAM,
    TARGET_SMOOTHING_PARAM,
    TARGET_VALUE_PARAM,
    TRIAL_NAME_TAG,
    VERIFIES_TAG,
    store_uri_for_mlflow,
)
from scalesweep.science.stats.convergence import EvalPoint
from scalesweep.science.stats.decisions import DEFAULT_MARGIN
from scalesweep.science.stats.levels import DEFAULT_LEVELS
from scalesweep.science.stats.replicates import CONFIDENCE
from scalesweep.science.stats.rules import StudyRules

#: The clocks a curve can be read on; the report plots against any of them.
AXIS_METRICS = ("samples_seen", "epoch", "wall_s")
HISTORY_METRICS = ("dev_loss", "train_loss", "lr", "noise_scale", *AXIS_METRICS)
_RUN_STATUS = {"FINISHED": "completed", "FAILED": "failed", "KILLED": "stopped"}


@dataclass(frozen=True)
class Projection:
    """The sweep file's ``projection``: seconds per epoch measured on a real cluster."""

    label: str
    seconds_per_epoch: dict[int, float]  # world size -> seconds


@dataclass(frozen=True)
class Study:
    experiment_name: str
    parent_run_id: str
    parent_run_name: str
    parent_params: dict[str, str]
    #: run_id, run_name, trial_name, status, has_summary, every param (numeric where all
    #: values parse), and the SUMMARY_METRICS (NaN where not logged).
    trials: pd.DataFrame
    #: run_id, trial_name, step, then one column per history metric (NaN where not logged),
    #: for plotting; the clocks are filled in between their logged points.
    history: pd.DataFrame
    #: run_id, key, step, value: every history point exactly as logged, NaN values kept (a
    #: diverged eval is data, not a gap).
    logged: pd.DataFrame

    @property
    def target_metric(self) -> str:
        return self.parent_params.get(TARGET_METRIC_PARAM, "dev_loss")

    @functools.cached_property
    def rules(self) -> StudyRules:
        """How the study's arms are judged: the record its plan logged (``study_rules``), read
        back; a study logged before that record, from its separate params (defaults where a
        still older one logged none). The headline target is :attr:`target_value`'s. Callers
        read its fields (``study.rules.margin``), not copies of them here."""
        raw = self.parent_params.get(STUDY_RULES_PARAM)
        if raw not in (None, "", "None"):
            return StudyRules.from_param(str(raw))
        return _legacy_rules(self.parent_params)

    @property
    def target_value(self) -> float | None:
        raw = self.parent_params.get(TARGET_VALUE_PARAM)
        return None if raw in (None, "", "None") else float(raw)

    @property
    def target_notes(self) -> tuple[str, ...]:
        """How the relative target was set, as the driver logged it (none for older studies)."""
        raw = self.parent_params.get(TARGET_NOTES_PARAM)
        return () if raw in (None, "", "None") else tuple(str(n) for n in json.loads(str(raw)))

    @property
    def baseline_trial(self) -> str | None:
        return self.parent_params.get(BASELINE_TRIAL_PARAM) or None

    @property
    def projection(self) -> Projection | None:
        """The parent's ``projection`` param (JSON), or None when the sweep had none."""
        raw = self.parent_params.get(PROJECTION_PARAM)
        if raw in (None, "", "None", "null"):
            return None
        data = json.loads(str(raw))
        return Projection(
            label=str(data["label"]),
            seconds_per_epoch={int(k): float(v) for k, v in data["seconds_per_epoch"].items()},
        )

    def curve(self, run_id: str, metric: str) -> list[EvalPoint]:
        """The run's evaluations of ``metric`` on every clock (NaN where a clock is missing)."""
        logged = self.logged
        rows = logged[(logged["run_id"] == run_id) & (logged["key"] == metric)]
        clocks = self.history.loc[self.history["run_id"] == run_id]
        clocks = clocks.set_index("step").reindex(columns=list(AXIS_METRICS))
        rows = rows.join(clocks, on="step").sort_values("step")
        return [
            EvalPoint(update=float(r.step), samples_seen=float(r.samples_seen),
                      epoch=float(r.epoch), wall_s=float(r.wall_s), value=float(r.value))
            for r in rows.itertuples()
        ]  # fmt: skip


def _legacy_rules(params: dict[str, str]) -> StudyRules:
    """The rules of a study logged before ``study_rules``, from the params it logged one by
    one (each param is JSON where it is not a plain string)."""
    mode = params.get(TARGET_MODE_PARAM, "min")
    if mode not in ("min", "max"):
        raise ValueError(f"parent param target_mode must be min or max, but got {mode=}")
    levels = params.get(TARGET_LEVELS_PARAM)
    levels_read = (DEFAULT_LEVELS if levels in (None, "", "None")
                   else tuple(float(x) for x in json.loads(levels)))
    return StudyRules(
        confidence=float(params.get(DECISION_CONFIDENCE_PARAM, CONFIDENCE)),
        margin=float(params.get(EQUIVALENCE_MARGIN_PARAM, DEFAULT_MARGIN)),
        levels=levels_read,
        mode=cast(Literal["min", "max"], mode), smoothing=float(params.get(TARGET_SMOOTHING_PARAM, 0.0)),
        headline_level=_headline_level(params, levels_read),
        max_seeds=_replicates_max(params.get(REPLICATES_PARAM)))


def _headline_level(params: dict[str, str], levels: tuple[float, ...]) -> float | None:
    raw = params.get("target_relative_to_baseline")
    if raw in (None, "", "None", "null"):
        return None
    return float(raw) if float(raw) in levels else None


def _replicates_max(raw: str | None) -> int | None:
    if raw in (None, "", "None", "null"):
        return None
    try:
        value = json.loads(str(raw))
    except ValueError:
        return None
    return int(value["max"]) if isinstance(value, dict) and value.get("max") is not None else None


def load_study(
    tracking_uri: str,
    *,
    experiment: str | None = None,
    parent_run_id: str | None = None,
    extra_metrics: Sequence[str] = (),
    max_workers: int = 4,
    skip_verifications: bool = False,
) -> Study:
    """The study of ``parent_run_id``, or of the latest parent run in ``experiment`` (with
    ``skip_verifications``, the latest that is not a ``predict --verify`` sweep's).

    Histories are fetched with one ``get_metric_history`` per metric per run (MLflow has no
    public bulk call for full histories), ``max_workers`` at a time, which is what makes a
    remote tracking server bearable at a hundred trials.
    """
    if (experiment is None) == (parent_run_id is None):
        raise ValueError(
            f"give exactly one of experiment and parent_run_id, but got {experiment=}, {parent_run_id=}"
        )
    if max_workers < 1:
        raise ValueError(f"max_workers must be at least 1, but got {max_workers=}")
    client = MlflowClient(store_uri_for_mlflow(tracking_uri))
    parent = (client.get_run(parent_run_id) if parent_run_id
              else _latest_parent(client, experiment, skip_verifications))
    exp_id = parent.info.experiment_id
    children = [
        run
        for run in _search_all(client, exp_id, f"tags.`{PARENT_TAG}` = '{parent.info.run_id}'")
        if run.data.tags.get(ROLE_TAG, "trial") == "trial"  # untagged children still count
    ]
    wanted = (*HISTORY_METRICS, *extra_metrics)
    jobs = [
        (run.info.run_id, key)
        for run in children
        for key in sorted(run.data.metrics)
        if key in wanted or (key.startswith(DEV_PREFIX) and key not in SUMMARY_METRICS)
    ]
    with ThreadPoolExecutor(max_workers=max_workers) as pool:
        series = list(pool.map(lambda job: _history(client, *job), jobs))
    return Study(
        experiment_name=client.get_experiment(exp_id).name,
        parent_run_id=parent.info.run_id,
        parent_run_name=parent.info.run_name or parent.info.run_id,
        parent_params=dict(parent.data.params),
        trials=_trials_frame(children),
        history=_history_frame(children, jobs, series),
        logged=_logged_frame(jobs, series),
    )


def _search_all(client: MlflowClient, exp_id: str, filter_string: str) -> list[Run]:
    runs: list[Run] = []
    token: str | None = None
    while True:
        page = client.search_runs([exp_id], filter_string, max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


class StudyNotFound(ValueError):
    """An experiment with no study to read: missing, empty, or verification sweeps only."""


def _latest_parent(client: MlflowClient, experiment: str | None,
                   skip_verifications: bool = False) -> Run:
    exp = client.get_experiment_by_name(str(experiment))
    if exp is None:
        raise StudyNotFound(f"no MLflow experiment named {experiment!r}")
    tagged = client.search_runs(
        [exp.experiment_id],
        f"tags.`{ROLE_TAG}` = 'parent'",
        max_results=1 if not skip_verifications else 1000,
        order_by=["attributes.start_time DESC"],
    )
    studies = [r for r in tagged if not (skip_verifications and VERIFIES_TAG in r.data.tags)]
    if studies:
        return studies[0]
    if tagged:
        raise StudyNotFound(f"experiment {experiment!r} has only verification sweeps' parent runs "
                         f"(tagged {VERIFIES_TAG}): name the study's with --run-id")
    # Runs logged before the role tag existed: the newest top-level run.
    top = [r for r in _search_all(client, exp.experiment_id, "") if PARENT_TAG not in r.data.tags]
    if not top:
        raise StudyNotFound(f"experiment {experiment!r} has no parent run")
    return max(top, key=lambda r: r.info.start_time or 0)


def _history(client: MlflowClient, run_id: str, key: str) -> pd.Series:
    points = client.get_metric_history(run_id, key)
    # A step logged twice (a resumed trial) keeps its latest value.
    points = sorted(points, key=lambda m: (m.step, m.timestamp))
    values = {m.step: m.value for m in points}
    return pd.Series(values, name=key, dtype="float64")


def _numeric(column: pd.Series) -> pd.Series:
    """Params come back as strings: integers as Int64, other numbers as float, else unchanged."""
    for kind in ("Int64", "float64"):
        try:
            return column.astype(kind)
        except (ValueError, TypeError):  # "none" as a warmup value stays a string
            continue
    return column


def _trials_frame(children: Iterable[Run]) -> pd.DataFrame:
    rows = []
    for run in children:
        tags, metrics = run.data.tags, run.data.metrics
        row: dict[str, object] = {
            "run_id": run.info.run_id,
            "run_name": run.info.run_name,
            TRIAL_NAME_TAG: tags.get(TRIAL_NAME_TAG) or run.info.run_name,
            STATUS_TAG: tags.get(STATUS_TAG) or _RUN_STATUS.get(run.info.status, "running"),
            "has_summary": any(k in metrics for k in SUMMARY_METRICS),
        }
        row.update(run.data.params)
        for key in SUMMARY_METRICS:
            row[key] = metrics.get(key, math.nan)
        # the target this trial was measured against (one per baseline arm), when logged
        row["trial_target"] = metrics.get(TARGET_METRIC, math.nan)
        # the baseline best it was loosened from (cross-fitted per seed), which the levels use
        row["trial_reference_best"] = metrics.get(TARGET_BEST_METRIC, math.nan)
        rows.append(row)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=["run_id", "run_name", "trial_name", "status", "has_summary"])
    fixed = {"run_id", "run_name", "trial_name", "status", "has_summary", "trial_target",
             "trial_reference_best", *SUMMARY_METRICS}
    for col in frame.columns:
        if col not in fixed:
            frame[col] = _numeric(frame[col])
    return frame


def _history_frame(
    children: Sequence[Run], jobs: Sequence[tuple[str, str]], series: Sequence[pd.Series]
) -> pd.DataFrame:
    names = {run.info.run_id: run.data.tags.get(TRIAL_NAME_TAG) or run.info.run_name for run in children}
    per_run: dict[str, list[pd.Series]] = {}
    for (run_id, _), s in zip(jobs, series, strict=True):
        per_run.setdefault(run_id, []).append(s)
    frames = []
    for run_id, cols in per_run.items():
        wide = pd.concat(cols, axis=1).sort_index()
        wide.index.name = "step"
        # Clocks are monotone counters; filling between their logged points (never beyond)
        # lets a dev eval logged without them still be placed on every x-axis.
        for axis in AXIS_METRICS:
            if axis in wide:
                wide[axis] = wide[axis].interpolate(method="index", limit_area="inside")
        wide = wide.reset_index()
        wide.insert(0, "trial_name", names[run_id])
        wide.insert(0, "run_id", run_id)
        frames.append(wide)
    if not frames:
        return pd.DataFrame(columns=["run_id", "trial_name", "step", *HISTORY_METRICS])
    return pd.concat(frames, ignore_index=True)


def _logged_frame(jobs: Sequence[tuple[str, str]], series: Sequence[pd.Series]) -> pd.DataFrame:
    frames = [
        pd.DataFrame({"run_id": run_id, "key": key, "step": s.index, "value": s.to_numpy()})
        for (run_id, key), s in zip(jobs, series, strict=True)
    ]
    if not frames:
        return pd.DataFrame(columns=["run_id", "key", "step", "value"])
    return pd.concat(frames, ignore_index=True)
