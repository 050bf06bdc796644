"""Keeping score in MLflow: each `scalesweep predict` recorded on the study's parent run, and
each prediction's outcome written beside it once the experiment holds trials at its batch
(docs/beyond.md, "Predict, then verify"), in the form of scalesweep/science/prediction_record.py.
The reading side is scalesweep/dashboards/prediction_ledger.py."""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from scalesweep.mlflow_names import PREDICTION_OUTCOME_SUFFIX, PREDICTIONS_ARTIFACT_DIR
from scalesweep.science.prediction_record import LedgerLine, StudyPrediction, metric_key, record_of


def record_prediction(tracking_uri: str, sp: StudyPrediction, now: datetime | None = None) -> str:
    """Log ``predictions/<id>.json`` and the numbers as metrics on the study's parent run;
    returns the id (the UTC time it was made, and M)."""
    now = now or datetime.now(timezone.utc)
    pid = f"{now:%Y%m%dT%H%M%S%fZ}-ws{sp.world_size}"
    client = MlflowClient(tracking_uri)
    record = record_of(sp, pid, now.isoformat())
    client.log_text(sp.parent_run_id, json.dumps(record, indent=1), f"{PREDICTIONS_ARTIFACT_DIR}/{pid}.json")
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
    ``...hit`` (1 or 0; none while censored). An outcome already written as it stands is not
    written again, so the metrics get a new point only when the outcome changed. Returns how
    many predictions got one."""
    client = MlflowClient(tracking_uri)
    by: dict[tuple[str, str], list[LedgerLine]] = {}
    for x in lines:
        if x.outcome is not None:
            by.setdefault((x.parent_run_id, x.prediction_id), []).append(x)
    ms = int(datetime.now(timezone.utc).timestamp() * 1000)
    written = 0
    for (parent, pid), verified in by.items():
        rules = {x.rule: _outcome_of(x) for x in verified}
        path = f"{PREDICTIONS_ARTIFACT_DIR}/{pid}{PREDICTION_OUTCOME_SUFFIX}"
        if _written(client, parent, path) == rules:
            continue
        metrics = []
        for x in verified:
            observed, hit = rules[x.rule]["observed"], x.scored.hit
            if observed is not None:
                metrics.append(Metric(metric_key(x.world_size, x.rule, "observed"), observed, ms, 0))
            if hit is not None:
                metrics.append(Metric(metric_key(x.world_size, x.rule, "hit"), float(hit), ms, 0))
        outcome = {"id": pid, "scored": datetime.now(timezone.utc).isoformat(), "rules": rules}
        client.log_text(parent, json.dumps(outcome, indent=1), path)
        if metrics:
            client.log_batch(parent, metrics=metrics)
        written += 1
    return written


def _outcome_of(x: LedgerLine) -> dict[str, Any]:
    o = x.outcome
    assert o is not None
    finite = math.isfinite(o.observed)
    return {"observed": o.observed if finite else None, "observed_never": not finite,
            "seeds": o.seeds, "run_ids": list(o.run_ids), "ci": list(x.ci), "hit": x.scored.hit}


def _written(client: MlflowClient, run_id: str, path: str) -> dict[str, Any] | None:
    """The rules of the outcome already at ``path`` on the run, None where there is none."""
    folder = path.rsplit("/", 1)[0]
    if path not in {a.path for a in client.list_artifacts(run_id, folder)}:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        local = client.download_artifacts(run_id, path, tmp)
        rules: dict[str, Any] = json.loads(Path(local).read_text(encoding="utf-8"))["rules"]
    return rules
