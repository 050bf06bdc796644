"""Keeping score in MLflow: each `scalesweep predict` and `scalesweep recommend` recorded on
the study's parent run, each `scalesweep solve` answer on its verification's parent run, and
each one's outcome written beside it once the experiment holds trials to score it with
(docs/beyond.md, "Predict, then verify" and "recommend"; docs/solve.md), in the form of
scalesweep/science/prediction/record.py, solve_record.py and recommend/record.py. The reading
side is scalesweep/dashboards/prediction_ledger.py."""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from scalesweep.mlflow_names import (
    ARM_PARAM,
    PREDICTION_OUTCOME_SUFFIX,
    PREDICTIONS_ARTIFACT_DIR,
    store_uri_for_mlflow,
)
from scalesweep.science.prediction.record import LedgerLine, StudyPrediction, metric_key, record_of
from scalesweep.science.recommend.recommendation import Recommendation
from scalesweep.science.recommend.record import KIND as RECOMMEND_KIND
from scalesweep.science.recommend.record import (
    RecommendLedgerLine,
    recommend_metric_key,
    recommend_record,
)
from scalesweep.science.recommend.record import record_metrics as recommend_metrics
from scalesweep.science.solve_record import (
    KIND,
    Line,
    SolveLedgerLine,
    record_metrics,
    solve_metric_key,
    solve_record,
)
from scalesweep.science.stats.arms import ArmSummary


def record_prediction(tracking_uri: str, sp: StudyPrediction, now: datetime | None = None) -> str:
    """Log ``predictions/<id>.json`` and the numbers as metrics on the study's parent run;
    returns the id (the UTC time it was made, and M)."""
    now = now or datetime.now(timezone.utc)
    pid = f"{now:%Y%m%dT%H%M%S%fZ}-ws{sp.world_size}"
    client = MlflowClient(store_uri_for_mlflow(tracking_uri))
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


def record_recommendation(tracking_uri: str, rec: Recommendation, now: datetime | None = None) -> str:
    """Log a `recommend` as a prediction (``predictions/<id>.json``, kind "recommend") and its
    numbers as metrics on the study's parent run; returns the id (the UTC time it was made, M)."""
    now = now or datetime.now(timezone.utc)
    pid = f"{now:%Y%m%dT%H%M%S%fZ}-ws{rec.world_size_m}-recommend"
    record = recommend_record(rec, prediction_id=pid, created=now.isoformat())
    client = MlflowClient(store_uri_for_mlflow(tracking_uri))
    client.log_text(rec.parent_run_id, json.dumps(record, indent=1),
                    f"{PREDICTIONS_ARTIFACT_DIR}/{pid}.json")
    ms = int(now.timestamp() * 1000)
    client.log_batch(rec.parent_run_id,
                     metrics=[Metric(k, v, ms, 0) for k, v in recommend_metrics(record).items()])
    return pid


class Verification(Protocol):
    """What a solve's verification left (launch/run.py's ``Outcome``)."""

    @property
    def parent_run_id(self) -> str: ...
    @property
    def experiment(self) -> str: ...
    @property
    def arms(self) -> Sequence[ArmSummary]: ...
    @property
    def trials(self) -> Sequence[Mapping[str, Any]]: ...  # the summary JSON's objects


def record_solve(tracking_uri: str, answer: Mapping[str, Any], verification: Verification,
                 now: datetime | None = None, search_seeds: Sequence[int] = ()) -> str | None:
    """Log a solve's verified recipe as a prediction (``predictions/<id>.json``, kind "solve")
    and its numbers as metrics on the verification's parent run, where the ledger's search of
    parent runs finds it; returns the id, or None where the answer claims nothing that can be
    checked (no recipe, no interval, or its arm not among the verification's arms)."""
    arm = next((a for a in verification.arms if a.arm == answer.get(ARM_PARAM)), None)
    if arm is None or arm.baseline_arm is None:
        return None
    now = now or datetime.now(timezone.utc)
    pid = f"{now:%Y%m%dT%H%M%S%fZ}-ws{answer['world_size']}-solve"
    ids = [str(t["mlflow_run_id"]) for t in verification.trials if t.get("mlflow_run_id")]
    record = solve_record(answer, prediction_id=pid, created=now.isoformat(),
                          experiment=verification.experiment,
                          parent_run_id=verification.parent_run_id, baseline_arm=arm.baseline_arm,
                          confidence=arm.confidence, trial_run_ids=ids, search_seeds=search_seeds)
    if record is None:
        return None
    client = MlflowClient(store_uri_for_mlflow(tracking_uri))
    parent = verification.parent_run_id
    client.log_text(parent, json.dumps(record, indent=1), f"{PREDICTIONS_ARTIFACT_DIR}/{pid}.json")
    ms = int(now.timestamp() * 1000)
    client.log_batch(parent, metrics=[Metric(k, v, ms, 0) for k, v in record_metrics(record).items()])
    return pid


