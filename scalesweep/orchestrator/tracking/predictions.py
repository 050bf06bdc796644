"""Keeping score in MLflow: each `scalesweep predict` recorded on the study's parent run, and
each prediction's outcome written beside it once the experiment holds trials at its batch
(docs/beyond.md, "Predict, then verify"). The reading side is
scalesweep/dashboards/prediction_record.py."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import datetime, timezone

from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from scalesweep.dashboards.prediction import StudyPrediction
from scalesweep.dashboards.prediction_record import (
    OUTCOME_SUFFIX,
    PREDICTIONS_DIR,
    LedgerLine,
    metric_key,
    record_of,
)


def record_prediction(tracking_uri: str, sp: StudyPrediction, now: datetime | None = None) -> str:
    """Log ``predictions/<id>.json`` and the numbers as metrics on the study's parent run;
    returns the id (the UTC time it was made, and M)."""
    now = now or datetime.now(timezone.utc)
    pid = f"{now:%Y%m%dT%H%M%S%fZ}-ws{sp.world_size}"
    client = MlflowClient(tracking_uri)
    record = record_of(sp, pid, now.isoformat())
    client.log_text(sp.parent_run_id, json.dumps(record, indent=1), f"{PREDICTIONS_DIR}/{pid}.json")
    ms = int(now.timestamp() * 1000)
    metrics = []
    for r in sp.rules:
        if r.prediction is None:
            continue
        p = r.prediction
        for what, v in (("epochs_median", p.median), ("epochs_lo", p.ci[0]), ("epochs_hi", p.ci[1])):
            metrics.append(Metric(metric_key(sp.world_size, r.rule, what), v, ms, 0))
    if sp.best_lr is not None:
        b = sp.best_lr
        for what, v in (("median", b.median), ("lo", b.ci[0]), ("hi", b.ci[1])):
            metrics.append(Metric(metric_key(sp.world_size, "best_lr", what), v, ms, 0))
    if metrics:
        client.log_batch(sp.parent_run_id, metrics=metrics)
    return pid


def write_outcomes(tracking_uri: str, lines: Sequence[LedgerLine]) -> int:
    """Beside each verified prediction: ``predictions/<id>.outcome.json`` (per rule the observed
    median, its seeds and runs, hit) and the metrics ``...observed`` (where finite) and
    ``...hit`` (1 or 0). Returns how many predictions got one."""
    client = MlflowClient(tracking_uri)
    by: dict[tuple[str, str], list[LedgerLine]] = {}
    for x in lines:
        if x.outcome is not None:
            by.setdefault((x.parent_run_id, x.prediction_id), []).append(x)
    ms = int(datetime.now(timezone.utc).timestamp() * 1000)
    for (parent, pid), verified in by.items():
        rules = {}
        metrics = []
        for x in verified:
            assert x.outcome is not None
            s = x.scored
            o = x.outcome
            rules[x.rule] = {"observed": o.observed if math.isfinite(o.observed) else None,
                             "observed_never": not math.isfinite(o.observed), "seeds": o.seeds,
                             "run_ids": list(o.run_ids), "ci": list(x.ci), "hit": s.hit}
            if math.isfinite(o.observed):
                metrics.append(Metric(metric_key(x.world_size, x.rule, "observed"), o.observed, ms, 0))
            metrics.append(Metric(metric_key(x.world_size, x.rule, "hit"), float(bool(s.hit)), ms, 0))
        outcome = {"id": pid, "scored": datetime.now(timezone.utc).isoformat(), "rules": rules}
        client.log_text(parent, json.dumps(outcome, indent=1), f"{PREDICTIONS_DIR}/{pid}{OUTCOME_SUFFIX}")
        client.log_batch(parent, metrics=metrics)
    return len(by)
