"""`scalesweep predict`: from a finished study, epochs to target at a world size it did not run,
per lr rule, with an interval (docs/beyond.md, "Predict, then verify").

Reads the study from MLflow as the report and `advise` do (the trials' summaries, on the logged
history). Per lr rule (the trials' ``scaling_rule``), each measured global batch contributes its
seeds' epochs to target: the setting (warmup rule, free axes) with the fewest median epochs
there, a seed that never reached counting as +inf. At the reference batch every lr rule is the
same trial (the planner merged them), so that trial belongs to each rule. The late-training
noise scale, where the trials measured it, is the second source of
:func:`scalesweep.science.prediction.epochs.predict`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from scalesweep.dashboards.advice import late_noise_scale
from scalesweep.dashboards.convergence_table import StudyTrial, study_trials
from scalesweep.dashboards.mlflow_data import Study, StudyNotFound, load_study
from scalesweep.mlflow_names import STATUS_TAG
from scalesweep.science.prediction.best_lr import BestLr, BestLrUnknown, predict_best_lr
from scalesweep.science.prediction.epochs import (
    MAX_FACTOR,
    BatchPoint,
    PredictionRefused,
    predict,
)
from scalesweep.science.prediction.record import RulePrediction, StudyPrediction

#: a ramp's trials ran at several batches; the law is over constant ones
_RAMPED_OFF = ("", "none", "nan")


def param_number(x: object) -> float | None:
    try:
        v = float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def trial_epochs(t: StudyTrial) -> float | None:
    """A seed's epochs to target: the crossing, +inf when never, the bound at the first eval."""
    s = t.summary
    if s.crossing == "never":
        return math.inf
    if s.crossing == "at_first_eval":
        return s.epochs_to_target_hi
    return s.epochs_to_target


def _usable(t: StudyTrial) -> bool:
    ramp = str(t.run.get("batch_ramp", "none"))
    return ramp in _RAMPED_OFF and param_number(t.run.get("global_batch")) is not None


def usable_trials(trials: Sequence[StudyTrial]) -> list[StudyTrial]:
    """The trials at a fixed global batch (a ramp's ran at several)."""
    return [t for t in trials if _usable(t)]


def points_of_rule(trials: Sequence[StudyTrial], rule: str) -> list[BatchPoint]:
    """Per global batch, the seeds of the best setting of ``rule`` there."""
    by_batch: dict[float, dict[tuple[tuple[str, str], ...], list[float]]] = {}
    for t in trials:
        p = t.run
        batch = param_number(p["global_batch"])
        assert batch is not None
        at_reference = batch == param_number(p.get("reference_global_batch"))
        if str(p.get("scaling_rule")) != rule and not at_reference:
            continue
        epochs = trial_epochs(t)
        if epochs is None or not epochs > 0:
            continue
        setting = tuple((k, str(p[k])) for k in sorted(p)
                        if k.startswith(("optimizer.", "scheduler.")) or k == "warmup_rule")
        by_batch.setdefault(batch, {}).setdefault(setting, []).append(epochs)
    points = []
    for batch, settings in sorted(by_batch.items()):
        best = min(settings.values(), key=statistics.median)
        points.append(BatchPoint(batch, tuple(best)))
    return points


def global_batch_at(trials: Sequence[StudyTrial], world_size: int) -> float:
    """The global batch at ``world_size``: the trials' (median) batch per worker times it."""
    per_worker = statistics.median((param_number(t.run["global_batch"]) or math.nan)
                                   / (param_number(t.run.get("world_size")) or math.nan)
                                   for t in trials)
    return float(world_size * per_worker)


def measured_noise_scale(study: Study, trials: Sequence[StudyTrial]) -> float | None:
    """The late-training noise scale of ``trials`` (diverged and failed ones left out)."""
    ok = {t.run_id for t in trials if str(t.run.get(STATUS_TAG)) not in ("diverged", "failed")}
    return late_noise_scale(study, ok)[0]


def predict_study(study: Study, world_size: int, confidence: float = 0.90) -> StudyPrediction:
    trials = usable_trials(study_trials(study))
    if not trials:
        raise PredictionRefused([f"study {study.experiment_name!r} has no trial with a fixed "
                                 "global batch"])
    shapes = [(param_number(t.run["global_batch"]) or math.nan,
               param_number(t.run.get("updates_per_epoch")) or math.nan) for t in trials]
    samples = statistics.median(b * u for b, u in shapes)  # samples per epoch
    batch = global_batch_at(trials, world_size)
    noise = measured_noise_scale(study, trials)
    rules = sorted({str(t.run.get("scaling_rule")) for t in trials})
    upe = samples / batch if math.isfinite(samples) else None
    out = []
    for rule in rules:
        points = points_of_rule(trials, rule)
        measured = {p.batch: len(p.epochs) for p in points}
        try:
            pred = predict(points, batch, noise_scale=noise, confidence=confidence)
            out.append(RulePrediction(rule, world_size, batch, measured, pred, [], upe))
        except PredictionRefused as e:
            out.append(RulePrediction(rule, world_size, batch, measured, None, e.reasons, upe))
    best, note = _best_lr(trials, batch, confidence)
    return StudyPrediction(study.experiment_name, study.parent_run_id, study.target_value,
                           world_size, noise, out, tuple(sorted(t.run_id for t in trials)),
                           best, note)


