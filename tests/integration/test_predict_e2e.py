"""Predict, verify, score, end to end: the smoke study run for real (the session's Ray head),
a prediction at 8 workers recorded, its --verify sweep run into the same experiment, and the
ledger then scoring every predicted rule against the verification's seeds (none pending)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import RayHead
from tests.support.helpers import ROOT, scalesweep

M = 8


@pytest.mark.slow
def test_a_prediction_is_verified_by_its_own_verification_sweep(tmp_path: Path,
                                                                ray_head: RayHead) -> None:
    # two lr rules of smoke's three: enough to predict; the verification adds linear and sqrt anyway
    run = scalesweep("run", "--no-report", str(ROOT / "sweeps" / "smoke.yaml"),
                     "--set", "axes.scaling_rule=[none, linear]", *ray_head.args(), cwd=tmp_path,
                     **ray_head.env())
    assert run.returncode == 0, run.stdout + run.stderr
    pred = scalesweep("predict", "--experiment", "smoke", "--world-size", str(M), "--json",
                      "--verify", "verify.yaml", cwd=tmp_path)
    assert pred.returncode == 0, pred.stdout + pred.stderr
    predicted = {r["rule"]: r for r in json.loads(pred.stdout) if r["epochs_to_target_median"]}
    assert predicted, pred.stdout
    assert "scalesweep run verify.yaml" in pred.stderr and "recorded: predictions/" in pred.stderr
    # the study's own copy in the sweep directory `run` wrote, as resume reads it
    assert "from the study's sweep file via sweep directory " in pred.stderr, pred.stderr
    spec = yaml.safe_load((tmp_path / "verify.yaml").read_text())
    assert spec["axes"]["world_size"] == [2, M] and spec["name"] == "smoke"

    # two seeds are enough to score; the file's own adaptive seeds would add more where undecided
    check = scalesweep("run", "--no-report", "verify.yaml", "--set", "replicates={min: 2, max: 2}",
                       *ray_head.args(), cwd=tmp_path, **ray_head.env())
    assert check.returncode == 0, check.stdout + check.stderr
    ledger = scalesweep("predict", "--ledger", "--json", cwd=tmp_path)
    assert ledger.returncode == 0, ledger.stdout + ledger.stderr
    lines = json.loads(ledger.stdout)
    assert {x["rule"] for x in lines} == set(predicted)
    for x in lines:
        assert x["result"] != "pending" and x["observed_seeds"] == 2, x
        inside = x["observed"] is not None and x["ci"][0] <= x["observed"] <= x["ci"][1]
        assert x["hit"] is inside
    assert lines[-1]["running_verified"] == len(predicted)
    # the verification's parent run (in the study's experiment) is tagged with the study's id,
    # so predicting again reads the study, not the verification
    study = pred.stderr.split("on parent run ", 1)[1].split()[0]
    again = scalesweep("predict", "--experiment", "smoke", "--world-size", str(M), "--no-record",
                       cwd=tmp_path)
    assert again.returncode == 0 and f"(parent run {study})" in again.stdout, again.stdout
