"""The framework adapters swept end to end: ``scalesweep run`` of sweeps/hf_trainer.yaml (a plain
``transformers.Trainer``) and sweeps/lightning.yaml (a plain Lightning ``Trainer``) on a real
Ray (world sizes 1 and 2 of real Ray Train workers, gloo), a real MLflow sqlite store, the
summary and the report: every evaluation logged with step = the framework's global step, and
the lr each update ran with equal to the planned schedule's. The world-size-2 trial's workers
die right after their second report, and Ray Train's restart goes on from the framework's
checkpoint, not from update 0."""

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


#: the example's loop, but on the first start of a world-size-2 trial every worker dies (as a lost
#: node's would) right after its second report returns. Ray Train keeps one report waiting per
#: worker, so by then the first report's checkpoint is surely registered and the restart has a
#: checkpoint to go on from. Each start records the updates it reported.
CRASH_ONCE = """
import json
import os
from pathlib import Path

import ray.train

from examples.{module} import train_loop_per_worker as loop
from scalesweep import loop_helpers

RECORD = Path({record!r})


def train_loop_per_worker(config):
    context = ray.train.get_context()
    size, rank = context.get_world_size(), context.get_world_rank()
    restart = ray.train.get_checkpoint() is not None
    record = RECORD / f"{{size}}-{{rank}}-{{'restart' if restart else 'first'}}.json"
    sent, report = [], loop_helpers.report

    def report_then_die(*args, **kwargs):
        out = report(*args, **kwargs)
        sent.append(kwargs["update"])
        record.write_text(json.dumps(sent))
        if size == 2 and not restart and len(sent) == 2:
            os._exit(1)
        return out

    loop_helpers.report = report_then_die  # the adapter's callback binds it when it is made
    loop(config)
"""


def _swept(cwd: Path, ray_head: RayHead, sweep: str, module: str) -> tuple[Path, str]:
    """The sweep run from ``cwd``, its loop's module copied there (Ray puts the driver's working
    directory on the workers' path, docs/workloads.md, "Your own Ray Train loop"), run through
    ``CRASH_ONCE``."""
    (cwd / "examples").mkdir()
    for name in ("__init__.py", module):
        shutil.copy(ROOT / "examples" / name, cwd / "examples" / name)
    (cwd / "record").mkdir()
    (cwd / "examples" / "crash_once.py").write_text(
        CRASH_ONCE.format(module=module.removesuffix(".py"), record=str(cwd / "record")))
    proc = scalesweep("run", str(SWEEPS / sweep), "--summary-json", "s.json", *ray_head.args(),
                      "--set", "workload.train_loop=examples.crash_once:train_loop_per_worker",
                      cwd=cwd, **ray_head.env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return cwd, proc.stdout


def _check_restart(cwd: Path) -> None:
    """The world-size-2 trial's first start died after reporting evals 1 and 2; its restart
    resumed from the checkpoint of eval 1 or 2 (whichever Ray Train had registered), so its
    first report is eval 2 or 3, never eval 1 as a restart from update 0 would make it, and it
    reported through to the end. The world-size-1 trial never restarted."""
    trial = next(t for t in json.loads((cwd / "s.json").read_text()) if t["world_size"] == 2)
    every, total = trial["eval_every"], trial["total_updates"]
    for rank in (0, 1):
        first = json.loads((cwd / "record" / f"2-{rank}-first.json").read_text())
        assert first == [every, 2 * every], (rank, first)
        restart = json.loads((cwd / "record" / f"2-{rank}-restart.json").read_text())
        assert restart[0] in (2 * every, 3 * every) and restart[-1] == total, (rank, restart)
        assert restart == list(range(restart[0], total + 1, every))
    assert not list((cwd / "record").glob("1-*-restart.json"))


def _check_checkpoints(cwd: Path, holds: str) -> None:
    """Each trial's Ray Train run, named after the trial (a resume restores it by that name),
    kept the framework's checkpoints the reports carried, each with its report beside it (what
    a resumed sweep logs if the driver died before MLflow had it). One may lack the report: the
    checkpoint the dying start of the world-size-2 trial uploaded with its last report, which
    Ray Train had not taken when the workers died; the restart then went on from the one
    before it."""
    for t in json.loads((cwd / "s.json").read_text()):
        kept = sorted(p for p in cwd.glob(f"scalesweep_runs/*/train/{t['name']}/checkpoint_*")
                      if p.is_dir())
        assert kept and all((c / holds).is_file() for c in kept), (t["name"], kept)
        untaken = [c for c in kept if not (c / REPORT_FILE).exists()]
        if untaken:
            assert t["world_size"] == 2 and len(untaken) == 1, (t["name"], untaken)
            restart = json.loads((cwd / "record" / "2-0-restart.json").read_text())
            assert restart[0] == 2 * t["eval_every"], restart  # from the eval-1 checkpoint
        reports = [json.loads((c / REPORT_FILE).read_text()) for c in kept if c not in untaken]
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
        planned = schedules.resolve({"type": "warmuplr", "warmup_steps": t["warmup_steps"]})
        schedule = schedules.build(planned, t["peak_lr"])
        lrs = {m.step: m.value for m in client.get_metric_history(t["mlflow_run_id"], "lr")}
        assert lrs == pytest.approx({k: schedule.lr(k) for k in evals}, rel=1e-12)
        assert t["train_seconds"] > 0 and t["final_dev_loss"] is not None
        assert t["final_dev_loss"] < dev[0].value  # it learns
    base = next(t for t in trials if t["world_size"] == 1)
    assert base["crossing"] == "interpolated"


@pytest.mark.timeout(600)
def test_a_hf_trainer_script_is_swept(tmp_path: Path, ray_head: RayHead) -> None:
    cwd, stdout = _swept(tmp_path, ray_head, "hf_trainer.yaml", "hf_trainer_loop.py")
    _check_trials(cwd, "examples.crash_once:train_loop_per_worker", {1: 16, 2: 8})
    _check_checkpoints(cwd, "trainer_state.json")
    _check_restart(cwd)
    assert (cwd / "reports/hf-trainer/report.html").exists()
    assert "report: reports/hf-trainer/report.html" in stdout


@pytest.mark.timeout(600)
def test_a_lightning_script_is_swept(tmp_path: Path, ray_head: RayHead) -> None:
    cwd, _ = _swept(tmp_path, ray_head, "lightning.yaml", "lightning_loop.py")
    _check_trials(cwd, "examples.crash_once:train_loop_per_worker", {1: 16, 2: 8})
    _check_checkpoints(cwd, "lightning.ckpt")
    _check_restart(cwd)
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    for t in json.loads((cwd / "s.json").read_text()):  # val_accuracy, logged by the module
        accuracy = client.get_metric_history(t["mlflow_run_id"], "dev_accuracy")
        assert len(accuracy) == t["total_updates"] // t["eval_every"]
        assert all(0 <= m.value <= 1 for m in accuracy)
    assert (cwd / "reports/lightning/report.html").exists()
