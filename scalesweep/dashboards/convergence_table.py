"""The convergence table of a study: one row per trial with its crossings of the target.

Each trial's summary is :func:`scalesweep.science.stats.trial_summary.summarize_trial` on the
run's logged history, the code the sweep driver runs on the same evals against the same target
(the one logged on the child, else the parent's), so the report, the advice, MLflow and the
summary JSON agree by construction, and each crossing keeps its bracket: ``crossing`` says
whether it was interpolated, met at the first eval (``*_to_target`` empty: only
``*_to_target_hi`` bounds it), or never met. The table is the report's output edge: params
and tags of each run beside its summary.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from scalesweep.dashboards.mlflow_data import Projection, Study
from scalesweep.mlflow_names import (
    ARM_PARAM,
    BASELINE_ARM_PARAM,
    BEST_DEV_LOSS_METRIC,
    BRACKETS,
    CROSSING_TAG,
    EPOCHS_TO_TARGET_METRIC,
    FINAL_DEV_LOSS_METRIC,
    SAMPLES_TO_TARGET_METRIC,
    SCALING_EFFICIENCY_METRIC,
    SECONDS_TO_TARGET_METRIC,
    SPEEDUP_METRIC,
    STATUS_TAG,
    TRAIN_SECONDS_METRIC,
    TRIAL_NAME_TAG,
    UPDATES_TO_TARGET_METRIC,
)
from scalesweep.science.stats.trial_summary import Reading, TrialEvals, TrialSummary, summarize_trial

CROSSING_COLUMNS = (UPDATES_TO_TARGET_METRIC, SAMPLES_TO_TARGET_METRIC, EPOCHS_TO_TARGET_METRIC,
                    SECONDS_TO_TARGET_METRIC)
BRACKET_COLUMNS = BRACKETS
#: the speedups and efficiency; float columns even where no trial has one
SPEEDUP_COLUMNS = (SPEEDUP_METRIC, "speedup_by_epochs", SCALING_EFFICIENCY_METRIC)
#: the columns that come from the trial's summary, each its attribute of the same name
SUMMARY_COLUMNS = (CROSSING_TAG, *CROSSING_COLUMNS, *BRACKET_COLUMNS, *SPEEDUP_COLUMNS,
                   BEST_DEV_LOSS_METRIC, FINAL_DEV_LOSS_METRIC)
#: the target column is the summary's target_value
TARGET_COLUMN = "target"
TABLE_COLUMNS = (
    TRIAL_NAME_TAG, ARM_PARAM, "seed", "world_size", "global_batch", "scaling_rule", "warmup_rule",
    "warmup_steps", "warmup_epochs", "peak_lr", STATUS_TAG, CROSSING_TAG, *CROSSING_COLUMNS,
    *BRACKET_COLUMNS, *SPEEDUP_COLUMNS, BEST_DEV_LOSS_METRIC, FINAL_DEV_LOSS_METRIC, TARGET_COLUMN,
    BASELINE_ARM_PARAM, "run_id",
)  # fmt: skip
FLOAT_COLUMNS = frozenset((*CROSSING_COLUMNS, *BRACKET_COLUMNS, SPEEDUP_METRIC, SCALING_EFFICIENCY_METRIC,
                           BEST_DEV_LOSS_METRIC, FINAL_DEV_LOSS_METRIC, TARGET_COLUMN))
#: epochs_to_target x the projection's seconds per epoch at the trial's world size; present
#: only when the sweep has a projection, right after the measured seconds_to_target
PROJECTED = "projected_seconds_to_target"


@dataclass(frozen=True)
class StudyTrial:
    """One child run: its params and tags as the study holds them, and its summary."""

    run: Mapping[str, object]
    summary: TrialSummary

    @property
    def run_id(self) -> str:
        return str(self.run["run_id"])


def _value(x: object) -> float | None:
    """A table cell as a float, None for anything missing or non-finite."""
    if x is None or x is pd.NA:
        return None
    v = float(x)  # type: ignore[arg-type]
    return v if math.isfinite(v) else None


def trial_target(study: Study, trial: Mapping[str, object]) -> float | None:
    """The target ``trial`` is measured against: its own logged one, else the study's."""
    own = _value(trial.get("trial_target"))
    return own if own is not None else study.target_value


