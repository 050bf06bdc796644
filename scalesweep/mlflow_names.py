"""The names MLflow holds: the contract between the sweep driver that logs a study and the
dashboards that read it back (docs/design.md §4.5). Plain strings, no MLflow import, so both
sides (and the pure math below them) share one definition; tests/unit/test_design_doc.py pins every
name here to the design document.
"""

from __future__ import annotations

import os

#: where `run`, `report`, `advise`, `ui` and `submit` look when neither --tracking-uri nor
#: MLFLOW_TRACKING_URI says else
DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"


def store_uri_for_mlflow(uri: str) -> str:
    """``uri`` as handed to MLflow: a relative SQLite path made absolute against the working
    directory now. MLflow keeps one database engine per URI string for the life of the process,
    so a notebook that changes directory would otherwise go on reading and writing the first
    directory's file under the second's name. What we print and save keeps the URI as given."""
    head = "sqlite:///"
    if not uri.startswith(head) or uri.startswith(head + "/"):
        return uri
    path, sep, query = uri[len(head):].partition("?")
    if path in ("", ":memory:"):
        return uri
    return f"{head}{os.path.abspath(path)}{sep}{query}"

#: tag with value "parent" (one run per sweep) or "trial" (one child run per trial)
ROLE_TAG = "scalesweep.role"
#: MLflow's own tag that nests a child run under its parent
PARENT_TAG = "mlflow.parentRunId"
TRIAL_NAME_TAG = "trial_name"
#: pending | running | the trial's final status (docs/design.md §4.4); also the loop's report key
STATUS_TAG = "status"
#: the Tune trial a child run belongs to now (a retry or resume changes it)
RAY_TRIAL_ID_TAG = "ray_trial_id"
#: why a failed trial failed
ERROR_TAG = "error"
#: the parent's tag: the sweep file it was run from
SWEEP_FILE_TAG = "sweep_file"
#: the parent's tag on a verification sweep (``predict --verify``): the study's parent run id
VERIFIES_TAG = "scalesweep.verifies"
#: a `scalesweep solve` parent run: "search" (its baseline seeds and candidates, a parent of
#: its own) or "verify" (the study that decides the best candidates)
SOLVE_TAG = "scalesweep.solve"
#: a solve's verification parent: the search's parent run id
SOLVE_SEARCH_TAG = "scalesweep.solve_search"
#: a solve candidate's score, with every eval (scalesweep.science.solve)
SOLVE_RATIO_METRIC = "solve_ratio"
#: MLflow's own tag for a run's description (the UI shows it): the sweep's ``description``
DESCRIPTION_TAG = "mlflow.note.content"
#: interpolated | at_first_eval | never (docs/design.md §4, "Crossings and censoring")
CROSSING_TAG = "crossing"

#: child params that group a trial's seeds (docs/design.md §4, "Arms, seeds and intervals")
ARM_PARAM = "arm"
BASELINE_ARM_PARAM = "baseline_arm"

#: parent params the dashboards read back (docs/design.md §4.5, "Parent run")
TARGET_METRIC_PARAM = "target_metric"
TARGET_MODE_PARAM = "target_mode"
TARGET_SMOOTHING_PARAM = "target_smoothing"
BASELINE_TRIAL_PARAM = "baseline_trial"
PROJECTION_PARAM = "projection"
#: a relative target's value, logged on the parent once the baseline has run (the same name
#: as the child's summary metric TARGET_METRIC)
TARGET_VALUE_PARAM = "target_value"

#: the loop's report key that is the step of every curve metric (the optimizer update), not
#: a metric itself
STEP_KEY = "update"
#: the workload's eval metrics are curve metrics under this prefix: dev_loss, dev_<metric>
DEV_PREFIX = "dev_"

#: metrics logged at every report, with step = optimizer update (besides dev_<metric>);
#: skipped_updates only in float16 trials (updates the gradient scaler skipped, cumulative)
CURVE_METRICS = ("train_loss", "lr", "momentum", "samples_seen", "epoch", "wall_s", "noise_scale",
                 "skipped_updates", "physical_workers", "global_batch", SOLVE_RATIO_METRIC)

