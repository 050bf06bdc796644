"""Fused seeds end to end (resources.seeds_per_trial; docs/design.md, "Fused seeds"): the same
tiny study (mlp_regression, 2 arms x 2 seeds, float64) run on a real local Ray into real MLflow
sqlite stores, once with each seed its own trial and once with an arm's two seeds in one trial
process. Each seed's child run must be the same: name, params, every metric's whole history
(to 1e-6; only the clocks differ), its status; and so must the summary and the decisions."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from scalesweep.trainables import checkpointing
from scalesweep.trainables.trial_driver import simulate_checkpoints
from tests.conftest import RayHead
from tests.support.helpers import SWEEPS, scalesweep

pytestmark = pytest.mark.slow
SMOKE = str(SWEEPS / "smoke.yaml")
RTOL = 1e-6
#: what depends on the machine's clock, not on the training
CLOCKS = ("wall", "seconds")


def _run(cwd: Path, ray_head: RayHead, per_trial: int) -> str:
    proc = scalesweep("run", SMOKE, "--set", "axes.world_size=[2, 4]", "--set", "axes.scaling_rule=[none]",
                      "--set", "axes.seed=[0, 1]", "--set", "training.epochs=2",
                      "--set", "training.dtype=float64",
                      "--set", f"resources.seeds_per_trial={per_trial}", "--summary-json", "s.json",
                      *ray_head.args(), cwd=cwd, **ray_head.env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, ray_head: RayHead) -> dict[int, tuple[Path, str]]:
    out = {}
    for per_trial in (1, 2):
        cwd = tmp_path_factory.mktemp(f"fused{per_trial}")
        out[per_trial] = cwd, _run(cwd, ray_head, per_trial)
    return out


def _children(cwd: Path) -> dict[str, dict[str, Any]]:
    """Each child run: params, status tag and run status, and every metric's history."""
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("smoke")
    assert experiment is not None
    out = {}
    for run in client.search_runs([experiment.experiment_id]):
        if "mlflow.parentRunId" not in run.data.tags:
            continue
        histories = {key: [(m.step, m.value) for m in
                           sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)]
                     for key in run.data.metrics if not any(c in key for c in CLOCKS)}
        out[run.info.run_name] = {"params": run.data.params, "status": run.data.tags.get("status"),
                                  "run_status": run.info.status, "metrics": histories}
    return out


def _same(fused: Any, solo: Any, where: str) -> None:
    if isinstance(solo, float) and isinstance(fused, float):
        assert fused == pytest.approx(solo, rel=RTOL, abs=1e-12, nan_ok=True), where
    elif isinstance(solo, dict):
        assert isinstance(fused, dict) and sorted(fused) == sorted(solo), where
        for key in solo:
            if not any(c in key for c in CLOCKS) and key != "mlflow_run_id":
                _same(fused[key], solo[key], f"{where}.{key}")
    elif isinstance(solo, list | tuple):
        assert isinstance(fused, list | tuple) and len(fused) == len(solo), where
        for i, (f, s) in enumerate(zip(fused, solo, strict=True)):
            _same(f, s, f"{where}[{i}]")
    else:
        assert fused == solo, where


def test_each_seed_of_a_fused_trial_logs_its_solo_trials_run(runs: dict[int, tuple[Path, str]]) -> None:
    (solo_dir, _), (fused_dir, _) = runs[1], runs[2]
    solo, fused = _children(solo_dir), _children(fused_dir)
    assert sorted(solo) == ["ws2-warmup20-none-s0", "ws2-warmup20-none-s1",
                            "ws4-warmup20-none-s0", "ws4-warmup20-none-s1"]
    _same(fused, solo, "runs")
    for name, run in solo.items():
        assert run["status"] == "completed" and run["run_status"] == "FINISHED"
        steps = [s for s, _ in run["metrics"]["dev_loss"]]
        assert len(steps) >= 4 and steps == [s for s, _ in run["metrics"]["noise_scale"]], name
        # float64 and the same arithmetic up to summation order: equal far below 1e-6
        assert all(math.isfinite(v) for _, v in run["metrics"]["train_loss"])
    # one process per arm: the Tune trials were the fused ones
    assert {p.name for p in fused_dir.rglob("tune/ws*")} == {"ws2-warmup20-none-seeds0+1",
                                                                 "ws4-warmup20-none-seeds0+1"}
    # each seed's newest checkpoint, in its fused trial's, is whole and at its last step: what
    # resume would go on from
    sweep_dir = next(fused_dir.rglob("tune")).parent
    for name, run in solo.items():
        newest = simulate_checkpoints(sweep_dir, name)[0]
        assert newest.parent.parent.name.endswith("-seeds0+1") and checkpointing.incomplete(newest) is None
        meta = json.loads((newest / checkpointing.META_FILE).read_text())
        assert meta["progress"]["update"] == run["metrics"]["dev_loss"][-1][0]
        assert meta["progress"]["status"] == "completed"


def test_the_summary_and_the_decisions_are_the_same(runs: dict[int, tuple[Path, str]]) -> None:
    (solo_dir, _), (fused_dir, _) = runs[1], runs[2]
    solo = sorted(json.loads((solo_dir / "s.json").read_text()), key=lambda t: t["name"])
    fused = sorted(json.loads((fused_dir / "s.json").read_text()), key=lambda t: t["name"])
    _same(fused, solo, "summary")
    solo_arms = json.loads((solo_dir / "reports/smoke/arms.json").read_text())
    fused_arms = json.loads((fused_dir / "reports/smoke/arms.json").read_text())
    _same(fused_arms, solo_arms, "arms")
    assert [a["decision"] for a in fused_arms] == [a["decision"] for a in solo_arms]