def trial_evals(study: Study, trial: Mapping[str, object]) -> TrialEvals:
    """What the run logged: its evals of the target metric and its dev losses."""
    run_id = str(trial["run_id"])
    arm, seed = trial.get(ARM_PARAM), trial.get("seed")
    return TrialEvals(
        name=str(trial[TRIAL_NAME_TAG]),
        arm=arm if isinstance(arm, str) else str(trial[TRIAL_NAME_TAG]),  # runs before arms: itself
        seed=int(seed) if pd.notna(seed) else 0,  # type: ignore[call-overload]
        global_batch=_value(trial.get("global_batch")),
        curve=tuple(study.curve(run_id, study.target_metric)),
        dev_loss=tuple(p.value for p in study.curve(run_id, "dev_loss")),
        train_seconds=_value(trial.get(TRAIN_SECONDS_METRIC)),
    )


def _baseline(trial: Mapping[str, object], runs: Sequence[Mapping[str, object]],
              baseline_trial: str | None) -> Mapping[str, object] | None:
    """The trial's baseline: the same seed of its baseline arm, else the study's baseline
    trial (runs logged before arms had a baseline_arm param)."""
    arm, seed = trial.get(BASELINE_ARM_PARAM), trial.get("seed")
    if isinstance(arm, str) and arm and pd.notna(seed):
        same = [r for r in runs if _arm(r) == arm and pd.notna(r.get("seed")) and r.get("seed") == seed]
        if same:
            return same[0]
    return next((r for r in runs if r.get(TRIAL_NAME_TAG) == baseline_trial), None)


def _arm(trial: Mapping[str, object]) -> str:
    arm = trial.get(ARM_PARAM)
    return arm if isinstance(arm, str) else str(trial[TRIAL_NAME_TAG])


def _fastest_first(t: StudyTrial) -> tuple[bool, float, str]:
    epochs = _value(t.summary.epochs_to_target)
    return epochs is None, 0.0 if epochs is None else epochs, t.summary.name


def study_trials(study: Study) -> list[StudyTrial]:
    """Every trial of the study with its summary, fastest (fewest epochs to target) first,
    never-reached last."""
    runs = study.trials.to_dict("records")
    evals = {str(r["run_id"]): trial_evals(study, r) for r in runs}
    reading = Reading(study.rules.mode, study.rules.smoothing)
    out = []
    for run in runs:
        base = _baseline(run, runs, study.baseline_trial)
        summary = summarize_trial(evals[str(run["run_id"])], trial_target(study, run),
                                  None if base is None else evals[str(base["run_id"])], reading,
                                  _value(run.get("trial_reference_best")))
        out.append(StudyTrial(run, summary))
    return sorted(out, key=_fastest_first)


def convergence_table(study: Study, trials: Sequence[StudyTrial] | None = None) -> pd.DataFrame:
    """One row per trial, in the order of :func:`study_trials`; ``trials``: those, if the
    caller has them already."""
    rows = []
    for t in study_trials(study) if trials is None else trials:
        row = {col: t.run.get(col) for col in TABLE_COLUMNS}
        row.update({col: getattr(t.summary, col) for col in SUMMARY_COLUMNS})
        row[ARM_PARAM], row[TARGET_COLUMN] = t.summary.arm, t.summary.target_value
        rows.append({k: _value(v) if k in FLOAT_COLUMNS else v for k, v in row.items()})
    table = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    for col in SPEEDUP_COLUMNS:
        table[col] = pd.Series(table[col].tolist(), index=table.index, dtype="float64")
    projection = study.projection
    if projection is not None:
        table.insert(table.columns.get_loc(SECONDS_TO_TARGET_METRIC) + 1, PROJECTED,
                     projected_seconds(table, projection))
    return table


def projected_seconds(table: pd.DataFrame, projection: Projection) -> pd.Series:
    """epochs_to_target x seconds per epoch at the row's world size; NaN where the trial never
    reached the target or the projection has no timing for its world size."""
    values = []
    for _, row in table.iterrows():
        epochs, ws = _value(row[EPOCHS_TO_TARGET_METRIC]), _value(row["world_size"])
        per_epoch = None if ws is None else projection.seconds_per_epoch.get(int(ws))
        values.append(math.nan if epochs is None or per_epoch is None else epochs * per_epoch)
    return pd.Series(values, index=table.index, dtype="float64")
