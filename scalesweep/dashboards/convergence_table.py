"""The convergence table of a study: one row per trial with its crossings of the target.

Every crossing is located on the run's logged history with
:func:`scalesweep.science.stats.convergence.locate`,
the code the sweep driver runs on the same evals against the same target (the one logged on
the child, else the parent's), so the report, the advice, MLflow and the summary JSON agree by
construction, and each crossing keeps its bracket: ``crossing`` says whether it was
interpolated, met at the first eval (``*_to_target`` empty: only ``*_to_target_hi`` bounds it),
or never met.
"""

from __future__ import annotations

import math

import pandas as pd

from scalesweep.dashboards.mlflow_data import Projection, Study
from scalesweep.science.stats.convergence import (
    Crossing,
    Located,
    best_value,
    locate,
    scaling_efficiency,
    speedup,
)

CROSSING_COLUMNS = (
    "updates_to_target",
    "samples_to_target",
    "epochs_to_target",
    "seconds_to_target",
)
BRACKET_COLUMNS = (
    "updates_to_target_lo", "updates_to_target_hi", "epochs_to_target_lo", "epochs_to_target_hi",
)  # fmt: skip
TABLE_COLUMNS = (
    "trial_name", "arm", "seed", "world_size", "global_batch", "scaling_rule", "warmup_rule",
    "warmup_steps", "warmup_epochs", "peak_lr", "status", "crossing", *CROSSING_COLUMNS,
    *BRACKET_COLUMNS, "speedup_vs_baseline", "speedup_by_epochs", "scaling_efficiency",
    "best_dev_loss", "final_dev_loss", "target", "baseline_arm", "run_id",
)  # fmt: skip
FLOAT_COLUMNS = frozenset(
    (*CROSSING_COLUMNS, *BRACKET_COLUMNS, "speedup_vs_baseline", "scaling_efficiency",
     "best_dev_loss", "final_dev_loss", "target")
)  # fmt: skip
#: epochs_to_target x the projection's seconds per epoch at the trial's world size; present
#: only when the sweep has a projection, right after the measured seconds_to_target
PROJECTED = "projected_seconds_to_target"


def _value(x: object) -> float | None:
    """A table cell as a float, None for anything missing or non-finite."""
    if x is None or x is pd.NA:
        return None
    v = float(x)  # type: ignore[arg-type]
    return v if math.isfinite(v) else None


def trial_target(study: Study, trial: dict[str, object]) -> float | None:
    """The target ``trial`` is measured against: its own logged one, else the study's."""
    own = _value(trial.get("trial_target"))
    return own if own is not None else study.target_value


def locate_trial(study: Study, trial: dict[str, object]) -> Located | None:
    """The trial's crossing located on its logged history; None without a target or evals."""
    target = trial_target(study, trial)
    curve = study.curve(str(trial["run_id"]), study.target_metric)
    if target is None or not curve:
        return None
    return locate(curve, target, study.target_mode, study.target_smoothing)


def convergence_table(study: Study) -> pd.DataFrame:
    """One row per trial, fastest (fewest epochs to target) first, never-reached last."""
    rows = []
    for trial in study.trials.to_dict("records"):
        row = {col: trial.get(col) for col in TABLE_COLUMNS}
        row["arm"] = trial.get("arm") if isinstance(trial.get("arm"), str) else trial["trial_name"]
        row["target"] = trial_target(study, trial)
        where = locate_trial(study, trial)
        row["crossing"] = None if where is None else where.kind
        for col in CROSSING_COLUMNS:
            row[col] = None if where is None or where.crossing is None else getattr(where.crossing, col)
        for col in BRACKET_COLUMNS:
            axis, _, end = col.partition("_to_target_")
            lo_hi = None if where is None else where.bracket(axis)  # type: ignore[arg-type]
            row[col] = None if lo_hi is None else lo_hi[0 if end == "lo" else 1]
        if row["crossing"] != "interpolated":  # a bound or never: no point speedup
            row["speedup_vs_baseline"] = row["scaling_efficiency"] = None
        # Losses missing from MLflow (no summary, or a diverged final) come from the history.
        losses = [p.value for p in study.curve(trial["run_id"], "dev_loss")]
        if _value(row["best_dev_loss"]) is None:
            row["best_dev_loss"] = best_value(losses, "min")
        if _value(row["final_dev_loss"]) is None:
            row["final_dev_loss"] = losses[-1] if losses else None
        rows.append({k: _value(v) if k in FLOAT_COLUMNS else v for k, v in row.items()})
    table = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    _fill_speedups(table, study.baseline_trial)
    projection = study.projection
    if projection is not None:
        table.insert(table.columns.get_loc("seconds_to_target") + 1, PROJECTED,
                     projected_seconds(table, projection))
    table = table.sort_values(["epochs_to_target", "trial_name"], na_position="last")
    return table.reset_index(drop=True)


def projected_seconds(table: pd.DataFrame, projection: Projection) -> pd.Series:
    """epochs_to_target x seconds per epoch at the row's world size; NaN where the trial never
    reached the target or the projection has no timing for its world size."""
    values = []
    for _, row in table.iterrows():
        epochs, ws = _value(row["epochs_to_target"]), _value(row["world_size"])
        per_epoch = None if ws is None else projection.seconds_per_epoch.get(int(ws))
        values.append(math.nan if epochs is None or per_epoch is None else epochs * per_epoch)
    return pd.Series(values, index=table.index, dtype="float64")


def _crossing(row: pd.Series) -> Crossing | None:
    """The row's crossing; None if it never reached (a clock not logged reads NaN)."""
    if _value(row["updates_to_target"]) is None:
        return None
    values = [_value(row[c]) for c in CROSSING_COLUMNS]
    return Crossing(*(math.nan if v is None else v for v in values))


def _baseline_row(table: pd.DataFrame, row: pd.Series, baseline_trial: str | None) -> pd.Series | None:
    """The row's baseline: the same seed of its baseline arm, else the study's baseline trial."""
    arm = row.get("baseline_arm")
    if isinstance(arm, str) and arm:
        same = table[(table["arm"] == arm) & (table["seed"] == row["seed"])]
        if not same.empty:
            return same.iloc[0]
    rows = table[table["trial_name"] == baseline_trial]
    return None if rows.empty else rows.iloc[0]


def _fill_speedups(table: pd.DataFrame, baseline_trial: str | None) -> None:
    """Speedup (updates) and efficiency where not logged; the epochs speedup for every trial,
    each against the same seed of its baseline arm."""
    by_epochs, up, eff = [], [], []
    for _, row in table.iterrows():
        base = _baseline_row(table, row, baseline_trial)
        base_crossing = None if base is None else _crossing(base)
        crossing = _crossing(row)
        by_epochs.append(speedup(crossing, base_crossing, "epochs"))
        s = _value(row["speedup_vs_baseline"])
        up.append(s if s is not None else speedup(crossing, base_crossing, "updates"))
        e = _value(row["scaling_efficiency"])
        b, b0 = _value(row["global_batch"]), None if base is None else _value(base["global_batch"])
        if e is None and b and b0:
            e = scaling_efficiency(up[-1], b, b0)
        eff.append(e)
    table["speedup_by_epochs"] = pd.Series(by_epochs, index=table.index, dtype="float64")
    table["speedup_vs_baseline"] = pd.Series(up, index=table.index, dtype="float64")
    table["scaling_efficiency"] = pd.Series(eff, index=table.index, dtype="float64")
