"""The report's checks on the study itself, read from MLflow: has the baseline arm plateaued
(the sweep's ``plateau:`` rule, logged on the parent run) and, for a curtailed study, the
trial-epochs curtailment saved. ``run`` prints the same from the driver's curves
(``scalesweep/orchestrator/tracking/study_checks.py``); both hand them to the pure checks."""

from __future__ import annotations

import html
import json
import math
from typing import Any

from scalesweep.dashboards.mlflow_data import Study
from scalesweep.mlflow_names import ARM_PARAM, BASELINE_ARM_PARAM, CURTAIL_PARAM, PLATEAU_PARAM, STATUS_TAG
from scalesweep.science.stats import curtail
from scalesweep.science.stats.plateau import (
    DEFAULT_LAST_SHARE,
    DEFAULT_MIN_IMPROVEMENT,
    Plateau,
    check_plateau,
)


def _json(raw: object) -> Any:
    try:
        return json.loads(str(raw))
    except ValueError:
        return None


def plateau_rule(study: Study) -> dict[str, Any]:
    """The rule the study was run with; a study logged before it: the defaults on its target."""
    rule = _json(study.parent_params.get(PLATEAU_PARAM))
    if not isinstance(rule, dict):
        rule = {}
    return {"metric": rule.get("metric", study.target_metric), "mode": rule.get("mode", study.rules.mode),
            "last_share": float(rule.get("last_share", DEFAULT_LAST_SHARE)),
            "min_improvement": float(rule.get("min_improvement", DEFAULT_MIN_IMPROVEMENT))}


def plateaus(study: Study) -> dict[str, Plateau | None]:
    """Baseline arm -> the check on its seeds (None: too few evals to judge)."""
    trials = study.trials
    if trials.empty or ARM_PARAM not in trials or BASELINE_ARM_PARAM not in trials:
        return {}
    rule = plateau_rule(study)
    own = trials[trials[ARM_PARAM] == trials[BASELINE_ARM_PARAM]]
    return {str(arm): check_plateau([study.curve(str(r), rule["metric"]) for r in seeds["run_id"]],
                                    rule["mode"], metric=rule["metric"], last_share=rule["last_share"],
                                    min_improvement=rule["min_improvement"],
                                    smoothing=study.rules.smoothing)
            for arm, seeds in own.groupby(ARM_PARAM)}


def curtail_saving(study: Study) -> curtail.Saving | None:
    """What curtailment saved, for a study run with ``curtail: true`` (else None): a stopped
    trial would have run its plan's epochs, any other trained what it trained either way."""
    if _json(study.parent_params.get(CURTAIL_PARAM)) is not True or study.trials.empty:
        return None
    trained = []
    for run in study.trials.to_dict("records"):
        curve = study.curve(str(run["run_id"]), study.target_metric)
        done = curve[-1].epoch if curve else 0.0
        full = float(run.get("total_updates", math.nan)) / float(run.get("updates_per_epoch", math.nan))
        stopped = run.get(STATUS_TAG) == "stopped" and math.isfinite(full)
        trained.append((done, full if stopped else done))
    return curtail.saving(trained)


def check_lines(study: Study) -> list[str]:
    """The lines the report shows (and ``report`` prints)."""
    out = [f"{arm}: " + (c.text() if c is not None else "plateau not judged: the baseline has fewer "
                         "than 2 evals") for arm, c in sorted(plateaus(study).items())]
    saving = curtail_saving(study)
    if saving is not None:
        out.append(saving.text())
    return out


def checks_html(study: Study) -> str:
    """The report's section: the plateau verdict per baseline arm, and curtailment's saving."""
    lines = check_lines(study)
    if not lines:
        return ""
    items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    return ("<h2>Has the baseline plateaued?</h2>\n<p>A study that ends while its baseline still "
            "falls compares the arms early in training, not at convergence. The rule (the sweep's "
            "<code>plateau:</code>): the last share of the run must improve the best of the "
            "baseline arm's mean curve by less than the threshold.</p>\n"
            f"<ul>{items}</ul>")
