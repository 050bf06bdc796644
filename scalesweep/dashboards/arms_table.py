"""The arms of a study: each arm's seeds aggregated (median, interval, paired comparison with
the baseline arm), from MLflow, with the same pure code (:mod:`scalesweep.science.stats.arms`) the sweep
driver uses for `run`'s closing table."""

from __future__ import annotations

from typing import Any

import pandas as pd

from scalesweep.dashboards.convergence_table import locate_trial, trial_target
from scalesweep.dashboards.mlflow_data import Study
from scalesweep.science.stats.arms import Rules, TrialCrossing, summarize_arms

#: the axes each arm is described by in arms.json/arms.csv (those a trial logs as params)
ARM_AXES = ("world_size", "warmup_rule", "scaling_rule", "global_batch", "warmup_steps", "peak_lr",
            "batch_ramp")


def _axes(trial: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key in ARM_AXES:
        v = trial.get(key)
        if v is not None and not (isinstance(v, float) and pd.isna(v)):
            out[key] = v.item() if hasattr(v, "item") else v
    return out


def arm_summaries(study: Study, table: pd.DataFrame) -> list[dict[str, Any]]:
    """One arms.json object per arm, in the order of the convergence ``table`` (fastest first)."""
    trials = {t["run_id"]: t for t in study.trials.to_dict("records")}
    crossings: list[TrialCrossing] = []
    baseline_arm: dict[str, str | None] = {}
    axes: dict[str, dict[str, Any]] = {}
    # runs logged before arms had a baseline_arm param: pair with the study's baseline trial's arm
    study_base = table.loc[table["trial_name"] == study.baseline_trial, "arm"]
    fallback = str(study_base.iloc[0]) if not study_base.empty else None
    for row in table.to_dict("records"):
        trial = trials[row["run_id"]]
        arm = str(row["arm"])
        seed = row.get("seed")
        crossings.append(TrialCrossing(arm, int(seed) if pd.notna(seed) else 0,
                                       locate_trial(study, trial),
                                       study.curve(str(trial["run_id"]), study.target_metric)))
        base = row.get("baseline_arm")
        baseline_arm[arm] = base if isinstance(base, str) and base else fallback
        axes.setdefault(arm, _axes(trial))
    targets = {trial_target(study, t) for t in trials.values()}
    rules = Rules(confidence=study.decision_confidence, margin=study.equivalence_margin,
                  levels=study.target_levels, mode=study.target_mode, smoothing=study.target_smoothing,
                  target=next(iter(targets)) if len(targets) == 1 else None)
    return [a.as_json(axes[a.arm]) for a in summarize_arms(crossings, baseline_arm, rules)]


def arms_frame(arms: list[dict[str, Any]]) -> pd.DataFrame:
    """arms.csv: one row per arm, intervals split into _lo/_hi columns, the ratio and decision
    at each level in columns of their own."""
    rows = []
    for a in arms:
        row: dict[str, Any] = {}
        for key, value in a.items():
            if key == "axes":
                row.update(value)
            elif key == "ratio_by_target":  # one pair of columns per level
                for lv in value:
                    row[f"ratio_at_level_{lv['level']:g}"] = lv["ratio_median"]
                    row[f"decision_at_level_{lv['level']:g}"] = lv["decision"]
            elif isinstance(value, list):
                row[f"{key}_lo"], row[f"{key}_hi"] = value
            else:
                row[key] = value
        rows.append(row)
    return pd.DataFrame(rows)
