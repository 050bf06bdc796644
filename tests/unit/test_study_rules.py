"""The rules that judge a study (scalesweep.science.stats.rules.StudyRules) are made once, from
the sweep, at plan time; the parent run logs them as one JSON param, and a finished study read
back from MLflow judges by the very same record: `run`'s tables and the report's cannot drift
apart. Studies logged before the record are read from their separate params, to the same
values."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from scalesweep.dashboards.mlflow_data import load_study
from scalesweep.mlflow_names import EQUIVALENCE_MARGIN_PARAM, STUDY_RULES_PARAM
from scalesweep.orchestrator.plan import adaptive
from scalesweep.orchestrator.plan.cluster import ClusterInfo
from scalesweep.orchestrator.plan.rows import Plan, make_plan
from scalesweep.orchestrator.spec.load import load_sweep
from scalesweep.orchestrator.tracking.sweep_runs import parent_params
from scalesweep.orchestrator.tracking.tracker import _param_str
from scalesweep.science.stats.rules import StudyRules

ROOT = Path(__file__).resolve().parents[2]
LAPTOP = ClusterInfo(cpus=2, gpus=0, memory_gb=24, where="test machine")
#: a fixed design, an adaptive one, the long study's seven levels, a metric to maximise
SWEEPS = [("smoke.yaml", []), ("wenet_4v16.yaml", []), ("wenet_4v16_long.yaml", []),
          ("smoke.yaml", ["workload={name: digits_cnn}",
                          "target={metric: dev_accuracy, relative_to_baseline: 0.02}"])]


def _plan(name: str, sets: list[str]) -> Plan:
    return make_plan(load_sweep(ROOT / "sweeps" / name, sets), LAPTOP)


@pytest.mark.parametrize(("name", "sets"), SWEEPS)
def test_the_plan_makes_the_rules_once_from_the_sweep(name: str, sets: list[str]) -> None:
    plan = _plan(name, sets)
    rules, target, rep = plan.rules, plan.sweep.spec.target, plan.sweep.spec.replicates
    assert plan.rules is rules  # made once per plan
    design = adaptive.design(plan)
    assert rules.confidence == design.per_look and rules.last_confidence == design.last
    # the headline's level takes the headline's decision; the other levels are one family
    headline = target.relative_to_baseline
    assert rules.headline_level == (headline if headline in target.levels else None)
    assert (rules.margin, rules.levels, rules.smoothing) == (
        target.equivalence_margin, tuple(target.levels), target.smoothing)
    assert rules.max_seeds == (None if rep is None else rep.max)
    assert rules.target is None and rules.notes == ()  # the data's, filled in at summary time


def test_a_metric_to_maximise_is_judged_upward() -> None:
    assert _plan(*SWEEPS[3]).rules.mode == "max" and _plan(*SWEEPS[0]).rules.mode == "min"


@pytest.mark.parametrize(("name", "sets"), SWEEPS)
def test_the_param_reads_back_into_the_same_record(name: str, sets: list[str]) -> None:
    rules = _plan(name, sets).rules
    param = _param_str(parent_params(_plan(name, sets))[STUDY_RULES_PARAM])
    assert StudyRules.from_param(param) == rules


@pytest.mark.parametrize(("raw", "says"), [
    ("{", "not JSON"),
    ('{"margin": 0.1}', "exactly confidence, last_confidence, margin, levels, mode, smoothing, "
                        "headline_level, max_seeds"),
    ('{"confidence": 0.9, "margin": 0.1, "levels": [], "mode": "up", "smoothing": 0, '
     '"family": null, "max_seeds": null}', "study_rules.mode='up': must be min or max"),
])
def test_a_damaged_param_is_refused_naming_what_is_wrong(raw: str, says: str) -> None:
    with pytest.raises(ValueError, match="study_rules") as info:
        StudyRules.from_param(raw)
    assert says in str(info.value)


def _log_parent(tmp_path: Path, params: dict[str, str]) -> str:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    run = client.create_run(client.create_experiment("rules"), run_name="study")
    for key, value in params.items():
        client.log_param(run.info.run_id, key, value)
    client.set_terminated(run.info.run_id)
    return uri


@pytest.mark.parametrize("legacy", [False, True], ids=["study_rules", "separate params"])
def test_a_study_read_back_from_mlflow_judges_by_the_plans_rules(tmp_path: Path, legacy: bool) -> None:
    plan = _plan("wenet_4v16.yaml", [])  # adaptive: the looks' confidences, the headline level, max
    params = {k: _param_str(v) for k, v in parent_params(plan).items() if v is not None}
    if legacy:  # a study logged before the one record
        del params[STUDY_RULES_PARAM]
    else:  # the record is the one source: a separate param that says otherwise is not read
        params[EQUIVALENCE_MARGIN_PARAM] = "0.5"
    study = load_study(_log_parent(tmp_path, params), experiment="rules")
    if legacy:  # separate params never carried the last look's confidence
        assert study.rules == replace(plan.rules, last_confidence=None)
    else:
        assert study.rules == plan.rules
    assert (study.rules.confidence, study.rules.margin, study.rules.headline_level) == (
        plan.rules.confidence, plan.rules.margin, 0.1)
