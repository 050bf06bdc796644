"""The arms of a study: each arm's seeds aggregated (median, interval, paired comparison with
the baseline arm), from MLflow, with the same pure code (:mod:`scalesweep.science.stats.arms`,
over the same trial summaries) the sweep driver uses for `run`'s closing table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pandas as pd

from scalesweep.dashboards.convergence_table import StudyTrial
from scalesweep.dashboards.mlflow_data import Study
from scalesweep.mlflow_names import BASELINE_ARM_PARAM, TARGET_NOTES_PARAM
from scalesweep.science.stats.arms import ArmSummary, summarize_arms

#: the axes each arm is described by in arms.json/arms.csv (those a trial logs as params)
ARM_AXES = ("world_size", "warmup_rule", "scaling_rule", "global_batch", "warmup_steps", "peak_lr",
            "batch_ramp")


def _axes(trial: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for key in ARM_AXES:
        v = trial.get(key)
        if v is not None and not (isinstance(v, float) and pd.isna(v)):
            out[key] = v.item() if hasattr(v, "item") else v
    return out


def arm_summaries(study: Study, trials: Sequence[StudyTrial]) -> list[ArmSummary]:
    """One summary per arm, in the order of ``trials`` (fastest first, :func:`study_trials`)."""
    baseline_arm: dict[str, str | None] = {}
    axes: dict[str, dict[str, Any]] = {}
    # runs logged before arms had a baseline_arm param: pair with the study's baseline trial's arm
    fallback = next((t.summary.arm for t in trials if t.summary.name == study.baseline_trial), None)
    for t in trials:
        base = t.run.get(BASELINE_ARM_PARAM)
        baseline_arm[t.summary.arm] = base if isinstance(base, str) and base else fallback
        axes.setdefault(t.summary.arm, _axes(t.run))
    rules = replace(study.rules, target=_headline(study, trials), notes=study.target_notes)
    return summarize_arms([t.summary for t in trials], baseline_arm, rules, axes)


def _headline(study: Study, trials: Sequence[StudyTrial]) -> float | None:
    """The parent's target (the pooled one), else the one every trial shares (older studies)."""
    if study.target_value is not None:
        return study.target_value
    targets = {t.summary.target_value for t in trials}
    return next(iter(targets)) if len(targets) == 1 else None


def arms_frame(arms: Sequence[ArmSummary]) -> pd.DataFrame:
    """arms.csv: arms.json's objects as rows, intervals split into _lo/_hi columns, the ratio
    and decision at each level in columns of their own."""
    rows = []
    for a in arms:
        row: dict[str, Any] = {}
        for key, value in a.as_json().items():
            if key == "axes":
                row.update(value)
            elif key == "ratio_by_target":  # one pair of columns per level
                for lv in value:
                    row[f"ratio_at_level_{lv['level']:g}"] = lv["ratio_median"]
                    row[f"ratio_lower_bound_at_level_{lv['level']:g}"] = lv["ratio_lower_bound"]
                    row[f"decision_at_level_{lv['level']:g}"] = lv["decision"]
            elif key == TARGET_NOTES_PARAM:
                row[key] = "; ".join(value)
            elif isinstance(value, list):
                row[f"{key}_lo"], row[f"{key}_hi"] = value
            else:
                row[key] = value
        rows.append(row)
    return pd.DataFrame(rows)
