"""A user's own Ray Train loop swept end to end: ``scalesweep run`` on a real Ray (world sizes 1
and 2 of real Ray Train workers, gloo), a real MLflow sqlite store, the summary, the arms and
the report; and loops that break the report contract, each failing its own trial by name while
the others finish."""

from __future__ import annotations

import itertools
import json
import math
import shutil
import signal
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from scalesweep.science import schedules
from tests.conftest import RayHead
from tests.support.helpers import ROOT, SWEEPS, cli_env, scalesweep, wait_for

pytestmark = pytest.mark.slow
OWN_LOOP = str(SWEEPS / "own_loop.yaml")
#: the example sweep at 2 of its 3 epochs: still 8 evals a trial (the report-wait test needs
#: 6 or more) and, for the Ctrl-C test, evals after its stop at update 40 of 64
SHORTER = ("--set", "training.epochs=2")


def _with_module(cwd: Path, package: str, module: str) -> None:
    """The loop's module where the sweep's Ray workers import it from: Ray puts the driver's
    working directory on their path (docs/workloads.md, "Your own Ray Train loop").
    ``package`` is dotted (``tests.support``): each level gets its ``__init__.py``."""
    parts = package.split(".")
    for depth in range(1, len(parts) + 1):
        level = Path(*parts[:depth])
        (cwd / level).mkdir(exist_ok=True)
        shutil.copy(ROOT / level / "__init__.py", cwd / level / "__init__.py")
    shutil.copy(ROOT / Path(*parts) / module, cwd / Path(*parts) / module)


