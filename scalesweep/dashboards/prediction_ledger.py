"""Predictions kept in MLflow, read back and scored (docs/beyond.md, "Predict, then verify").

`scalesweep predict` (and `recommend`: scalesweep/dashboards/recommend/ledger.py) records each
prediction on the study's parent run as the artifact
``predictions/<id>.json`` (:func:`scalesweep.science.prediction.record.record_of` makes it, and
holds the ledger's lines this module fills). This module reads those back from every
experiment (or one), and scores each against the trials its experiment holds at the predicted
global batch, from any parent run (a verification sweep logs to the same experiment): per lr
rule, the seeds of the best setting there, as the predictor takes its inputs. Reads only; the
orchestrator writes (scalesweep/orchestrator/tracking/predictions.py).
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mlflow.tracking import MlflowClient

from scalesweep.dashboards.convergence_table import StudyTrial, study_trials
from scalesweep.dashboards.mlflow_data import load_study
from scalesweep.dashboards.prediction import points_of_rule, usable_trials
from scalesweep.dashboards.recommend.ledger import SOLVE_EXPERIMENT_SUFFIX, claims, recommend_lines
from scalesweep.dashboards.solve_ledger import is_solve, solve_lines
from scalesweep.mlflow_names import (
    PREDICTION_OUTCOME_SUFFIX,
    PREDICTIONS_ARTIFACT_DIR,
    ROLE_TAG,
    store_uri_for_mlflow,
)
from scalesweep.science.prediction.ledger import observed_median, running_hit_rate
from scalesweep.science.prediction.record import LedgerLine, RuleOutcome
from scalesweep.science.recommend.record import RecommendLedgerLine, is_recommend
from scalesweep.science.solve_record import Line, SolveLedgerLine


def _parents(client: MlflowClient, experiment_id: str) -> list[str]:
    runs = client.search_runs([experiment_id], f"tags.`{ROLE_TAG}` = 'parent'",
                              max_results=1000, order_by=["attributes.start_time ASC"])
    return [r.info.run_id for r in runs]


def records_on(client: MlflowClient, run_id: str) -> list[dict[str, Any]]:
    """The predictions recorded on one parent run, oldest first."""
    names = [a.path for a in client.list_artifacts(run_id, PREDICTIONS_ARTIFACT_DIR)
             if a.path.endswith(".json") and not a.path.endswith(PREDICTION_OUTCOME_SUFFIX)]
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            local = client.download_artifacts(run_id, name, tmp)
            out.append(json.loads(Path(local).read_text(encoding="utf-8")))
    return sorted(out, key=lambda r: (str(r["created"]), str(r["id"])))


def parent_studies(tracking_uri: str, parent_run_ids: Sequence[str]) -> dict[str, list[StudyTrial]]:
    """Each parent run's trials, read once for both kinds of line."""
    return {pid: study_trials(load_study(tracking_uri, parent_run_id=pid)) for pid in parent_run_ids}


def outcomes(trials: Sequence[StudyTrial], global_batch: float,
             rules: Sequence[str]) -> dict[str, RuleOutcome]:
    """Per rule, the observed median at ``global_batch`` (the best setting's seeds there)."""
    at = [t for t in trials if _batch(t) == global_batch]
    out = {}
    for rule in rules:
        points = [p for p in points_of_rule(at, rule) if p.batch == global_batch]
        if points:
            (p,) = points
            mine = [t for t in at if str(t.run.get("scaling_rule")) == rule]
            ids = tuple(sorted(t.run_id for t in mine))
            # a seed that never reached has its last eval as its bracket's low end
            never = [t.summary.epochs_to_target_lo for t in mine if t.summary.crossing == "never"
                     and t.summary.epochs_to_target_lo is not None]
            out[rule] = RuleOutcome(rule, len(p.epochs), observed_median(p.epochs), ids,
                                    min(never) if never else None)
    return out


def _batch(t: StudyTrial) -> float | None:
    try:
        return float(t.run["global_batch"])  # type: ignore[arg-type]
    except (TypeError, ValueError, KeyError):
        return None