#: the trial's training time: the loop's final report carries it, the summary logs it
TRAIN_SECONDS_METRIC = "train_seconds"
#: where the target was crossed, on each clock (docs/design.md §1.4; absent unless interpolated)
UPDATES_TO_TARGET_METRIC = "updates_to_target"
SAMPLES_TO_TARGET_METRIC = "samples_to_target"
EPOCHS_TO_TARGET_METRIC = "epochs_to_target"
SECONDS_TO_TARGET_METRIC = "seconds_to_target"
#: the last and the lowest finite dev loss
FINAL_DEV_LOSS_METRIC = "final_dev_loss"
BEST_DEV_LOSS_METRIC = "best_dev_loss"
#: baseline / trial on the updates clock, and that over the batch ratio
SPEEDUP_METRIC = "speedup_vs_baseline"
SCALING_EFFICIENCY_METRIC = "scaling_efficiency"
#: metrics logged once at the end of a trial, at step 0 (only those that are defined)
SUMMARY_METRICS = (
    UPDATES_TO_TARGET_METRIC,
    SAMPLES_TO_TARGET_METRIC,
    EPOCHS_TO_TARGET_METRIC,
    SECONDS_TO_TARGET_METRIC,
    FINAL_DEV_LOSS_METRIC,
    BEST_DEV_LOSS_METRIC,
    SPEEDUP_METRIC,
    SCALING_EFFICIENCY_METRIC,
    TRAIN_SECONDS_METRIC,
)
#: the evals around each crossing, logged with the summary (hi absent when never reached)
UPDATES_TO_TARGET_LO_METRIC = "updates_to_target_lo"
UPDATES_TO_TARGET_HI_METRIC = "updates_to_target_hi"
EPOCHS_TO_TARGET_LO_METRIC = "epochs_to_target_lo"
EPOCHS_TO_TARGET_HI_METRIC = "epochs_to_target_hi"
BRACKETS = (UPDATES_TO_TARGET_LO_METRIC, UPDATES_TO_TARGET_HI_METRIC, EPOCHS_TO_TARGET_LO_METRIC,
            EPOCHS_TO_TARGET_HI_METRIC)
#: the absolute target a trial was measured against, logged with its summary
TARGET_METRIC = TARGET_VALUE_PARAM
#: the baseline best that target (and every level's) was loosened from: cross-fitted, so it
#: differs between the seeds that set it (docs/design.md §4, "Target")
TARGET_BEST_METRIC = "target_reference_best"

#: parent params: how arms are judged (docs/design.md §4, "Decisions"; a study logged before
#: them is read with the defaults)
EQUIVALENCE_MARGIN_PARAM = "equivalence_margin"
TARGET_LEVELS_PARAM = "target_levels"
#: parent params: the confidence every interval of the study is read at (the adaptive
#: design's per-look one; the nominal one for a fixed number of seeds), and the design
DECISION_CONFIDENCE_PARAM = "decision_confidence"
REPLICATES_PARAM = "replicates"
#: parent param: the study's rules as one JSON record (scalesweep.science.stats.rules.StudyRules),
#: the one source every display reads back; the params above stay for the MLflow UI's columns
#: and for studies logged before it
STUDY_RULES_PARAM = "study_rules"
#: parent param: how the relative target was set (baseline seeds left out of it, and why), a
#: JSON list of lines; logged at the end where there is any
TARGET_NOTES_PARAM = "target_notes"
#: parent params: the plateau check (JSON: metric, mode, last_share, min_improvement) and
#: whether trials were curtailed (JSON bool); the report reads both back (docs/study.md)
PLATEAU_PARAM = "plateau"
CURTAIL_PARAM = "curtail"
#: parent-run tags of the driver's machine: cpu, isa, cpus, omp_num_threads, python and
#: version.<package> for scalesweep, torch, ray and mlflow (orchestrator/tracking/machine.py)
MACHINE_TAG_PREFIX = "machine."

#: `scalesweep predict`'s record on the study's parent run (docs/beyond.md, "Keep score"): the
#: artifact folder of its predictions/<id>.json, the suffix of each outcome written beside one,
#: and its metrics, predict.ws<M>.<rule>.<what> (what: epochs_median, epochs_lo, epochs_hi,
#: observed, hit; rule best_lr: median, lo, hi)
PREDICTIONS_ARTIFACT_DIR = "predictions"
PREDICTION_OUTCOME_SUFFIX = ".outcome.json"
PREDICTION_METRIC_FORMAT = "predict.ws{world_size}.{rule}.{what}"
#: `scalesweep solve`'s verified recipe, kept beside them as a prediction of kind "solve" on
#: the verification's parent run (docs/solve.md, "Checking the recipe later"): its metrics,
#: solve.ws<M>.<what> (what: ratio_median, ratio_lo, ratio_hi, ratio_observed, hit)
SOLVE_PREDICTION_METRIC_FORMAT = "solve.ws{world_size}.{what}"
#: `scalesweep recommend`'s recipe, kept beside them as a prediction of kind "recommend" on
#: the study's parent run (docs/beyond.md, "recommend"): its metrics, recommend.ws<M>.<what>
#: (what: ratio_median, ratio_lo, ratio_hi, lr_factor, ratio_observed, hit)
RECOMMEND_PREDICTION_METRIC_FORMAT = "recommend.ws{world_size}.{what}"
