"""What `scalesweep recommend` claims, kept and scored as a prediction (docs/beyond.md,
"recommend"; the ledger of "Predict, then verify").

The claim: at M, the best setting a later study (or `solve`) measures there reaches the target
in a median number of epochs whose ratio to the study's at N (its best arm's median) lies
inside the recipe's epochs-ratio interval. The orchestrator records it on the study's parent
run beside `predict`'s records (scalesweep/orchestrator/tracking/predictions.py); the ledger
scores it against the trials at M's global batch under the experiment's *other* parent runs
(scalesweep/dashboards/recommend/ledger.py). Its numbers are ratios, not epochs. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scalesweep.mlflow_names import ARM_PARAM, RECOMMEND_PREDICTION_METRIC_FORMAT
from scalesweep.science.prediction.ledger import HitRate, Scored, is_hit
from scalesweep.science.recommend.recommendation import Recommendation
from scalesweep.science.stats.replicates import finite_or_none

#: the record's ``kind`` (a `predict` record has none)
KIND = "recommend"
#: what a recommend record's median, interval and observed value are
QUANTITY = "epochs_ratio_m_over_n"


def recommend_metric_key(world_size: int, what: str) -> str:
    """``recommend.ws16.ratio_median``: one metric per recorded number."""
    return RECOMMEND_PREDICTION_METRIC_FORMAT.format(world_size=world_size, what=what)


def is_recommend(record: Mapping[str, Any]) -> bool:
    return record.get("kind") == KIND


def recommend_record(rec: Recommendation, *, prediction_id: str, created: str) -> dict[str, Any]:
    """The JSON recorded for one recommendation (``ratio_ci`` None where the recipe has no
    epochs ratio: then it claims nothing the ledger can score)."""
    e = rec.recipe.epochs_ratio
    return {
        "kind": KIND, "id": prediction_id, "created": created, "experiment": rec.experiment,
        "parent_run_id": rec.parent_run_id, "source_trial_run_ids": list(rec.trial_run_ids),
        "world_size": rec.world_size_m, "global_batch": rec.batch_m,
        "world_size_n": rec.world_size_n, "global_batch_n": rec.batch_n,
        "n_arm": rec.n_arm, "n_epochs_median": finite_or_none(rec.n_epochs_median),
        "lr_factor": rec.lr_factor, "lr": rec.lr, "warmup_steps": rec.warmup_steps,
        "quantity": QUANTITY,
        "claim": f"the best setting measured later at {rec.world_size_m} workers has a median "
                 "epochs to target whose ratio to the study's at N (n_epochs_median) lies inside "
                 "ratio_ci",
        "ratio_median": None if e is None else e.median,
        "ratio_ci": None if e is None else [finite_or_none(x) for x in e.ci],
        "confidence": None if e is None else e.confidence,
        "recommendation": rec.as_json(),
    }  # fmt: skip


def record_metrics(record: Mapping[str, Any]) -> dict[str, float]:
    """The recorded numbers as metrics (where they are numbers)."""
    m = int(record["world_size"])
    ci = record.get("ratio_ci") or [None, None]
    values = {"ratio_median": record.get("ratio_median"), "ratio_lo": ci[0], "ratio_hi": ci[1],
              "lr_factor": record.get("lr_factor")}
    return {recommend_metric_key(m, what): float(v) for what, v in values.items() if v is not None}


@dataclass(frozen=True)
class RecommendOutcome:
    """The best setting measured later at M: its seeds' median epochs over N's."""

    arm: str
    seeds: int
    #: the ratio (+inf: the median seed never reached)
    observed: float
    run_ids: tuple[str, ...]
    parent_run_ids: tuple[str, ...]
    #: the fewest epochs a seed that never reached trained, over N's median (None: all reached)
    horizon: float | None = None


@dataclass(frozen=True)
class RecommendLedgerLine:
    """One recorded recommendation, scored when the experiment's other parent runs hold trials
    at its global batch."""

    experiment: str
    parent_run_id: str
    prediction_id: str
    created: str
    world_size: int
    global_batch: float
    lr_factor: float
    warmup_steps: int
    median: float
    ci: tuple[float, float]  # hi +inf where it had no upper end
    confidence: float
    outcome: RecommendOutcome | None

    @classmethod
    def of(cls, record: Mapping[str, Any], experiment: str,
           outcome: RecommendOutcome | None) -> RecommendLedgerLine:
        lo, hi = record["ratio_ci"]
        return cls(experiment, str(record["parent_run_id"]), str(record["id"]),
                   str(record["created"]), int(record["world_size"]), float(record["global_batch"]),
                   float(record["lr_factor"]), int(record["warmup_steps"]),
                   float(record["ratio_median"]), (float(lo), math.inf if hi is None else float(hi)),
                   float(record["confidence"]), outcome)

    @property
    def rule(self) -> str:
        """The ledger's rule column: the recipe."""
        return f"recommend lr×{self.lr_factor:.3g} w{self.warmup_steps}"

    @property
    def scored(self) -> Scored:
        if self.outcome is None:
            return Scored(self.confidence, None, None)
        o = self.outcome
        return Scored(self.confidence, o.observed, is_hit(o.observed, self.ci, o.horizon))

    def interval_text(self) -> str:
        lo, hi = self.ci
        return f"[{lo:.3g}, {hi:.3g}]" if math.isfinite(hi) else f"[{lo:.3g}, inf)"

    def observed_text(self) -> str:
        o = self.outcome
        return "-" if o is None else "never" if not math.isfinite(o.observed) else f"{o.observed:.3g}"

    def outcome_json(self) -> dict[str, Any]:
        """What is written beside the record once scored (``predictions/<id>.outcome.json``)."""
        o = self.outcome
        assert o is not None, "a pending recommend line has no outcome to write"
        return {"observed": finite_or_none(o.observed), "observed_never": not math.isfinite(o.observed),
                ARM_PARAM: o.arm, "seeds": o.seeds, "run_ids": list(o.run_ids),
                "parent_run_ids": list(o.parent_run_ids), "horizon": o.horizon,
                "ci": [self.ci[0], finite_or_none(self.ci[1])], "hit": self.scored.hit}

    def as_json(self, rate: HitRate) -> dict[str, Any]:
        s, o = self.scored, self.outcome
        return {
            "kind": KIND, "quantity": QUANTITY, "experiment": self.experiment,
            "parent_run_id": self.parent_run_id, "prediction_id": self.prediction_id,
            "created": self.created, "world_size": self.world_size,
            "global_batch": self.global_batch, "rule": self.rule, "lr_factor": self.lr_factor,
            "warmup_steps": self.warmup_steps, "median": self.median,
            "ci": [self.ci[0], finite_or_none(self.ci[1])], "confidence": self.confidence,
            "observed": None if o is None else finite_or_none(o.observed),
            "observed_never": o is not None and not math.isfinite(o.observed),
            "observed_arm": None if o is None else o.arm,
            "observed_seeds": None if o is None else o.seeds,
            "observed_parent_run_ids": None if o is None else list(o.parent_run_ids),
            "horizon": None if o is None else o.horizon,
            "result": s.result, "hit": s.hit, "running_verified": rate.verified,
            "running_hits": rate.hits, "running_hit_rate": rate.rate, "running_nominal": rate.nominal,
        }  # fmt: skip