def ledger_lines(tracking_uri: str, experiment: str | None = None) -> list[Line]:
    """Every recorded prediction's rules (those it made: refused ones are not predictions) and
    every recorded solve answer (scalesweep/dashboards/solve_ledger.py), by creation time,
    scored against the trials their experiment holds now."""
    client = MlflowClient(store_uri_for_mlflow(tracking_uri))
    if experiment is None:
        exps = list(client.search_experiments(max_results=1000))
    else:
        one = client.get_experiment_by_name(experiment)
        if one is None:
            raise ValueError(f"no MLflow experiment named {experiment!r}")
        exps = [one]
    lines: list[Line] = []
    for exp in exps:
        parents = _parents(client, exp.experiment_id)
        records = [r for pid in parents for r in records_on(client, pid)]
        if not records:
            continue
        studies = parent_studies(tracking_uri, parents)
        trials = [t for pid in parents for t in usable_trials(studies[pid])]  # fixed-batch ones
        lines += solve_lines(exp.name, records, studies)
        if any(claims(r) for r in records):
            lines += recommend_lines(exp.name, records,
                                     {**studies, **_solve_studies(client, tracking_uri, exp.name)})
        for rec in (r for r in records if not is_solve(r) and not is_recommend(r)):
            made = [r for r in rec["rules"] if r["median"] is not None]
            found = outcomes(trials, float(rec["global_batch"]), [r["rule"] for r in made])
            for r in made:
                lines.append(LedgerLine(
                    exp.name, str(rec["parent_run_id"]), str(rec["id"]), str(rec["created"]),
                    int(rec["world_size"]), float(rec["global_batch"]), str(r["rule"]),
                    float(r["median"]), (float(r["ci"][0]), float(r["ci"][1])),
                    float(r["confidence"]), found.get(str(r["rule"]))))
    return sorted(lines, key=lambda x: (x.created, x.prediction_id, x.rule))


def _solve_studies(client: MlflowClient, tracking_uri: str, experiment: str
                   ) -> dict[str, list[StudyTrial]]:
    """The trials of the study's solve experiment (``<name>-solve``), per parent run; none
    where there is no such experiment."""
    exp = client.get_experiment_by_name(experiment + SOLVE_EXPERIMENT_SUFFIX)
    return {} if exp is None else parent_studies(tracking_uri, _parents(client, exp.experiment_id))


def _cells(x: Line) -> tuple[str, str, str, str]:
    """The rule, median, interval and observed columns: a solve line's are epochs ratios, and
    its rule column says so (its observed median may be a bound: "≥ 2")."""
    if isinstance(x, RecommendLedgerLine):
        return (f"{x.rule} (ratio M/N)", f"{x.median:.3g}",
                f"{x.interval_text()} ({x.confidence:.0%})", x.observed_text())
    if isinstance(x, SolveLedgerLine):
        return (f"{x.rule} (ratio)", "-" if x.median is None else f"{x.median:.3g}",
                f"{x.interval_text()} ({x.confidence:.0%})", x.observed_text())
    s = x.scored
    observed = ("-" if s.observed is None else "never" if not math.isfinite(s.observed)
                else f"{s.observed:.3g}")
    return (x.rule, f"{x.median:.3g}", f"[{x.ci[0]:.3g}, {x.ci[1]:.3g}] ({x.confidence:.0%})",
            observed)


def render_ledger(lines: Sequence[Line]) -> str:
    if not lines:
        return "no predictions recorded"
    rates = running_hit_rate([x.scored for x in lines])
    rows = [("study", "M", "rule", "median", "interval", "observed", "result", "hit rate so far")]
    for x, rate in zip(lines, rates, strict=True):
        so_far = ("-" if rate.rate is None
                  else f"{rate.hits}/{rate.verified} = {rate.rate:.3f} (nominal {rate.nominal:.2f})")
        rows.append((x.experiment, str(x.world_size), *_cells(x), x.scored.result, so_far))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    text = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    last = rates[-1]
    pending = sum(1 for x in lines if x.outcome is None)
    censored = sum(1 for x in lines if x.scored.result == "censored")
    text.append(f"hit rate: {last.hits}/{last.verified}"
                + ("" if last.rate is None else f" = {last.rate:.3f} against nominal "
                   f"{last.nominal:.2f}")
                + f"; {pending} pending, {censored} censored (not counted"
                + ("; censored: the median seed never reached within the epochs the verification "
                   "trained, and the interval reaches past them: train longer to tell)"
                   if censored else ")"))
    if any(isinstance(x, SolveLedgerLine) for x in lines):
        text.append("(ratio): a solve answer's recipe; its median, interval and observed are the "
                    "paired epochs ratio recipe / baseline arm, not epochs, observed in the "
                    "experiment's runs other than the verification's")
    if any(isinstance(x, RecommendLedgerLine) for x in lines):
        text.append("(ratio M/N): a recommend recipe; its median, interval and observed are the "
                    "epochs ratio at M over the study's at N (its best arm), observed as the best "
                    "arm a later study or solve ran at M")
    reused = sum(x.reused for x in lines if isinstance(x, SolveLedgerLine))
    if reused:
        text.append(f"{reused} pair(s) of solve reruns left out: their seed was the search's or the "
                    "verification's, or an older run's, so they repeat a trial rather than test "
                    "the claim; rerun with new seeds (replicates.first_seed)")
    return "\n".join(text)