#: the axis that sweeps the lr (a trial's base lr: the optimizer's lr at the reference)
LR_AXIS = "optimizer.lr"


def lr_cells(trials: Sequence[StudyTrial]) -> dict[float, dict[float, list[float]]]:
    """Per global batch and lr the trial used (after its rule scaled it), the seeds of the
    best other setting (warmup, rule, free axes) with that lr."""
    by: dict[tuple[float, float], dict[tuple[tuple[str, str], ...], list[float]]] = {}
    for t in trials:
        p = t.run
        lr = param_number(p.get("lr"))
        if lr is None:
            lr = param_number(p.get(LR_AXIS))
        batch, epochs = param_number(p["global_batch"]), trial_epochs(t)
        if lr is None or batch is None or epochs is None or not epochs > 0:
            continue
        setting = tuple((k, str(p[k])) for k in sorted(p) if k in ("scaling_rule", "warmup_rule")
                        or (k.startswith(("optimizer.", "scheduler.")) and k != LR_AXIS))
        by.setdefault((batch, lr), {}).setdefault(setting, []).append(epochs)
    cells: dict[float, dict[float, list[float]]] = {}
    for (batch, lr), settings in sorted(by.items()):
        cells.setdefault(batch, {})[lr] = min(settings.values(), key=statistics.median)
    return cells


def _best_lr(trials: Sequence[StudyTrial], batch: float,
             confidence: float) -> tuple[BestLr | None, str]:
    base_lrs = {param_number(t.run.get(LR_AXIS)) for t in trials} - {None}
    if len(base_lrs) < 2:
        return None, f"the study did not sweep lr (no {LR_AXIS} axis with two values or more)"
    try:
        best = predict_best_lr(lr_cells(trials), batch, confidence=confidence)
    except BestLrUnknown as e:
        return None, str(e)
    edges = ", ".join(f"{b:g}" for b in best.at_grid_edge)
    return best, (f"the best lr lies at the edge of the lr grid at batch {edges}: the optimum "
                  "may lie beyond it" if edges else "")


def load_prediction(tracking_uri: str, *, experiment: str | None, parent_run_id: str | None,
                    world_size: int) -> StudyPrediction:
    # a study's verification logs into the study's experiment; predicting again reads the study
    study = load_study(tracking_uri, experiment=experiment, parent_run_id=parent_run_id,
                       skip_verifications=True)
    return predict_study(study, world_size)


def study_noise_scale(tracking_uri: str, experiment: str) -> tuple[float | None, str | None]:
    """The noise scale of the latest study in ``experiment`` (not a verification sweep's), read
    as the prediction reads it, and that study's parent run id: (None, None) where the store
    holds no such study, (None, its id) where its trials measured none. `solve` places its lr
    factor range's low end with it (docs/solve.md, "The space")."""
    try:
        study = load_study(tracking_uri, experiment=experiment, skip_verifications=True)
    except StudyNotFound:
        return None, None
    return measured_noise_scale(study, usable_trials(study_trials(study))), study.parent_run_id


def render(sp: StudyPrediction) -> str:
    lines = [f"study {sp.experiment} (parent run {sp.parent_run_id}): epochs to target "
             f"{'?' if sp.target is None else f'{sp.target:.4g}'} at {sp.world_size} workers",
             f"noise scale (late training, median): "
             f"{'not measured' if sp.noise_scale is None else f'{sp.noise_scale:.4g} samples'}"]
    for r in sp.rules:
        measured = ", ".join(f"{b:g} ({n} seeds)" for b, n in sorted(r.measured.items()))
        p = r.prediction
        if p is None:
            lines.append(f"  {r.rule}: refused: {'; '.join(r.refused)}")
            continue
        band = (f"[{p.ci[0]:.3g}, {p.ci[1]:.3g}] ({p.confidence:.0%})" if r.not_an_interval is None
                else f"(the fit's band [{p.ci[0]:.3g}, {p.ci[1]:.3g}] is {r.not_an_interval})")
        lines.append(f"  {r.rule}: {p.median:.3g} epochs {band} at global batch {r.global_batch:g}, "
                     f"from {measured}"
                     + (f"; interval widened {p.widened:.3g}x: outside the measured batches "
                        "(the factor grows with the step beyond them, as the MLPerf backtest's "
                        "extrapolations need)" if p.widened > 1.0 else ""))
    b = sp.best_lr
    if b is None:
        lines.append(f"  best lr: {sp.best_lr_note}")
    else:
        lines.append(f"  best lr: {b.median:.3g} [{b.ci[0]:.3g}, {b.ci[1]:.3g}] ({b.confidence:.0%}), "
                     f"lr* ~ B^{b.exponent:.2f} from the best lr at "
                     + ", ".join(f"{k:g} ({v:.3g})" for k, v in sorted(b.best_by_batch.items()))
                     + (f"; {sp.best_lr_note}" if sp.best_lr_note else ""))
    methods = {r.prediction.method for r in sp.rules if r.prediction is not None}
    lines.append(f"method: {', '.join(sorted(methods)) or '-'}; no prediction beyond "
                 f"{MAX_FACTOR:g}x the measured batches")
    return "\n".join(lines)