def write_outcomes(tracking_uri: str, lines: Sequence[Line]) -> int:
    """Beside each verified prediction: ``predictions/<id>.outcome.json`` (per rule the observed
    median, its seeds and runs, hit) and the metrics ``...observed`` (where finite) and
    ``...hit`` (1 or 0; none while censored); a solve or recommend line's as
    :func:`_write_kind_outcome` writes it. An outcome already
    written as it stands is not written again, so the metrics get a new point only when the
    outcome changed. Returns how many predictions got one."""
    client = MlflowClient(store_uri_for_mlflow(tracking_uri))
    written = sum(_write_kind_outcome(client, x) for x in lines
                  if isinstance(x, SolveLedgerLine | RecommendLedgerLine) and x.outcome is not None)
    by: dict[tuple[str, str], list[LedgerLine]] = {}
    for x in lines:
        if isinstance(x, LedgerLine) and x.outcome is not None:
            by.setdefault((x.parent_run_id, x.prediction_id), []).append(x)
    ms = int(datetime.now(timezone.utc).timestamp() * 1000)
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


def _write_kind_outcome(client: MlflowClient, x: SolveLedgerLine | RecommendLedgerLine) -> bool:
    """A scored solve or recommend line's outcome beside its record, and the metrics
    ``<kind>.ws<M>.hit`` (none while censored) and ``.ratio_observed`` (where the observed
    median is a number); False where the same outcome is there already."""
    kind, key = ((KIND, solve_metric_key) if isinstance(x, SolveLedgerLine)
                 else (RECOMMEND_KIND, recommend_metric_key))
    outcome = x.outcome_json()
    path = f"{PREDICTIONS_ARTIFACT_DIR}/{x.prediction_id}{PREDICTION_OUTCOME_SUFFIX}"
    if _written(client, x.parent_run_id, path, "outcome") == outcome:
        return False
    now = datetime.now(timezone.utc)
    client.log_text(x.parent_run_id, json.dumps(
        {"id": x.prediction_id, "kind": kind, "scored": now.isoformat(), "outcome": outcome},
        indent=1), path)
    ms = int(now.timestamp() * 1000)
    values = {"ratio_observed": outcome["observed"], "hit": outcome["hit"]}
    metrics = [Metric(key(x.world_size, what), float(v), ms, 0)
               for what, v in values.items() if v is not None]
    if metrics:
        client.log_batch(x.parent_run_id, metrics=metrics)
    return True


def _outcome_of(x: LedgerLine) -> dict[str, Any]:
    o = x.outcome
    assert o is not None
    finite = math.isfinite(o.observed)
    return {"observed": o.observed if finite else None, "observed_never": not finite,
            "seeds": o.seeds, "run_ids": list(o.run_ids), "ci": list(x.ci), "hit": x.scored.hit}


def _written(client: MlflowClient, run_id: str, path: str, key: str = "rules") -> dict[str, Any] | None:
    """The ``key`` part (a predict's "rules", a solve's "outcome") of the outcome already at
    ``path`` on the run, None where there is none."""
    folder = path.rsplit("/", 1)[0]
    if path not in {a.path for a in client.list_artifacts(run_id, folder)}:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        local = client.download_artifacts(run_id, path, tmp)
        part: dict[str, Any] | None = json.loads(Path(local).read_text(encoding="utf-8")).get(key)
    return part
