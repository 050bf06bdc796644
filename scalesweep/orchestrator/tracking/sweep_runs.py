"""What a sweep writes to MLflow besides the trials' evals: the parent's and each child's
params, and at the end the summaries, final tags and statuses that close the runs (docs/design.md
§4.5). The driver (scalesweep.orchestrator.launch.run) calls these; every name comes from
scalesweep.mlflow_names."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from scalesweep.mlflow_names import (
    ARM_PARAM,
    BASELINE_ARM_PARAM,
    BASELINE_TRIAL_PARAM,
    CROSSING_TAG,
    CURTAIL_PARAM,
    DECISION_CONFIDENCE_PARAM,
    EQUIVALENCE_MARGIN_PARAM,
    ERROR_TAG,
    PLATEAU_PARAM,
    PROJECTION_PARAM,
    REPLICATES_PARAM,
    STATUS_TAG,
    STEP_KEY,
    STUDY_RULES_PARAM,
    SUMMARY_METRICS,
    TARGET_LEVELS_PARAM,
    TARGET_METRIC_PARAM,
    TARGET_MODE_PARAM,
    TARGET_NOTES_PARAM,
    TARGET_SMOOTHING_PARAM,
    TARGET_VALUE_PARAM,
)
from scalesweep.orchestrator.plan.rows import Plan, PlanRow
from scalesweep.orchestrator.spec.load import Sweep
from scalesweep.orchestrator.tracking.study_checks import plateau_setting
from scalesweep.orchestrator.tracking.tracker import SweepTracker, fail_fast
from scalesweep.science.stats.trial_summary import TrialSummary

#: where the metrics MLflow never accepted are kept, in the sweep directory
UNSENT = "unsent_metrics.jsonl"
#: how the driver names its MLflow parent run in its output; `submit` reads it back from a
#: cluster job's logs (PARENT_RUN_PATTERN), so the two live here together
PARENT_RUN_PATTERN = re.compile(r"MLflow parent run (\w+) at ")


def parent_run_line(run_id: str, tracking_uri: str) -> str:
    return f"MLflow parent run {run_id} at {tracking_uri}"


def tracking_grace_s() -> float:
    """How long the end of a sweep waits for a tracking server that does not answer."""
    return float(os.environ.get("SCALESWEEP_TRACKING_GRACE_S", "60"))


def parent_params(plan: Plan) -> dict[str, Any]:
    """The parent run's params: the study's target, baseline and shape."""
    spec = plan.sweep.spec
    from scalesweep.orchestrator.spec.load import metric_mode

    return {
        "workload": spec.workload.label, TARGET_METRIC_PARAM: spec.target.metric,
        # a relative target's value is known once the baseline has run: logged at the end
        **({TARGET_VALUE_PARAM: spec.target.value} if spec.target.value is not None else {}),
        "target_relative_to_baseline": spec.target.relative_to_baseline,
        TARGET_MODE_PARAM: metric_mode(plan.sweep), TARGET_SMOOTHING_PARAM: spec.target.smoothing,
        EQUIVALENCE_MARGIN_PARAM: spec.target.equivalence_margin,
        TARGET_LEVELS_PARAM: json.dumps(spec.target.levels),
        DECISION_CONFIDENCE_PARAM: plan.rules.confidence,
        STUDY_RULES_PARAM: plan.rules.to_param(),
        REPLICATES_PARAM: spec.replicates.model_dump() if spec.replicates else None,
        BASELINE_TRIAL_PARAM: next((r.name for r in plan.rows if plan.baseline_for(r) is r), None),
        "trials": len(plan.rows), "backend": spec.backend, "search": spec.search.type,
        "reference_world_size": plan.sweep.reference_world_size,
        "recipe": spec.recipe,
        **({PROJECTION_PARAM: spec.projection.model_dump(mode="json")} if spec.projection else {}),
        PLATEAU_PARAM: plateau_setting(plan.sweep), CURTAIL_PARAM: spec.curtail,
    }


def trial_params(row: PlanRow, sweep: Sweep, baseline_arm: str | None = None) -> dict[str, Any]:
    """Every axis and every derived value, as MLflow params (docs/design.md §4.5); ``arm``
    (the settings minus the seed) lets the MLflow UI group a trial's seeds into one line."""
    params: dict[str, Any] = {
        ARM_PARAM: row.arm, BASELINE_ARM_PARAM: baseline_arm,
        "world_size": row.world_size, "global_batch": row.global_batch,
        "reference_global_batch": row.reference_global_batch, "scaling_rule": row.scaling_rule,
        "base_lr": row.base_lr, "lr": row.lr, "peak_lr": row.peak_lr,
        "warmup_steps": row.warmup_steps, "warmup_rule": row.warmup_rule,
        "warmup_epochs": round(row.warmup_epochs, 6), "updates_per_epoch": row.updates_per_epoch,
        "total_updates": row.total_updates, "scheduler": row.scheduler, "backend": row.backend,
        "physical_workers": row.physical_workers, "accum_grad": row.accum_grad,
        "per_worker_batch": row.per_worker_batch, "seed": row.seed,
        "workload": sweep.spec.workload.label, "optimizer": row.trial.optimizer.get("type"),
        "eval_every": row.eval_every, "dtype": row.trial.dtype, "fuse": row.trial.fuse,
        "batch_ramp": row.batch_ramp,
    }
    for key, value in row.axes.items():
        params.setdefault(key, value)
    for key, value in row.trial.scheduler.items():
        params.setdefault(f"scheduler.{key}", value)
    return params


