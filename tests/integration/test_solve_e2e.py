"""`scalesweep solve` end to end on a workload whose best lr is known (tests/support/quadratic_workload.py):
the search (Optuna's TPE through Ray Tune) finds it within one grid step, the verification
decides it with seeds, and MLflow holds the search and the verification as two parent runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from scalesweep.mlflow_names import ROLE_TAG, SOLVE_RATIO_METRIC, SOLVE_SEARCH_TAG, SOLVE_TAG
from scalesweep.science.solve import GRID_STEP
from tests.conftest import RayHead
from tests.support.helpers import ROOT, scalesweep
from tests.support.quadratic_workload import BEST_LR
from tests.unit.test_solve import QUADRATIC

pytestmark = pytest.mark.slow

REFERENCE_LR = 0.0606  # QUADRATIC's optimizer.lr: the best factor at 4 workers is BEST_LR / it


def test_solve_finds_the_known_best_lr_within_one_grid_step(tmp_path: Path, ray_head: RayHead) -> None:
    sweep = tmp_path / "q.yaml"
    sweep.write_text(QUADRATIC)
    proc = scalesweep("solve", str(sweep), "--world-size", "4", "--budget", "64", "--candidates", "1",
                      "--json", *ray_head.args(), cwd=tmp_path, timeout=900, PYTHONPATH=str(ROOT),
                      **ray_head.env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    answer = json.loads(proc.stdout)  # stdout is the answer alone; the progress went to stderr
    best = BEST_LR / REFERENCE_LR
    assert best / GRID_STEP <= answer["lr_factor"] <= best * GRID_STEP, answer
    assert answer["peak_lr"] == pytest.approx(answer["lr_factor"] * REFERENCE_LR, rel=1e-6)
    assert answer["recipe"]["settings"]["optimizer.lr"] == pytest.approx(answer["peak_lr"])
    assert answer["decision"] in ("faster", "slower", "equivalent", "not resolved")
    lo, hi = answer["ratio_ci"]
    assert lo <= answer["ratio_median"] <= hi
    assert [level["level"] for level in answer["ratio_by_target"]] == [0.1, 0.25, 0.5, 1.0, 2.0]
    # lr factor 2..8 and warmup 1..4 in steps of sqrt(2): 5 x 5 points of 4 epochs
    assert answer["grid_trial_epochs"] == 5 * 5 * 4
    assert 0 < answer["search_trial_epochs_used"] < answer["trial_epochs_used"]
    assert "search budget" in proc.stderr and "baseline seed 0: target dev_loss 0.001" in proc.stderr

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("solve-quadratic-solve")
    assert exp is not None
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    search = [r for r in runs if r.data.tags.get(SOLVE_TAG) == "search"]
    verify = [r for r in runs if r.data.tags.get(SOLVE_TAG) == "verify"]
    assert len(search) == len(verify) == 1
    assert search[0].data.tags[ROLE_TAG] == "solve"  # not a study: `report` passes it over
    assert verify[0].data.tags[SOLVE_SEARCH_TAG] == search[0].info.run_id
    assert verify[0].info.run_id == answer["verification_parent_run_id"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == search[0].info.run_id]
    candidates = [r for r in children if r.info.run_name.startswith("c")]
    assert len(children) - len(candidates) == 3  # the baseline seeds
    assert candidates and all(SOLVE_RATIO_METRIC in r.data.metrics for r in candidates)
    # every candidate's score is what its evals say: its last one, never made up
    assert all(math.isfinite(r.data.metrics[SOLVE_RATIO_METRIC]) for r in candidates)
    # the verification's report, made at the end as `run` makes a study's, shows the search
    report = (tmp_path / "reports" / "solve-quadratic-solve" / "report.html").read_text()
    assert "Solve: the search this study verifies" in report
    assert f"{len(candidates)} candidates" in report
