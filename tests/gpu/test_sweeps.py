"""On one CUDA GPU, end to end with ``scalesweep run`` (its own local Ray, as a user runs it):
the example loop examples/ddp_demo_loop.py on a GPU worker, and a small study of two arms
(world size 4 under the none and linear lr rules) against its baseline (world size 2), every
trial a ddp trial with ``resources.gpus_per_worker: 1``. The one GPU bounds each trial to one
worker (P = 1 playing V = 2 or 4 virtual ranks), nccl; the trials run one after another."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.integration.test_user_loop_e2e import _with_module
from tests.support.helpers import SWEEPS, scalesweep

pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.local_ray, pytest.mark.timeout(420)]
GPU = ("--set", "resources.gpus_per_worker=1")


def test_the_example_loop_trains_on_a_gpu_worker(tmp_path: Path) -> None:
    _with_module(tmp_path, "examples", "ddp_demo_loop.py")
    proc = scalesweep("run", str(SWEEPS / "own_loop.yaml"), "--summary-json", "s.json", *GPU,
                      "--set", "axes.world_size=[1]", "--set", "training.epochs=1",
                      cwd=tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [trial] = json.loads((tmp_path / "s.json").read_text())
    assert (trial["status"], trial["backend"], trial["physical_workers"]) == ("completed", "ddp", 1)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    dev = sorted(client.get_metric_history(trial["mlflow_run_id"], "dev_loss"), key=lambda m: m.step)
    assert dev[-1].step == trial["total_updates"] and dev[-1].value < dev[0].value


def test_a_two_arm_study_runs_on_the_gpu(tmp_path: Path) -> None:
    proc = scalesweep("run", str(SWEEPS / "smoke.yaml"), "--summary-json", "out/summary.json", *GPU,
                      "--set", "backend=ddp", "--set", "axes.scaling_rule=[none, linear]",
                      "--set", "training.epochs=2", cwd=tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "out/summary.json").read_text())
    assert {t["name"] for t in summary} == {"ws2-warmup20-none", "ws4-warmup20-none",
                                            "ws4-warmup20-linear"}
    for t in summary:
        assert (t["status"], t["backend"], t["physical_workers"]) == ("completed", "ddp", 1), t["name"]
        assert t["final_dev_loss"] is not None and t["train_seconds"] > 0
    assert "report: reports/smoke/report.html" in proc.stdout
    assert (tmp_path / "reports/smoke/report.html").is_file()