def history(tracker: SweepTracker, run_id: str) -> list[dict[str, Any]]:
    """A run's logged evals as result dicts (for a resumed sweep's convergence metrics)."""
    by_step: dict[int, dict[str, Any]] = {}
    keys = tracker.client.get_run(run_id).data.metrics.keys()
    for key in keys:
        if key in SUMMARY_METRICS:
            continue
        for m in tracker.client.get_metric_history(run_id, key):
            by_step.setdefault(m.step, {STEP_KEY: m.step})[key] = m.value
    return [by_step[s] for s in sorted(by_step) if "epoch" in by_step[s]]


def spool_unsent(tracker: SweepTracker, sweep_dir: Path) -> None:
    """Keep what MLflow never accepted in the sweep directory, and say so."""
    if not tracker.pending():
        return
    spool = sweep_dir / UNSENT
    with spool.open("a") as f:
        for item in tracker.unsent():
            f.write(json.dumps(item) + "\n")
    print(f"warning: MLflow unreachable; {tracker.pending()} metric values kept in {spool}",
          file=sys.stderr)


def close_runs(tracker: SweepTracker, parent_id: str, trials: list[dict[str, Any]],
               summaries: Mapping[str, TrialSummary], logged: dict[str, set[str]],
               done: dict[str, str], run_for: Callable[[str], str | None],
               headline: float | None = None, notes: Sequence[str] = ()) -> None:
    """Summary metrics, final tags and statuses: what the end of a sweep writes to MLflow.
    Fails fast (is_outage) where the server does not answer. ``run_for``: a trial's run, made
    with the evals that waited for it (SweepCallback.run_for); ``headline``: the study's one
    target to show on the parent (each trial logs its own, cross-fitted); ``notes``: how that
    target was set, for every display the store feeds (the report reads them back)."""
    with fail_fast():
        for t in trials:
            _log_trial_end(tracker, t, summaries[t["name"]], logged, done, run_for)
        if headline is not None and TARGET_VALUE_PARAM not in tracker.client.get_run(parent_id).data.params:
            tracker.log_params(parent_id, {TARGET_VALUE_PARAM: headline})
        if notes and TARGET_NOTES_PARAM not in tracker.client.get_run(parent_id).data.params:
            tracker.log_params(parent_id, {TARGET_NOTES_PARAM: json.dumps(list(notes))})
    if not tracker.flush_with_retry(deadline_s=tracking_grace_s()):
        raise ConnectionError("buffered metrics were not accepted")
    names = {str(t["mlflow_run_id"]): t["name"] for t in trials}
    for (run_id, key), message in tracker.rejected.items():
        print(f"warning: MLflow refused metric {key!r} of trial {names.get(run_id, run_id)} "
              f"(not logged): {message}", file=sys.stderr)
    _end_runs(tracker, parent_id, trials, done)


def _log_trial_end(tracker: SweepTracker, t: dict[str, Any], s: TrialSummary,
                   logged: dict[str, set[str]], done: dict[str, str],
                   run_for: Callable[[str], str | None]) -> None:
    """One trial's summary metrics (those its run lacks) and, unless it had finished before,
    its final tags."""
    name = t["name"]
    run_id = t["mlflow_run_id"] = t["mlflow_run_id"] or run_for(name)
    if run_id is None:
        raise ConnectionError(f"no MLflow run for trial {name} yet")
    # summaries only where missing: a resumed sweep never logs a step twice
    have = logged.get(name, set())
    tracker.add_summary(run_id, {k: v for k, v in s.metrics().items() if k not in have})
    if name in done:
        return
    tags = {STATUS_TAG: t[STATUS_TAG]}
    if s.crossing:
        tags[CROSSING_TAG] = s.crossing
    if t[ERROR_TAG]:
        tags[ERROR_TAG] = t[ERROR_TAG]
    tracker.set_tags(run_id, tags)


def _end_runs(tracker: SweepTracker, parent_id: str, trials: list[dict[str, Any]],
              done: dict[str, str]) -> None:
    from scalesweep.orchestrator.tracking.callback import run_status  # imports Ray Tune

    with fail_fast():
        for t in trials:
            if t["name"] not in done:
                tracker.end_run(t["mlflow_run_id"], run_status(t[STATUS_TAG]))
        tracker.end_run(parent_id, "FINISHED")
