"""A diverging trial and a trial that fails every time: each is marked, the sweep goes on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers import ROOT, SWEEPS, scalesweep

pytestmark = pytest.mark.slow
ONE_TRIAL = ["--set", "axes.world_size=[2]", "--set", "axes.scaling_rule=[none]"]


def test_diverging_trial_is_marked_diverged_and_the_sweep_goes_on(tmp_path: Path) -> None:
    proc = scalesweep("run", str(SWEEPS / "smoke.yaml"), *ONE_TRIAL,
                      "--set", "axes.optimizer.lr=[0.05, 1000.0]",
                      "--summary-json", "s.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # diverging is a result, not an error
    trials = {t["name"]: t for t in json.loads((tmp_path / "s.json").read_text())}
    assert {t["status"] for t in trials.values()} == {"completed", "diverged"}
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    for t in trials.values():
        run = client.get_run(t["mlflow_run_id"])
        assert run.data.tags["status"] == t["status"]
        assert run.info.status == ("FINISHED" if t["status"] == "completed" else "FAILED")
    diverged = next(t for t in trials.values() if t["status"] == "diverged")
    assert diverged["updates_to_target"] is None
    assert "lr1000" in diverged["name"]


def test_trial_failing_every_time_is_failed_with_its_error_and_the_sweep_goes_on(
        tmp_path: Path) -> None:
    proc = scalesweep("run", str(SWEEPS / "smoke.yaml"), *ONE_TRIAL,
                      "--set", "workload={name: 'tests.faulty_workload:make', "
                               "options: {fail_seed: 1}}",
                      "--set", "axes.seed=[0, 1]", "--set", "max_failures=1",
                      "--summary-json", "s.json", cwd=tmp_path, PYTHONPATH=str(ROOT))
    assert proc.returncode == 1, proc.stdout + proc.stderr  # some trial failed
    assert "Traceback" not in proc.stdout
    trials = {t["seed"]: t for t in json.loads((tmp_path / "s.json").read_text())}
    assert trials[0]["status"] == "completed" and trials[0]["best_dev_loss"] is not None
    failed = trials[1]
    assert failed["status"] == "failed"
    assert "injected failure for seed 1" in (failed["error"] or "")
    run = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(failed["mlflow_run_id"])
    assert run.info.status == "FAILED" and "injected failure" in run.data.tags["error"]
    assert "retrying" in proc.stdout  # max_failures=1: one retry before giving up


def test_tracking_server_outage_mid_sweep_loses_no_metric(tmp_path: Path) -> None:
    import subprocess
    import sys
    import time

    from tests.helpers import MlflowServer, cli_env

    server = MlflowServer(tmp_path / "server").start()
    driver = subprocess.Popen(
        [sys.executable, "-m", "scalesweep", "run", str(SWEEPS / "smoke.yaml"),
         "--tracking-uri", server.uri, "--set", "training.epochs=25",
         "--set", "resources.max_concurrent_trials=1", "--summary-json", "s.json"],
        cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        client = MlflowClient(server.uri)
        deadline = time.monotonic() + 300
        while True:  # wait until the first trial is logging
            exp = client.get_experiment_by_name("smoke")
            runs = client.search_runs([exp.experiment_id]) if exp else []
            if any(client.get_metric_history(r.info.run_id, "dev_loss") for r in runs
                   if "mlflow.parentRunId" in r.data.tags):
                break
            assert driver.poll() is None and time.monotonic() < deadline
            time.sleep(0.5)
        server.stop()  # the outage: trials keep training, metrics stay in the driver's buffer
        time.sleep(15)
        assert driver.poll() is None, "the sweep died with its tracking server"
        server.start()  # same port, same store
        out, _ = driver.communicate(timeout=600)
    finally:
        if driver.poll() is None:
            driver.kill()
        server.stop()
    server.start()
    try:
        assert driver.returncode == 0, out
        assert "MLflow unreachable" in out and "reachable again" in out
        client = MlflowClient(server.uri)
        for t in json.loads((tmp_path / "s.json").read_text()):
            run = client.get_run(t["mlflow_run_id"])
            assert run.info.status == "FINISHED" and run.data.tags["status"] == "completed"
            every, total = int(run.data.params["eval_every"]), t["total_updates"]
            steps = [m.step for m in client.get_metric_history(t["mlflow_run_id"], "dev_loss")]
            assert steps == sorted({*range(every, total + 1, every), total}), t["name"]
    finally:
        server.stop()
