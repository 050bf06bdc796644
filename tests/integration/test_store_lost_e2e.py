"""The MLflow server comes back on an empty store mid-sweep (a restart that lost its database,
another --backend-store-uri): the sweep stops with an error naming the runs the store lost,
instead of training on while every metric is refused and dropped, and `scalesweep resume`
against the right store finishes with every eval logged once (issue 50 item 5, test 2).

The trial is held at its 2nd evaluation (tests.support.gated_workload) while the server stops
and starts again on the same port with an empty store, so its later evaluations all meet the
empty store whatever the machine's speed. The server is MLflow's own handlers served from this
process (the mlflow_http fixture's), so the store can be swapped under them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import MlflowHttp, RayHead
from tests.support.helpers import ROOT, SWEEPS, cli_env, wait_for
from tests.unit.test_store_lost import empty_store

pytestmark = pytest.mark.slow
ONE_TRIAL = ["--set", "axes.world_size=[2]", "--set", "axes.scaling_rule=[none]",
             "--set", "training.epochs=1", "--set", "training.eval_every_epochs=0.125"]
DEADLINE_S = 600  # a hang guard only


def test_a_server_back_on_an_empty_store_stops_the_sweep_and_resume_finishes_it(
        tmp_path: Path, ray_head: RayHead, mlflow_http: MlflowHttp) -> None:
    from mlflow.server import app

    from tests.support.wsgi_server import ServedApp

    gate = tmp_path / "gate"
    gate.mkdir()
    workload = (f"workload={{name: 'tests.support.gated_workload:make', options: {{gate_dir: '{gate}', "
                "gated_trial: 0, gate_eval: 2}}")
    server = ServedApp(app, http10=True).start()  # the session store's handlers, a port of its own
    env = cli_env(PYTHONPATH=str(ROOT), SCALESWEEP_STORAGE=str(tmp_path / "runs"),
                  SCALESWEEP_TRACKING_GRACE_S="1", **ray_head.env())
    driver = subprocess.Popen(
        [sys.executable, "-m", "scalesweep", "run", "--no-report", str(SWEEPS / "smoke.yaml"),
         *ONE_TRIAL, "--set", workload, "--set", "name=store-lost", "--tracking-uri", server.uri,
         "--summary-json", "s.json", *ray_head.args()],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for("the trial held at its 2nd evaluation", (gate / "waiting").exists, driver, DEADLINE_S)
        server.stop()
        with empty_store(tmp_path):
            server.start()  # back on the same port, on an empty store
            (gate / "release").touch()
            out, _ = driver.communicate(timeout=DEADLINE_S)
    finally:
        (gate / "release").touch()
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 1, out
    (sweep_dir,) = (tmp_path / "runs").glob("store-lost-*")
    client = MlflowClient(server.uri)  # the right store again
    exp = client.get_experiment_by_name("store-lost")
    assert exp is not None
    (run,) = client.search_runs([exp.experiment_id], "tags.mlflow.parentRunId != ''")
    name = run.info.run_name
    assert f"no longer has the sweep's runs {name} ({run.info.run_id})" in out, out
    assert f"`scalesweep resume {sweep_dir}`" in out
    assert "rejected metric" not in out and "Traceback" not in out, out
    assert run.info.status == "RUNNING"  # left open for resume
    before = [m.step for m in client.get_metric_history(run.info.run_id, "dev_loss")]

    try:
        done = subprocess.run([sys.executable, "-m", "scalesweep", "resume", "--no-report", str(sweep_dir),
                               "--summary-json", "r.json", *ray_head.args()],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=DEADLINE_S)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        (r,) = json.loads((tmp_path / "r.json").read_text())
        assert (r["mlflow_run_id"], r["status"]) == (run.info.run_id, "completed")
        run = client.get_run(run.info.run_id)
        assert run.info.status == "FINISHED" and run.data.tags["status"] == "completed"
        every, total = int(run.data.params["eval_every"]), r["total_updates"]
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "dev_loss")]
    finally:
        server.stop()
    assert steps == sorted({*range(every, total + 1, every), total})  # each once, none lost
    assert len(before) < len(steps)  # the evals the empty store refused came with the resume
