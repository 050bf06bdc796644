"""A batch-size ramp through `scalesweep run` on a real Ray and MLflow (the ramp's unit tests:
tests/unit/test_batch_ramp.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import RayHead
from tests.support.helpers import SWEEPS, scalesweep

# -- end to end: real Ray Tune, real MLflow ----------------------------------------------------


@pytest.mark.slow
def test_a_ramp_sweep_runs_end_to_end_and_mlflow_shows_the_stages(tmp_path: Path, ray_head: RayHead) -> None:
    """The smoke MLP at world size 4, fixed batch vs a ramp 2 (2 epochs) -> 4, through `run`:
    the trial driver hands the stages to the loop, MLflow holds the batch per step. 4 epochs of
    smoke's 6: 2 at each stage."""
    proc = scalesweep("run", str(SWEEPS / "smoke.yaml"), "--summary-json", "summary.json",
                      "--set", "axes.world_size=[4]", "--set", "axes.scaling_rule=[linear]",
                      "--set", "axes.warmup_rule=[scaled]",
                      "--set", "axes.training.batch_ramp=[none, '2:2']",
                      "--set", "target={metric: dev_loss, value: 0.3}", "--set", "baseline=null",
                      "--set", "training.epochs=4",
                      *ray_head.args(), cwd=tmp_path, **ray_head.env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("smoke")
    assert exp is not None
    runs = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])
            if r.data.tags.get("scalesweep.role") == "trial"}
    assert set(runs) == {"ws4-warmup10-linear-rampnone", "ws4-warmup10-linear-ramp2x2"}
    ramp = runs["ws4-warmup10-linear-ramp2x2"]
    assert ramp.data.params["batch_ramp"] == "2:2"
    assert runs["ws4-warmup10-linear-rampnone"].data.params["batch_ramp"] == "none"
    history = {m.step: m.value for m in client.get_metric_history(ramp.info.run_id, "global_batch")}
    epochs = {m.step: m.value for m in client.get_metric_history(ramp.info.run_id, "epoch")}
    # 2048 samples, batch 16: 2 ranks -> 64 updates per epoch, 4 -> 32; 2 epochs at 2 ranks, 2 at 4
    assert {history[k] for k in history if k <= 128} == {32.0}
    assert {history[k] for k in history if k > 128} == {64.0}
    assert epochs[128] == 2.0 and max(epochs.values()) == 4.0
    assert int(ramp.data.params["total_updates"]) == max(history) == 2 * 64 + 2 * 32
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert {t["name"]: t["batch_ramp"] for t in summary} == {
        "ws4-warmup10-linear-rampnone": "none", "ws4-warmup10-linear-ramp2x2": "2:2"}
    # the report's arms, read back from MLflow, say which is which
    arms = json.loads((tmp_path / "reports" / "smoke" / "arms.json").read_text())
    assert {a["arm"]: a["axes"]["batch_ramp"] for a in arms} == {
        "ws4-warmup10-linear-rampnone": "none", "ws4-warmup10-linear-ramp2x2": "2:2"}
