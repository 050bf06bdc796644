"""The framework adapters swept end to end: ``scalesweep run`` of sweeps/hf_trainer.yaml (a plain
``transformers.Trainer``) and sweeps/lightning.yaml (a plain Lightning ``Trainer``) on a real
Ray (world sizes 1 and 2 of real Ray Train workers, gloo), a real MLflow sqlite store, the
summary and the report: every evaluation logged with step = the framework's global step, and
the lr each update ran with equal to the planned schedule's."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from scalesweep.science import schedules
from scalesweep.trainables.user_loop import REPORT_FILE
from tests.conftest import RayHead
from tests.support.helpers import ROOT, SWEEPS, scalesweep

pytestmark = pytest.mark.slow


def _swept(cwd: Path, ray_head: RayHead, sweep: str, module: str) -> tuple[Path, str]:
    """The sweep run from ``cwd``, its loop's module copied there: Ray puts the driver's working
    directory on the workers' path (docs/workloads.md, "Your own Ray Train loop")."""
    (cwd / "examples").mkdir()
    for name in ("__init__.py", module):
        shutil.copy(ROOT / "examples" / name, cwd / "examples" / name)
    proc = scalesweep("run", str(SWEEPS / sweep), "--summary-json", "s.json", *ray_head.args(),
                      cwd=cwd, **ray_head.env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return cwd, proc.stdout


def _check_checkpoints(cwd: Path, holds: str) -> None:
    """Each trial's Ray Train run, named after the trial (a resume restores it by that name),
    kept the framework's checkpoints the reports carried, each with its report beside it (what
    a resumed sweep logs if the driver died before MLflow had it)."""
    for t in json.loads((cwd / "s.json").read_text()):
        kept = sorted(p for p in cwd.glob(f"scalesweep_runs/*/train/{t['name']}/checkpoint_*")
                      if p.is_dir())
        assert kept and all((c / holds).is_file() for c in kept), (t["name"], kept)
        reports = [json.loads((c / REPORT_FILE).read_text()) for c in kept]
        assert all(r["update"] % t["eval_every"] == 0 or r["update"] == t["total_updates"]
                   for r in reports)


def _check_trials(cwd: Path, loop: str, warmups: dict[int, int]) -> None:
    trials = json.loads((cwd / "s.json").read_text())
    assert sorted(t["world_size"] for t in trials) == [1, 2]
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    for t in trials:
        assert t["status"] == "completed" and t["backend"] == "ddp", t
        assert t["physical_workers"] == t["world_size"]
        assert t["warmup_steps"] == warmups[t["world_size"]]
        run = client.get_run(t["mlflow_run_id"])
        assert run.info.status == "FINISHED" and run.data.tags["status"] == "completed"
        assert run.data.params["workload"] == loop
        evals = list(range(t["eval_every"], t["total_updates"] + 1, t["eval_every"]))
        assert evals[-1] == t["total_updates"]
        dev = client.get_metric_history(t["mlflow_run_id"], "dev_loss")
        assert sorted(m.step for m in dev) == evals  # step = the framework's global step, once each
        assert all(math.isfinite(m.value) for m in dev)
        epochs = {m.step: m.value for m in client.get_metric_history(t["mlflow_run_id"], "epoch")}
        assert epochs == {k: k / t["updates_per_epoch"] for k in evals}
        samples = client.get_metric_history(t["mlflow_run_id"], "samples_seen")
        assert {m.step: m.value for m in samples} == {k: k * t["global_batch"] for k in evals}
        # the lr the optimizer ran each reported update with: the plan's (warmup, then decay)
        schedule = schedules.build({"type": "warmuplr", "warmup_steps": t["warmup_steps"]},
                                   t["peak_lr"])
        lrs = {m.step: m.value for m in client.get_metric_history(t["mlflow_run_id"], "lr")}
        assert lrs == pytest.approx({k: schedule.lr(k) for k in evals}, rel=1e-12)
        assert t["train_seconds"] > 0 and t["final_dev_loss"] is not None
        assert t["final_dev_loss"] < dev[0].value  # it learns
    base = next(t for t in trials if t["world_size"] == 1)
    assert base["crossing"] == "interpolated"


@pytest.mark.timeout(600)
def test_a_hf_trainer_script_is_swept(tmp_path: Path, ray_head: RayHead) -> None:
    cwd, stdout = _swept(tmp_path, ray_head, "hf_trainer.yaml", "hf_trainer_loop.py")
    _check_trials(cwd, "examples.hf_trainer_loop:train_loop_per_worker", {1: 16, 2: 8})
    _check_checkpoints(cwd, "trainer_state.json")
    assert (cwd / "reports/hf-trainer/report.html").exists()
    assert "report: reports/hf-trainer/report.html" in stdout


@pytest.mark.timeout(600)
def test_a_lightning_script_is_swept(tmp_path: Path, ray_head: RayHead) -> None:
    cwd, _ = _swept(tmp_path, ray_head, "lightning.yaml", "lightning_loop.py")
    _check_trials(cwd, "examples.lightning_loop:train_loop_per_worker", {1: 16, 2: 8})
    _check_checkpoints(cwd, "lightning.ckpt")
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    for t in json.loads((cwd / "s.json").read_text()):  # val_accuracy, logged by the module
        accuracy = client.get_metric_history(t["mlflow_run_id"], "dev_accuracy")
        assert len(accuracy) == t["total_updates"] // t["eval_every"]
        assert all(0 <= m.value <= 1 for m in accuracy)
    assert (cwd / "reports/lightning/report.html").exists()
