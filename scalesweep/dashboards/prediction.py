"""`scalesweep predict`: from a finished study, epochs to target at a world size it did not run,
per lr rule, with an interval (docs/beyond.md, "Predict, then verify").

Reads the study from MLflow as the report and `advise` do (the trials' summaries, on the logged
history). Per lr rule (the trials' ``scaling_rule``), each measured global batch contributes its
seeds' epochs to target: the setting (warmup rule, free axes) with the fewest median epochs
there, a seed that never reached counting as +inf. At the reference batch every lr rule is the
same trial (the planner merged them), so that trial belongs to each rule. The late-training
noise scale, where the trials measured it, is the second source of
:func:`scalesweep.science.stats.predict.predict`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scalesweep.dashboards.advice import late_noise_scale
from scalesweep.dashboards.convergence_table import StudyTrial, study_trials
from scalesweep.dashboards.mlflow_data import Study, load_study
from scalesweep.mlflow_names import STATUS_TAG
from scalesweep.science.stats.predict import (
    MAX_FACTOR,
    BatchPoint,
    Prediction,
    PredictionRefused,
    predict,
)

#: a ramp's trials ran at several batches; the law is over constant ones
_RAMPED_OFF = ("", "none", "nan")


@dataclass(frozen=True)
class RulePrediction:
    rule: str
    world_size: int
    global_batch: float
    measured: dict[float, int]  # global batch -> seeds used there
    prediction: Prediction | None
    refused: list[str]
    updates_per_epoch: float | None  # at the predicted world size

    def as_json(self) -> dict[str, Any]:
        p = self.prediction
        out: dict[str, Any] = {
            "rule": self.rule, "world_size": self.world_size, "global_batch": self.global_batch,
            "measured_global_batches": {f"{b:g}": n for b, n in sorted(self.measured.items())},
            "epochs_to_target_median": None if p is None else p.median,
            "epochs_to_target_ci": None if p is None else list(p.ci),
            "updates_to_target_median": None, "updates_to_target_ci": None,
            "confidence": None if p is None else p.confidence,
            "b_crit": None if p is None or not math.isfinite(p.b_crit) else p.b_crit,
            "error_seeds": None if p is None else p.seeds, "error_fit": None if p is None else p.fit,
            "noise_scale_epochs": None if p is None or p.noise_scale_epochs is None
            else list(p.noise_scale_epochs),
            "method": None if p is None else p.method, "refused": self.refused,
        }  # fmt: skip
        if p is not None and self.updates_per_epoch:
            out["updates_to_target_median"] = p.median * self.updates_per_epoch
            out["updates_to_target_ci"] = [x * self.updates_per_epoch for x in p.ci]
        return out


@dataclass(frozen=True)
class StudyPrediction:
    experiment: str
    parent_run_id: str
    target: float | None
    world_size: int
    noise_scale: float | None
    rules: list[RulePrediction]


def _num(x: object) -> float | None:
    try:
        v = float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _epochs(t: StudyTrial) -> float | None:
    """A seed's epochs to target: the crossing, +inf when never, the bound at the first eval."""
    s = t.summary
    if s.crossing == "never":
        return math.inf
    if s.crossing == "at_first_eval":
        return s.epochs_to_target_hi
    return s.epochs_to_target


def _usable(t: StudyTrial) -> bool:
    ramp = str(t.run.get("batch_ramp", "none"))
    return ramp in _RAMPED_OFF and _num(t.run.get("global_batch")) is not None


def _points(trials: Sequence[StudyTrial], rule: str) -> list[BatchPoint]:
    """Per global batch, the seeds of the best setting of ``rule`` there."""
    by_batch: dict[float, dict[tuple[tuple[str, str], ...], list[float]]] = {}
    for t in trials:
        p = t.run
        batch = _num(p["global_batch"])
        assert batch is not None
        at_reference = batch == _num(p.get("reference_global_batch"))
        if str(p.get("scaling_rule")) != rule and not at_reference:
            continue
        epochs = _epochs(t)
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


def predict_study(study: Study, world_size: int, confidence: float = 0.90) -> StudyPrediction:
    trials = [t for t in study_trials(study) if _usable(t)]
    if not trials:
        raise PredictionRefused([f"study {study.experiment_name!r} has no trial with a fixed "
                                 "global batch"])
    shapes = [(_num(t.run["global_batch"]) or math.nan, _num(t.run.get("world_size")) or math.nan,
               _num(t.run.get("updates_per_epoch")) or math.nan) for t in trials]
    per_worker = statistics.median(b / w for b, w, _ in shapes)
    samples = statistics.median(b * u for b, _, u in shapes)  # samples per epoch
    batch = float(world_size * per_worker)
    ok = {t.run_id for t in trials if str(t.run.get(STATUS_TAG)) not in ("diverged", "failed")}
    noise, _, _ = late_noise_scale(study, ok)
    rules = sorted({str(t.run.get("scaling_rule")) for t in trials})
    out = []
    for rule in rules:
        points = _points(trials, rule)
        upe = samples / batch if math.isfinite(samples) else None
        measured = {p.batch: len(p.epochs) for p in points}
        try:
            pred = predict(points, batch, noise_scale=noise, confidence=confidence)
            out.append(RulePrediction(rule, world_size, batch, measured, pred, [], upe))
        except PredictionRefused as e:
            out.append(RulePrediction(rule, world_size, batch, measured, None, e.reasons, upe))
    return StudyPrediction(study.experiment_name, study.parent_run_id, study.target_value,
                           world_size, noise, out)


def load_prediction(tracking_uri: str, *, experiment: str | None, parent_run_id: str | None,
                    world_size: int) -> StudyPrediction:
    study = load_study(tracking_uri, experiment=experiment, parent_run_id=parent_run_id)
    return predict_study(study, world_size)


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
        lines.append(f"  {r.rule}: {p.median:.3g} epochs [{p.ci[0]:.3g}, {p.ci[1]:.3g}] "
                     f"({p.confidence:.0%}) at global batch {r.global_batch:g}, from {measured}")
    methods = {r.prediction.method for r in sp.rules if r.prediction is not None}
    lines.append(f"method: {', '.join(sorted(methods)) or '-'}; no prediction beyond "
                 f"{MAX_FACTOR:g}x the measured batches")
    return "\n".join(lines)
