"""A diverging trial is marked and the sweep goes on; MLflow going away mid-sweep or at its end
loses nothing. (A trial that fails every time -- failed with its error after its retry, the
sweep going on -- is the first sweep of
tests/integration/test_checkpoint_faults.py::test_resume_retry_failed_runs_a_failed_trial_again.)"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import MlflowHttp, RayHead
from tests.support.helpers import ROOT, SWEEPS, scalesweep

pytestmark = pytest.mark.slow
#: one trial per lr and seed, of one epoch (64 updates at world size 2): what each fault needs
#: is a trial that gets going, then evaluations after the fault, not a long training
ONE_TRIAL = ["--set", "axes.world_size=[2]", "--set", "axes.scaling_rule=[none]",
             "--set", "training.epochs=1"]


def test_diverging_trial_is_marked_diverged_and_the_sweep_goes_on(tmp_path: Path,
                                                                  ray_head: RayHead) -> None:
    proc = scalesweep("run", "--no-report", str(SWEEPS / "smoke.yaml"), *ONE_TRIAL,
                      "--set", "axes.optimizer.lr=[0.05, 1000.0]",
                      "--summary-json", "s.json", *ray_head.args(), cwd=tmp_path, **ray_head.env())
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


def test_tracking_server_outage_mid_sweep_loses_no_metric(tmp_path: Path, ray_head: RayHead,
                                                          mlflow_http: MlflowHttp) -> None:
    """MLflow goes down while a trial trains and comes back before the sweep ends: the sweep
    goes on, and every evaluation reaches MLflow once. The trial is held at its 2nd evaluation
    (tests.support.gated_workload) until the server is down, and at its 6th until the driver has found
    it down, so evaluations 2-5 are made during the outage on any machine (8 evaluations in all,
    one each 8 updates). The server goes down for real (its socket closed: connections refused),
    on the store of ``mlflow_http``."""
    import subprocess
    import sys
    import time

    from tests.support.helpers import cli_env

    gate = tmp_path / "gate"
    gate.mkdir()
    workload = (f"workload={{name: 'tests.support.gated_workload:make', options: {{gate_dir: '{gate}', "
                "gated_trial: 0, gate_eval: 2, second_gate_eval: 6}}")
    from mlflow.server import app

    from tests.support.wsgi_server import ServedApp

    # the mlflow_http fixture's app and store, on a port of its own, that can really go away
    # (HTTP/1.0: no kept-alive connection outlives a stop)
    server = ServedApp(app, http10=True).start()
    # no report: it is made after the outage, from MLflow, and is not the subject here
    driver = subprocess.Popen(
        [sys.executable, "-m", "scalesweep", "run", "--no-report", str(SWEEPS / "smoke.yaml"), *ONE_TRIAL,
         "--set", workload, "--set", "training.eval_every_epochs=0.125",
         "--set", "name=outage-mid-sweep", "--tracking-uri", server.uri,
         "--summary-json", "s.json", *ray_head.args()],
        cwd=tmp_path, env=cli_env(PYTHONPATH=str(ROOT), **ray_head.env()),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []

    def read() -> None:  # the driver's output, line by line as it comes
        for line in driver.stdout or []:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def wait_for(what: str, ready: Callable[[], bool]) -> None:
        # an event, not a duration: the deadline only turns a hang into a failure
        deadline = time.monotonic() + 300
        while not ready():
            assert driver.poll() is None, f"the sweep ended while waiting for {what}:\n{''.join(lines)}"
            assert time.monotonic() < deadline, f"no {what} in 300 s:\n{''.join(lines)}"
            time.sleep(0.2)

    try:
        wait_for("trial held at evaluation 2", (gate / "waiting").exists)
        server.stop()  # the outage: the trial trains on, its metrics stay in the driver's buffer
        (gate / "release").touch()
        wait_for("trial held at evaluation 6", (gate / "waiting-2").exists)
        wait_for("the driver noticing the outage", lambda: any("MLflow unreachable" in x for x in lines))
        assert driver.poll() is None, "the sweep died with its tracking server"
        server.start()  # same port, same store
        (gate / "release-2").touch()
        driver.wait(timeout=600)
        reader.join(timeout=30)
        out = "".join(lines)
        assert driver.returncode == 0, out
        assert "reachable again" in out
        client = MlflowClient(server.uri)
        (t,) = json.loads((tmp_path / "s.json").read_text())
        run = client.get_run(t["mlflow_run_id"])
        assert run.info.status == "FINISHED" and run.data.tags["status"] == "completed"
        every, total = int(run.data.params["eval_every"]), t["total_updates"]
        steps = [m.step for m in client.get_metric_history(t["mlflow_run_id"], "dev_loss")]
        assert steps == sorted({*range(every, total + 1, every), total})
        assert len(steps) >= 7  # the evaluations made during the outage are among them
    finally:
        (gate / "release").touch()
        (gate / "release-2").touch()
        if driver.poll() is None:
            driver.kill()
        server.stop()


@pytest.mark.parametrize("fault", ["down", "hung"])
def test_mlflow_down_at_the_end_keeps_the_results_and_resume_finishes_the_runs(
        tmp_path: Path, mlflow_http: MlflowHttp, fault: str, ray_head: RayHead) -> None:
    """MLflow stops answering mid-trial and is still down when the sweep ends: the sweep ends
    anyway (nothing lost: summary.json, the journal, the unsent metrics), and once MLflow is
    back `resume` logs what it lacks and closes the runs, with no step logged twice. The
    trial is held at its 2nd evaluation (tests.support.gated_workload) until MLflow is down, and
    makes two more (4 in all, one each 16 updates) while it is.
    ``down``: every request is answered 503 at once. ``hung``: the server accepts every
    request and never answers (overloaded, or a proxy in front of it); each request then costs
    the tracking timeout, and the driver must back off instead of waiting it out per run and
    per flush, so it sends only a few requests into the hang."""
    import subprocess
    import sys
    import time

    from tests.support.helpers import cli_env

    gate = tmp_path / "gate"
    gate.mkdir()
    workload = (f"workload={{name: 'tests.support.gated_workload:make', options: {{gate_dir: '{gate}', "
                "gated_trial: 0, gate_eval: 2}}")
    env = cli_env(PYTHONPATH=str(ROOT), SCALESWEEP_TRACKING_GRACE_S="1",
                  SCALESWEEP_TRACKING_TIMEOUT_S="2", SCALESWEEP_STORAGE=str(tmp_path / "runs"),
                  **ray_head.env())
    mlflow_http.down = mlflow_http.hung = False
    mlflow_http.release.clear()
    mlflow_http.held = 0
    driver = subprocess.Popen(
        [sys.executable, "-m", "scalesweep", "run", str(SWEEPS / "smoke.yaml"), *ONE_TRIAL,
         "--set", workload, "--set", "training.eval_every_epochs=0.25",
         "--set", f"name={fault}-at-the-end", "--tracking-uri", mlflow_http.uri,
         "--summary-json", "s.json", *ray_head.args()],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300  # an event, not a duration: this only ends a hang
        while not (gate / "waiting").exists():
            assert driver.poll() is None, driver.communicate()
            assert time.monotonic() < deadline, "the trial never reached its gate"
            time.sleep(0.2)
        setattr(mlflow_http, fault, True)
        (gate / "release").touch()
        out, err = driver.communicate(timeout=600)
    finally:
        (gate / "release").touch()
        if driver.poll() is None:
            driver.kill()
        mlflow_http.down = mlflow_http.hung = False
        mlflow_http.release.set()  # the held requests are answered (503) and their threads end
    assert driver.returncode == 0, out[-3000:] + err[-3000:]
    if fault == "hung":
        # a handful in all, whatever the machine's speed: the flushes while the trial trains
        # back off (5 s, doubling), and each end-of-sweep step (the trial's tags, the last
        # flush, closing the runs, the UI link) gives up after one timed-out request, with no
        # retries by MLflow's client
        assert 1 <= mlflow_http.held <= 12, (mlflow_http.held, err[-3000:])
    (sweep_dir,) = (tmp_path / "runs").glob(f"{fault}-at-the-end-*")
    assert f"`scalesweep resume {sweep_dir}` logs what MLflow lacks" in err
    (t,) = json.loads((tmp_path / "s.json").read_text())
    assert t["status"] == "completed" and t["final_dev_loss"] is not None
    assert json.loads((sweep_dir / "summary.json").read_text()) == [t]
    assert (sweep_dir / "unsent_metrics.jsonl").read_text()  # what MLflow never took

    client = MlflowClient(mlflow_http.uri)
    assert client.get_run(t["mlflow_run_id"]).info.status == "RUNNING"  # left open, for resume
    # no report: the resume's subject is what MLflow lacked (the run's report reads it back)
    proc = subprocess.run([sys.executable, "-m", "scalesweep", "resume", "--no-report", str(sweep_dir),
                           "--summary-json", "r.json", *ray_head.args()],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (r,) = json.loads((tmp_path / "r.json").read_text())
    assert (r["mlflow_run_id"], r["status"]) == (t["mlflow_run_id"], "completed")
    run = client.get_run(t["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["status"] == "completed"
    every, total = int(run.data.params["eval_every"]), t["total_updates"]
    steps = [m.step for m in client.get_metric_history(t["mlflow_run_id"], "dev_loss")]
    assert steps == sorted({*range(every, total + 1, every), total})  # each once, none lost
    assert run.data.metrics["final_dev_loss"] == pytest.approx(t["final_dev_loss"], rel=1e-12)
