"""`scalesweep run` end to end: real Ray, real MLflow (sqlite; an `mlflow server` process:
tests/integration/test_postgres.py, over HTTP with basic auth)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from scalesweep.mlflow_names import PARENT_TAG
from tests.conftest import RayHead
from tests.support.helpers import SWEEPS, free_port, scalesweep

pytestmark = pytest.mark.slow
SMOKE = str(SWEEPS / "smoke.yaml")
TRIALS = {"ws2-warmup20-none", "ws4-warmup20-none", "ws4-warmup20-linear", "ws4-warmup20-sqrt"}


def _children(client: MlflowClient, experiment: str) -> tuple[object, list[object]]:
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    runs = client.search_runs([exp.experiment_id], max_results=100)
    parents = [r for r in runs if r.data.tags.get("scalesweep.role") == "parent"]
    assert len(parents) == 1
    parent = parents[0]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    return parent, children


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None or (isinstance(b, float) and math.isnan(b)):
        return a is None and (b is None or math.isnan(b))
    return math.isclose(a, b, rel_tol=1e-9)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory, ray_head: RayHead) -> tuple[Path, object]:
    cwd = tmp_path_factory.mktemp("smoke")
    proc = scalesweep("run", SMOKE, "--summary-json", "out/summary.json", *ray_head.args(), cwd=cwd,
                      **ray_head.env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return cwd, proc


def test_summary_json_has_every_trial_and_documented_field(smoke_run: tuple[Path, object]) -> None:
    cwd, proc = smoke_run
    summary = json.loads((cwd / "out/summary.json").read_text())
    assert {t["name"] for t in summary} == TRIALS
    for t in summary:
        for key in ("world_size", "scaling_rule", "warmup_rule", "global_batch", "peak_lr",
                    "warmup_steps", "warmup_epochs", "updates_per_epoch", "total_updates",
                    "backend", "physical_workers", "accum_grad", "seed", "feasible", "status",
                    "mlflow_run_id", "updates_to_target", "samples_to_target",
                    "epochs_to_target", "seconds_to_target", "final_dev_loss", "best_dev_loss",
                    "speedup_vs_baseline", "train_seconds"):
            assert key in t, key
        assert t["status"] == "completed"
        assert t["train_seconds"] > 0
    base = next(t for t in summary if t["name"] == "ws2-warmup20-none")
    assert base["speedup_vs_baseline"] == pytest.approx(1.0)
    out = proc.stdout  # type: ignore[attr-defined]
    assert "report: reports/smoke/report.html" in out
    assert "workflowType=machine_learning" in out


def test_mlflow_has_parent_and_one_child_per_trial_with_clean_curves(
        smoke_run: tuple[Path, object]) -> None:
    cwd, _ = smoke_run
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    parent, children = _children(client, "smoke")
    assert parent.info.status == "FINISHED"  # type: ignore[attr-defined]
    assert {c.info.run_name for c in children} == TRIALS  # type: ignore[attr-defined]
    for child in children:
        info, data = child.info, child.data  # type: ignore[attr-defined]
        assert info.status == "FINISHED" and data.tags["status"] == "completed"
        for key in ("world_size", "global_batch", "scaling_rule", "base_lr", "peak_lr",
                    "warmup_steps", "warmup_rule", "scheduler", "backend", "physical_workers",
                    "accum_grad", "seed", "workload"):
            assert key in data.params, key
        total = int(data.params["total_updates"])
        for key in ("dev_loss", "train_loss", "lr", "epoch", "samples_seen", "wall_s"):
            steps = [m.step for m in client.get_metric_history(info.run_id, key)]
            assert steps == sorted(set(steps)), f"{key}: duplicated or unordered steps"
            assert steps[-1] == total
        epochs = {m.step: m.value for m in client.get_metric_history(info.run_id, "epoch")}
        upe = int(data.params["updates_per_epoch"])
        assert all(v == pytest.approx(s / upe) for s, v in epochs.items())
    artifacts = [a.path for a in client.list_artifacts(parent.info.run_id, "report")]  # type: ignore[attr-defined]
    assert "report/report.html" in artifacts


def test_summary_mlflow_and_report_agree_on_epochs_to_target(
        smoke_run: tuple[Path, object]) -> None:
    cwd, _ = smoke_run
    summary = {t["name"]: t for t in json.loads((cwd / "out/summary.json").read_text())}
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    _, children = _children(client, "smoke")
    report = {r["trial_name"] if "trial_name" in r else r["name"]: r
              for r in json.loads((cwd / "reports/smoke/trials.json").read_text())}
    reached = 0
    for child in children:
        name = child.info.run_name  # type: ignore[attr-defined]
        logged = child.data.metrics.get("epochs_to_target")  # type: ignore[attr-defined]
        ours = summary[name]["epochs_to_target"]
        assert _close(ours, logged)
        assert _close(ours, report[name]["epochs_to_target"])
        reached += ours is not None
    assert reached >= 1


def test_unreachable_tracking_server_fails_fast_before_any_compute(tmp_path: Path) -> None:
    start = time.monotonic()
    proc = scalesweep("run", SMOKE, "--tracking-uri", f"http://127.0.0.1:{free_port()}",
                      cwd=tmp_path, timeout=120)
    assert proc.returncode == 1
    assert "cannot reach the MLflow tracking server" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert time.monotonic() - start < 60
    assert not (tmp_path / "scalesweep_runs").exists()


def test_stop_at_target_ends_trials_early_as_stopped(tmp_path: Path, ray_head: RayHead) -> None:
    # --no-report too: the tables, no report, and `scalesweep report` makes it afterwards
    proc = scalesweep("run", "--no-report", SMOKE, "--set", "stop_at_target=true",
                      "--set", "target={metric: dev_loss, value: 0.3}",
                      "--summary-json", "s.json", *ray_head.args(), cwd=tmp_path, **ray_head.env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (parent,) = {client.get_run(t["mlflow_run_id"]).data.tags[PARENT_TAG] for t in summary}
    assert f"report: not made (--no-report); make it with scalesweep report --run-id {parent}" \
        in proc.stdout, proc.stdout
    assert all(t["name"] in proc.stdout for t in summary)  # the trial table, all the same
    assert not (tmp_path / "reports").exists() and client.list_artifacts(parent) == []
    made = scalesweep("report", "--run-id", parent, "--tracking-uri",
                      f"sqlite:///{tmp_path / 'mlflow.db'}", cwd=tmp_path)
    assert made.returncode == 0 and (tmp_path / "reports" / parent / "report.html").is_file(), made.stderr
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
    proc = scalesweep("run", "--no-report", SMOKE, "--set", "search.scheduler=asha",
                      "--set", "training.epochs=2", "--summary-json", "s.json", *ray_head.args(),
                      cwd=tmp_path, **ray_head.env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    assert {t["status"] for t in summary} <= {"completed", "stopped"}
    assert len(summary) == 4
