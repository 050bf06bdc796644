"""What a prediction of `scalesweep predict` is, and the form it is kept and scored in
(docs/beyond.md, "Predict, then verify"): the orchestrator records it on the study's parent run
(scalesweep/orchestrator/tracking/predictions.py), the dashboards compute it
(scalesweep/dashboards/prediction.py) and score what was recorded against the trials measured
later (scalesweep/dashboards/prediction_ledger.py). Both import this format from below them
rather than from each other. Pure: no MLflow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from scalesweep.mlflow_names import PREDICTION_METRIC_FORMAT
from scalesweep.science.prediction.best_lr import BestLr
from scalesweep.science.prediction.epochs import Prediction
from scalesweep.science.prediction.ledger import HitRate, Scored, is_hit


@dataclass(frozen=True)
class RulePrediction:
    rule: str
    world_size: int
    global_batch: float
    measured: dict[float, int]  # global batch -> seeds used there
    prediction: Prediction | None
    refused: list[str]
    updates_per_epoch: float | None  # at the predicted world size

    @property
    def one_seed_batches(self) -> list[float]:
        """The measured global batches with a single seed: with one, nothing measures how the
        seeds spread there (the bootstrap draws the same value every time), so the band
        printed around the median holds the fit's error alone and is not an interval."""
        return sorted(b for b, n in self.measured.items() if n < 2)

    @property
    def not_an_interval(self) -> str | None:
        """Why the band is not an interval (a batch with one seed), or None when it is one."""
        single = self.one_seed_batches
        if not single:
            return None
        where = (f"global batch {single[0]:g} has one seed" if len(single) == 1 else
                 f"global batches {', '.join(f'{b:g}' for b in single)} have one seed each")
        return (f"not an interval: {where}, so nothing measures how the seeds spread there; run "
                "2 or more seeds at every world size")

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
            # 1.0: not widened (between measured batches); else the factor outside them
            "interval_widened_by": None if p is None else p.widened,
            # None: the ci is an interval at its confidence; else why it is not one
            "not_an_interval": None if p is None else self.not_an_interval,
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
    #: the trials the prediction was made from
    trial_run_ids: tuple[str, ...] = ()
    best_lr: BestLr | None = None
    #: why there is no best lr (the study did not sweep lr, ...); empty when there is one
    best_lr_note: str = ""

    def best_lr_json(self) -> dict[str, Any]:
        b = self.best_lr
        if b is None:
            return {"median": None, "ci": None, "note": self.best_lr_note}
        return {"median": b.median, "ci": list(b.ci), "confidence": b.confidence,
                "exponent": b.exponent, "method": b.method, "note": self.best_lr_note,
                "best_by_batch": {f"{k:g}": v for k, v in sorted(b.best_by_batch.items())},
                "at_grid_edge": [f"{k:g}" for k in b.at_grid_edge]}



def record_of(sp: StudyPrediction, prediction_id: str, created: str) -> dict[str, Any]:
    """The JSON recorded for one `scalesweep predict` (all rules, refused ones too)."""
    rules = []
    for r in sp.rules:
        p = r.prediction
        rules.append({
            "rule": r.rule, "median": None if p is None else p.median,
            "ci": None if p is None else list(p.ci), "confidence": None if p is None else p.confidence,
            "method": None if p is None else p.method,
            "measured_global_batches": {f"{b:g}": n for b, n in sorted(r.measured.items())},
            "refused": r.refused,
        })  # fmt: skip
    return {
        "id": prediction_id, "created": created, "experiment": sp.experiment,
        "parent_run_id": sp.parent_run_id, "source_trial_run_ids": list(sp.trial_run_ids),
        "world_size": sp.world_size, "global_batch": sp.rules[0].global_batch if sp.rules else None,
        "target": sp.target, "noise_scale": sp.noise_scale, "rules": rules,
        "best_lr": sp.best_lr_json(),
    }  # fmt: skip


def metric_key(world_size: int, rule: str, what: str) -> str:
    """``predict.ws16.linear.epochs_median``: one metric per recorded number."""
    return PREDICTION_METRIC_FORMAT.format(world_size=world_size, rule=rule, what=what)


@dataclass(frozen=True)
class RuleOutcome:
    rule: str
    seeds: int
    observed: float
    run_ids: tuple[str, ...]
    #: the fewest epochs a seed that never reached trained (None: every seed reached)
    horizon: float | None = None


@dataclass(frozen=True)
class LedgerLine:
    """One rule of one recorded prediction, scored when the experiment has trials there."""

    experiment: str
    parent_run_id: str
    prediction_id: str
    created: str
    world_size: int
    global_batch: float
    rule: str
    median: float
    ci: tuple[float, float]
    confidence: float
    outcome: RuleOutcome | None

    @property
    def scored(self) -> Scored:
        if self.outcome is None:
            return Scored(self.confidence, None, None)
        o = self.outcome
        return Scored(self.confidence, o.observed, is_hit(o.observed, self.ci, o.horizon))

    def as_json(self, rate: HitRate) -> dict[str, Any]:
        s = self.scored
        return {
            "experiment": self.experiment, "parent_run_id": self.parent_run_id,
            "prediction_id": self.prediction_id, "created": self.created,
            "world_size": self.world_size, "global_batch": self.global_batch, "rule": self.rule,
            "median": self.median, "ci": list(self.ci), "confidence": self.confidence,
            "observed": None if s.observed is None or not math.isfinite(s.observed) else s.observed,
            "observed_never": s.observed is not None and not math.isfinite(s.observed),
            "observed_seeds": None if self.outcome is None else self.outcome.seeds,
            "result": s.result,
            "horizon": None if self.outcome is None else self.outcome.horizon,
            "hit": s.hit, "running_verified": rate.verified, "running_hits": rate.hits,
            "running_hit_rate": rate.rate, "running_nominal": rate.nominal,
        }  # fmt: skip