@pytest.fixture(scope="module")
def own_loop(tmp_path_factory: pytest.TempPathFactory, ray_head: RayHead) -> tuple[Path, str]:
    cwd = tmp_path_factory.mktemp("own_loop")
    _with_module(cwd, "examples", "ddp_demo_loop.py")
    proc = scalesweep("run", OWN_LOOP, *SHORTER, "--summary-json", "s.json", *ray_head.args(),
                      cwd=cwd, **ray_head.env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return cwd, proc.stdout


def test_every_trial_of_the_loop_is_logged_with_step_update(own_loop: tuple[Path, str]) -> None:
    cwd, _ = own_loop
    trials = json.loads((cwd / "s.json").read_text())
    assert sorted(t["name"] for t in trials) == ["ws1-warmup16-linear", "ws2-warmup8-linear"]
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    for t in trials:
        assert t["status"] == "completed" and t["backend"] == "ddp"
        assert t["physical_workers"] == t["world_size"]
        run = client.get_run(t["mlflow_run_id"])
        assert run.info.status == "FINISHED" and run.data.tags["status"] == "completed"
        assert run.data.params["workload"] == "examples.ddp_demo_loop:train_loop_per_worker"
        evals = list(range(t["eval_every"], t["total_updates"] + 1, t["eval_every"]))
        dev = client.get_metric_history(t["mlflow_run_id"], "dev_loss")
        assert sorted(m.step for m in dev) == evals  # step = update, each once
        assert all(math.isfinite(m.value) for m in dev)
        epochs = {m.step: m.value for m in client.get_metric_history(t["mlflow_run_id"], "epoch")}
        assert epochs == {k: k / t["updates_per_epoch"] for k in evals}
        samples = client.get_metric_history(t["mlflow_run_id"], "samples_seen")
        assert {m.step: m.value for m in samples} == {k: k * t["global_batch"] for k in evals}
        workers = client.get_metric_history(t["mlflow_run_id"], "physical_workers")
        assert {m.value for m in workers} == {t["world_size"]}
        # the lr the loop ran with is the plan's, update by update (loop_helpers.lr_scheduler)
        planned = schedules.resolve({"type": "warmuplr", "warmup_steps": t["warmup_steps"]})
        schedule = schedules.build(planned, t["peak_lr"])
        lrs = {m.step: m.value for m in client.get_metric_history(t["mlflow_run_id"], "lr")}
        assert lrs == pytest.approx({k: schedule.lr(k) for k in evals}, rel=1e-12)
        assert t["train_seconds"] > 0 and t["final_dev_loss"] is not None


def test_a_report_does_not_wait_for_ray_trains_default_poll(own_loop: tuple[Path, str]) -> None:
    # Ray Train V2's controller takes a report off the worker's one-slot queue when it polls,
    # every 2 s by default, and the loop waits in ray.train.report until then; the trial
    # driver polls faster (trial_driver.REPORT_POLL_S). The demo loop's evals are a few updates
    # of a tiny MLP apart, so each wall_s step is the wait: well under half Ray's default.
    from ray.train.v2._internal.constants import DEFAULT_HEALTH_CHECK_INTERVAL_S

    cwd, _ = own_loop
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    for t in json.loads((cwd / "s.json").read_text()):
        walls = sorted(m.value for m in client.get_metric_history(t["mlflow_run_id"], "wall_s"))
        steps = [b - a for a, b in itertools.pairwise(walls)]
        assert len(steps) >= 5
        assert statistics.median(steps) < DEFAULT_HEALTH_CHECK_INTERVAL_S / 2, (t["name"], steps)


def test_the_loops_sweep_gets_crossings_arms_and_the_report(own_loop: tuple[Path, str]) -> None:
    cwd, stdout = own_loop
    trials = json.loads((cwd / "s.json").read_text())
    assert len({t["target_value"] for t in trials}) == 1
    assert all(t["crossing"] in ("interpolated", "at_first_eval", "never") for t in trials)
    base = [t for t in trials if t["world_size"] == 1]
    assert all(t["crossing"] == "interpolated" for t in base)
    arms = {a["arm"]: a for a in json.loads((cwd / "reports/own-loop/arms.json").read_text())}
    assert set(arms) == {"ws1-warmup16-linear", "ws2-warmup8-linear"}
    assert {a["baseline_arm"] for a in arms.values()} == {"ws1-warmup16-linear"}
    assert all(a["n_seeds"] == 1 for a in arms.values())
    assert arms["ws1-warmup16-linear"]["n_reached"] == 1
    assert arms["ws2-warmup8-linear"]["decision"] in ("not resolved", "faster", "slower",
                                                      "equivalent")
    assert (cwd / "reports/own-loop/report.html").exists()
    assert "report: reports/own-loop/report.html" in stdout
    table = stdout[stdout.index("\ntrial "):]  # run's table (one seed per arm: no arm table)
    assert sorted(line.split()[:2] for line in table.strip().splitlines()[1:3]) == [
        ["ws1-warmup16-linear", "completed"], ["ws2-warmup8-linear", "completed"]]


def _dev_steps(db: Path, trial: str) -> list[int]:
    if not db.exists():
        return []
    client = MlflowClient(f"sqlite:///{db}")
    experiment = client.get_experiment_by_name("own-loop")
    if experiment is None:
        return []
    runs = client.search_runs([experiment.experiment_id], f"tags.trial_name = '{trial}'")
    return sorted(m.step for r in runs for m in client.get_metric_history(r.info.run_id, "dev_loss"))


def test_a_loop_stopped_by_ctrl_c_resumes_from_its_own_checkpoint(
        tmp_path: Path, own_loop: tuple[Path, str], ray_head: RayHead) -> None:
    """The example loop checkpoints at each eval (loop_helpers.report(state=...)); Ctrl-C
    while its 2-worker trial is held after update 40 (mid-epoch), then `scalesweep resume`:
    the loop restores update 40 from its own checkpoint (loop_helpers.restore), every eval is
    logged once, and the trial ends where the uninterrupted sweep (the module's) ended it.
    The sweep is that trial alone (same plan row: reference world size 1 still scales its
    warmup and lr; a fixed target stands in for the relative one, which needs the baseline)."""
    _with_module(tmp_path, "examples", "ddp_demo_loop.py")
    _with_module(tmp_path, "tests.support", "gated_loop.py")
    gate = tmp_path / "gate"
    gate.mkdir()
    held = "ws2-warmup8-linear"
    driver = subprocess.Popen(
        [sys.executable, "-m", "scalesweep", "run", OWN_LOOP, *SHORTER, *ray_head.args(),
         "--set", "axes.world_size=[2]", "--set", "target={metric: dev_loss, value: 0.1}",
         "--set", "workload.train_loop=tests.support.gated_loop:train_loop_per_worker",
         "--set", f"workload.options={{gate_dir: '{gate}', gated_world_size: 2, gate_update: 40}}"],
        cwd=tmp_path, env=cli_env(**ray_head.env()), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    db = tmp_path / "mlflow.db"
    try:
        wait_for("the held trial at its gate", (gate / "waiting").exists, driver, 600)
        wait_for("update 40 in MLflow", lambda: 40 in _dev_steps(db, held), driver, 600)
        driver.send_signal(signal.SIGINT)  # Ctrl-C, to the driver alone: Ray's head is shared
        out, _ = driver.communicate(timeout=600)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(timeout=60)
        (gate / "release").touch()
    assert driver.returncode == 1 and "scalesweep resume" in out, out
    assert not (gate / "restored-2").exists()

    done = scalesweep("resume", "own-loop", "--summary-json", "s.json", "--no-report",
                      *ray_head.args(), cwd=tmp_path, **ray_head.env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert (gate / "restored-2").read_text() == "40"  # not from update 0
    trials = {t["name"]: t for t in json.loads((tmp_path / "s.json").read_text())}
    assert list(trials) == [held]
    reference = {t["name"]: t for t in json.loads((own_loop[0] / "s.json").read_text())}
    for name, t in trials.items():
        assert t["status"] == "completed", t
        evals = list(range(t["eval_every"], t["total_updates"] + 1, t["eval_every"]))
        assert _dev_steps(db, name) == evals  # each eval once, through the stop
        client = MlflowClient(f"sqlite:///{db}")
        walls = [m.value for m in sorted(client.get_metric_history(t["mlflow_run_id"], "wall_s"),
                                         key=lambda m: m.step)]
        assert walls == sorted(walls)  # the resumed trial's clock went on, not back to 0
        # model, optimizer, schedule and data position restored: the uninterrupted result
        assert t["final_dev_loss"] == pytest.approx(reference[name]["final_dev_loss"], rel=1e-6)


def test_a_loop_that_breaks_the_contract_fails_its_trial_by_name(
        tmp_path: Path, ray_head: RayHead) -> None:
    _with_module(tmp_path, "tests.support", "user_loops.py")
    sweep = tmp_path / "bad.yaml"
    sweep.write_text("""
name: bad-loops
workload: {train_loop: "tests.support.user_loops:by_seed", train_size: 64}
target: {metric: dev_loss, value: 0.5}
optimizer: {type: sgd, lr: 0.1}
scheduler: {type: warmuplr, warmup_steps: 8}
training: {per_worker_batch: 8, max_updates: 24, eval_every: 4}
max_failures: 0
resources: {cpus_per_worker: 0.5}
axes: {world_size: [1], seed: [0, 4, 6]}
""", encoding="utf-8")
    proc = scalesweep("run", str(sweep), "--summary-json", "s.json", *ray_head.args(),
                      cwd=tmp_path, **ray_head.env())
    assert proc.returncode == 1, proc.stdout + proc.stderr  # some trial failed
    trials = {t["seed"]: t for t in json.loads((tmp_path / "s.json").read_text())}
    loop = "train_loop tests.support.user_loops:by_seed"
    # one loop per way a trial fails alone: a report breaks the contract, and one strays from
    # the plan (found on its way to MLflow, against the plan the start marker carried). Every
    # other broken report takes one of these ways; test_user_loop.py and test_plan_enforced.py
    # check each one's message. A break every trial shares (no report, no lr) stops the sweep
    # instead: test_contract_stop_e2e.py.
    expect = {
        4: "reported update=4 after update=8: updates must increase",
        6: "update 4 ran at lr 0.1, the plan says 0.05: ",
    }
    assert trials[0]["status"] == "completed" and trials[0]["crossing"] == "interpolated"
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert [m.step for m in client.get_metric_history(trials[0]["mlflow_run_id"], "dev_loss")] \
        == [4, 8, 12, 16, 20, 24]
    for seed, what in expect.items():
        t = trials[seed]
        assert t["status"] == "failed", t
        assert f"trial {t['name']}: {loop} {what}" in t["error"], t["error"]
        run = client.get_run(t["mlflow_run_id"]) if t["mlflow_run_id"] else None
        if run is not None:
            assert run.info.status == "FAILED" and what in run.data.tags["error"]
            # nothing past the bad report reached MLflow
            steps = [m.step for m in client.get_metric_history(t["mlflow_run_id"], "dev_loss")]
            assert steps in ([], [4], [4, 8])
    assert "loop_helpers.lr_scheduler" in trials[6]["error"]
