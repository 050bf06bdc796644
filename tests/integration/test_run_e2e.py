"""`scalesweep run` end to end: real Ray, real MLflow (sqlite; an `mlflow server` process:
tests/integration/test_postgres.py, over HTTP with basic auth). A whole study's records (the
summary JSON, the MLflow runs, the report) are checked against each other on the API
walkthrough's run of the same sweep (tests/integration/test_api_run.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from scalesweep.mlflow_names import PARENT_TAG
from tests.conftest import RayHead
from tests.support.helpers import SWEEPS, scalesweep

pytestmark = pytest.mark.slow
SMOKE = str(SWEEPS / "smoke.yaml")
TRIALS = {"ws2-warmup20-none", "ws4-warmup20-none", "ws4-warmup20-linear", "ws4-warmup20-sqrt"}


def test_stop_at_target_ends_trials_early_as_stopped(tmp_path: Path, ray_head: RayHead) -> None:
    # --no-report too: the tables, no report, and `scalesweep report` makes it afterwards
    proc = scalesweep("run", "--no-report", SMOKE, "--set", "stop_at_target=true",
                      "--set", "target={metric: dev_loss, value: 0.3}",
                      "--summary-json", "out/s.json", *ray_head.args(), cwd=tmp_path, **ray_head.env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "out/s.json").read_text())  # its folder made
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (parent,) = {client.get_run(t["mlflow_run_id"]).data.tags[PARENT_TAG] for t in summary}
    assert f"report: not made (--no-report); make it with scalesweep report --run-id {parent}" \
        in proc.stdout, proc.stdout
    assert all(t["name"] in proc.stdout for t in summary)  # the trial table, all the same
    assert not (tmp_path / "reports").exists() and client.list_artifacts(parent) == []
    made = scalesweep("report", "--run-id", parent, "--tracking-uri",
                      f"sqlite:///{tmp_path / 'mlflow.db'}", cwd=tmp_path)
    assert made.returncode == 0 and (tmp_path / "reports" / parent / "report.html").is_file(), made.stderr
    # report prints the tables run printed, recomputed from MLflow: the trial table as it was,
    # the arm table's lines the same, the baseline first (the others fastest first, not in plan order)
    trial_table, arm_table = made.stdout.split("\nreport: ")[0].split("\n\n")
    assert trial_table in proc.stdout
    arm_lines = arm_table.splitlines()
    assert arm_lines[1].startswith("ws2-warmup20-none ") and "baseline" in arm_lines[1]
    assert all(line in proc.stdout.splitlines() for line in arm_lines), (arm_table, proc.stdout)
    assert len(arm_lines) == 1 + len(TRIALS) + 1 + len(TRIALS) - 1  # head, arms, legend, verdicts
    for t in summary:
        assert t["status"] == "stopped"
        run = client.get_run(t["mlflow_run_id"])
        assert run.info.status == "FINISHED" and run.data.tags["status"] == "stopped"
        last = client.get_metric_history(t["mlflow_run_id"], "dev_loss")[-1]
        assert last.value <= 0.3 and last.step < t["total_updates"]
        # met between evals (interpolated), or already at the first eval: then only a bound
        assert t["crossing"] in ("interpolated", "at_first_eval")
        reached = t["updates_to_target"] if t["crossing"] == "interpolated" else t["updates_to_target_hi"]
        assert reached is not None and reached <= last.step


def test_asha_search_ends_every_trial_with_a_final_status(tmp_path: Path, ray_head: RayHead) -> None:
    # 2 epochs: ASHA's grace period (1 epoch) and max_t (2) still leave it a rung to stop at
    proc = scalesweep("run", "--no-report", SMOKE, "--set", "search.trial_scheduler=asha",
                      "--set", "training.epochs=2", "--summary-json", "s.json", *ray_head.args(),
                      cwd=tmp_path, **ray_head.env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    assert {t["status"] for t in summary} <= {"completed", "stopped"}
    assert {t["name"] for t in summary} == TRIALS
