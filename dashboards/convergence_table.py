"""The convergence table of a study: one row per trial with its crossings of the target.

The ``*_to_target`` numbers come from the child runs' summary metrics whenever a run logged its
summary, so the report, the advice, MLflow and the summary JSON agree by construction; runs
without a summary get them computed from their histories with :mod:`trainables.convergence`,
the same code the trial driver uses.
"""

from __future__ import annotations

import math

import pandas as pd

from dashboards.mlflow_data import Projection, Study
from trainables.convergence import (
    Crossing,
    best_value,
    first_crossing,
    scaling_efficiency,
    speedup,
)

CROSSING_COLUMNS = (
    "updates_to_target",
    "samples_to_target",
    "epochs_to_target",
    "seconds_to_target",
)
TABLE_COLUMNS = (
    "trial_name", "world_size", "global_batch", "scaling_rule", "warmup_rule", "warmup_steps",
    "warmup_epochs", "peak_lr", "status", *CROSSING_COLUMNS, "speedup_vs_baseline",
    "speedup_by_epochs", "scaling_efficiency", "best_dev_loss", "final_dev_loss", "run_id",
)  # fmt: skip
FLOAT_COLUMNS = frozenset(
    (*CROSSING_COLUMNS, "speedup_vs_baseline", "scaling_efficiency", "best_dev_loss",
     "final_dev_loss")
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


def convergence_table(study: Study) -> pd.DataFrame:
    """One row per trial, fastest (fewest epochs to target) first, never-reached last."""
    target = study.target_value
    rows = []
    for trial in study.trials.to_dict("records"):
        row = {col: trial.get(col) for col in TABLE_COLUMNS}
        if not trial["has_summary"]:
            # No summary logged (an older or interrupted run): compute it as the driver would.
            curve = study.curve(trial["run_id"], study.target_metric)
            crossing = None
            if target is not None:
                crossing = first_crossing(curve, target, study.target_mode, study.target_smoothing)
            for col in CROSSING_COLUMNS:
                row[col] = None if crossing is None else getattr(crossing, col)
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


def _fill_speedups(table: pd.DataFrame, baseline_trial: str | None) -> None:
    """Speedup (updates) and efficiency where not logged; the epochs speedup for every trial."""
    base_rows = table[table["trial_name"] == baseline_trial]
    base = None if base_rows.empty else base_rows.iloc[0]
    base_crossing = None if base is None else _crossing(base)
    by_epochs, up, eff = [], [], []
    for _, row in table.iterrows():
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
