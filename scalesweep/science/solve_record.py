"""What `scalesweep solve` claims for its verified recipe, kept and scored as a prediction
(docs/solve.md, "Checking the recipe later"; docs/beyond.md, the ledger).

The claim: trials of the recipe at M, paired by seed with the baseline arm, have a median
epochs ratio (recipe / baseline) inside the verification's interval at the headline target.
The orchestrator records it on the verification's parent run beside `predict`'s records
(scalesweep/orchestrator/tracking/predictions.py); the ledger scores it against the recipe's
arm under the experiment's *other* parent runs (scalesweep/dashboards/solve_ledger.py), never
the verification's own trials: those chose the recipe and set its interval, so they cannot
test it. Its numbers are ratios, not epochs. Pure: no MLflow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scalesweep.mlflow_names import ARM_PARAM, BASELINE_ARM_PARAM, SOLVE_PREDICTION_METRIC_FORMAT
from scalesweep.science.prediction.ledger import HitRate, Scored, bounded_hit
from scalesweep.science.prediction.record import LedgerLine
from scalesweep.science.recommend.record import RecommendLedgerLine
from scalesweep.science.stats.replicates import Estimate, Observation, finite_or_none, median_interval

#: the record's ``kind`` (a `predict` record has none)
KIND = "solve"
#: what a solve record's median, interval and observed value are
QUANTITY = "epochs_ratio"


def solve_metric_key(world_size: int, what: str) -> str:
    """``solve.ws16.ratio_median``: one metric per recorded number."""
    return SOLVE_PREDICTION_METRIC_FORMAT.format(world_size=world_size, what=what)


def solve_record(answer: Mapping[str, Any], *, prediction_id: str, created: str, experiment: str,
                 parent_run_id: str, baseline_arm: str, confidence: float,
                 trial_run_ids: Sequence[str], search_seeds: Sequence[int] = ()) -> dict[str, Any] | None:
    """The JSON recorded for a solve's answer (launch/solve.py's ``answer``); None when it
    claims nothing that can be checked: no verified recipe, or a ratio interval without a
    lower end (an open upper end is a claim: "at least this much slower")."""
    ci = answer.get("ratio_ci")
    if answer.get(ARM_PARAM) is None or ci is None or ci[0] is None:
        return None
    m = int(answer["world_size"])
    return {
        "kind": KIND, "id": prediction_id, "created": created, "experiment": experiment,
        "parent_run_id": parent_run_id, "world_size": m, ARM_PARAM: str(answer[ARM_PARAM]),
        BASELINE_ARM_PARAM: baseline_arm, "lr_factor": float(answer["lr_factor"]),
        "warmup_steps": int(answer["warmup_steps"]), "peak_lr": answer.get("peak_lr"),
        "quantity": QUANTITY,
        "claim": f"trials of this recipe at {m} workers, paired by seed with the baseline arm, "
                 "have a median epochs ratio (recipe / baseline) inside ratio_ci at the "
                 "headline target (null: no upper end)",
        "ratio_median": answer.get("ratio_median"),
        "ratio_ci": [float(ci[0]), None if ci[1] is None else float(ci[1])],
        "confidence": confidence, "decision": answer.get("decision"),
        "source_trial_run_ids": sorted(trial_run_ids),
        # the seeds the search picked the recipe on: a later pair at one of them is no test
        "search_seeds": sorted(int(s) for s in search_seeds),
    }  # fmt: skip


def record_metrics(record: Mapping[str, Any]) -> dict[str, float]:
    """The recorded numbers as metrics: ``ratio_median`` (where it is a number, not a bound),
    ``ratio_lo`` and ``ratio_hi`` (where finite)."""
    m = int(record["world_size"])
    lo, hi = record["ratio_ci"]
    values = {"ratio_median": record.get("ratio_median"), "ratio_lo": lo, "ratio_hi": hi}
    return {solve_metric_key(m, what): float(v) for what, v in values.items() if v is not None}


@dataclass(frozen=True)
class SolveOutcome:
    """The recipe measured again: every seed pair of the experiment's other parent runs, its
    epochs ratio to the baseline arm, pooled into one median."""

    #: the pooled median, or the bound it is known to lie in (a recipe seed that never reached
    #: makes its pair a lower bound)
    median: Estimate
    seeds: int
    run_ids: tuple[str, ...]
    parent_run_ids: tuple[str, ...]

    @classmethod
    def pooled(cls, ratios: Sequence[Observation], run_ids: Sequence[str],
               parent_run_ids: Sequence[str]) -> SolveOutcome | None:
        """None where there is no pair to pool (the prediction is pending)."""
        if not ratios:
            return None
        return cls(median_interval(list(ratios)).median, len(ratios), tuple(sorted(run_ids)),
                   tuple(parent_run_ids))


@dataclass(frozen=True)
class SolveLedgerLine:
    """One recorded solve, scored when the experiment's other parent runs hold its recipe."""

    experiment: str
    parent_run_id: str
    prediction_id: str
    created: str
    world_size: int
    arm: str
    baseline_arm: str
    lr_factor: float
    warmup_steps: int
    #: the verification's median ratio; None where it was only a bound
    median: float | None
    #: the verification's interval (hi +inf where it had no upper end)
    ci: tuple[float, float]
    confidence: float
    outcome: SolveOutcome | None
    #: pairs the other runs held but the ledger left out: their seed was the search's or the
    #: verification's, or an older run's pair already (scalesweep/dashboards/solve_ledger.py)
    reused: int = 0

    @classmethod
    def of(cls, record: Mapping[str, Any], experiment: str, outcome: SolveOutcome | None,
           reused: int = 0) -> SolveLedgerLine:
        lo, hi = record["ratio_ci"]
        median = record.get("ratio_median")
        return cls(experiment, str(record["parent_run_id"]), str(record["id"]), str(record["created"]),
                   int(record["world_size"]), str(record[ARM_PARAM]), str(record[BASELINE_ARM_PARAM]),
                   float(record["lr_factor"]), int(record["warmup_steps"]),
                   None if median is None else float(median),
                   (float(lo), math.inf if hi is None else float(hi)), float(record["confidence"]),
                   outcome, reused)

    @property
    def rule(self) -> str:
        """The ledger's rule column: the recipe, as the solve answer words it."""
        return f"solve lr×{self.lr_factor:.3g} w{self.warmup_steps}"

    @property
    def scored(self) -> Scored:
        if self.outcome is None:
            return Scored(self.confidence, None, None)
        m = self.outcome.median
        shown = m.value if m.value is not None else m.lo
        return Scored(self.confidence, shown, bounded_hit(m.lo, m.hi, self.ci))

    def interval_text(self) -> str:
        lo, hi = self.ci
        return f"[{lo:.3g}, {hi:.3g}]" if math.isfinite(hi) else f"[{lo:.3g}, inf)"

    def observed_text(self) -> str:
        """The pooled median, or its bound ("≥ 2"); "-" while pending."""
        return "-" if self.outcome is None else self.outcome.median.text()

    def outcome_json(self) -> dict[str, Any]:
        """What is written beside the record once scored (``predictions/<id>.outcome.json``)."""
        o = self.outcome
        assert o is not None, "a pending solve line has no outcome to write"
        return {"observed": _observed(o), "observed_kind": o.median.kind,
                "observed_bounds": [finite_or_none(o.median.lo), finite_or_none(o.median.hi)],
                "seeds": o.seeds, "reused_seeds": self.reused, "run_ids": list(o.run_ids),
                "parent_run_ids": list(o.parent_run_ids),
                "ci": [self.ci[0], finite_or_none(self.ci[1])], "hit": self.scored.hit}

    def as_json(self, rate: HitRate) -> dict[str, Any]:
        s, o = self.scored, self.outcome
        return {
            "kind": KIND, "quantity": QUANTITY, "experiment": self.experiment,
            "parent_run_id": self.parent_run_id, "prediction_id": self.prediction_id,
            "created": self.created, "world_size": self.world_size, "rule": self.rule,
            ARM_PARAM: self.arm, BASELINE_ARM_PARAM: self.baseline_arm, "lr_factor": self.lr_factor,
            "warmup_steps": self.warmup_steps, "median": self.median,
            "ci": [self.ci[0], finite_or_none(self.ci[1])], "confidence": self.confidence,
            "observed": None if o is None else _observed(o),
            "observed_kind": None if o is None else o.median.kind,
            "observed_bounds": None if o is None else [finite_or_none(o.median.lo),
                                                       finite_or_none(o.median.hi)],
            "observed_seeds": None if o is None else o.seeds, "reused_seeds": self.reused,
            "observed_parent_run_ids": None if o is None else list(o.parent_run_ids),
            "result": s.result, "hit": s.hit, "running_verified": rate.verified,
            "running_hits": rate.hits, "running_hit_rate": rate.rate, "running_nominal": rate.nominal,
        }  # fmt: skip


def _observed(o: SolveOutcome) -> float | None:
    """The pooled median as a number, None where it is only a bound."""
    v = o.median.value
    return v if o.median.kind == "value" and v is not None and math.isfinite(v) else None


#: a line of the ledger: a `predict` rule, a `solve` recipe or a `recommend` recipe
Line = LedgerLine | SolveLedgerLine | RecommendLedgerLine
