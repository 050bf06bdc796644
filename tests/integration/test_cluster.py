"""Sweeps on a real two-node Ray cluster started on this machine (tests/support/cluster_helpers.py):
`scalesweep submit` through the Jobs API with token auth, `run --address` for host:port and
ray://, and the shared-storage check. One cluster serves the whole module; MLflow's own REST
handlers in this process (``mlflow_http``) are the tracking server the jobs log to, each sweep
under a name of its own (the server is the session's).

The second node runs in a private mount namespace with a tmpfs over ``node_local/``: the head
sees that directory, the second node sees an empty one -- a node-local "storage" path. Where
this process may not make mount namespaces (not root), the storage-check cases are skipped.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient

from scalesweep.orchestrator.cluster import submit as sub
from scalesweep.orchestrator.cluster.storage_check import is_uri, local_path
from scalesweep.orchestrator.launch import client_run
from tests.conftest import MlflowHttp
from tests.support.cluster_helpers import RayCluster, can_unshare_mount
from tests.support.helpers import ROOT, SWEEPS, cli_env

SMOKE = str(SWEEPS / "smoke.yaml")
# one ddp trial of 4 workers, 1 CPU each, on two nodes of 2 CPUs: it must span both
DDP4 = ["--set", "backend=ddp", "--set", "axes.world_size=[4]", "--set", "baseline.world_size=4",
        "--set", "axes.scaling_rule=[none]",
        "--set", "training.epochs=2"]
ONE_SIMULATED = ["--set", "axes.world_size=[2]", "--set", "axes.scaling_rule=[none]",
                 "--set", "training.epochs=1"]
AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS")


# -- the cluster, the MLflow server, the CLI -------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    base = tmp_path_factory.mktemp("cluster")
    c = RayCluster(base, private_dir=base / "node_local" if can_unshare_mount() else None)
    try:
        c.start()
        yield c
    finally:
        c.stop()
    assert not c.leftover_pids(), "processes of the test cluster outlived it"


def run_cli(*args: str, cwd: Path, timeout: float = 600, **env: str) -> subprocess.CompletedProcess[str]:
    """The real CLI, with no Ray auth settings but those given (not this host's ~/.ray token:
    HOME is the test's own unless given)."""
    base = {k: v for k, v in cli_env().items() if k not in AUTH_VARS}
    base["HOME"] = str(cwd)
    base.update(env)
    return subprocess.run([sys.executable, "-m", "scalesweep", *args], cwd=cwd, env=base,
                          capture_output=True, text=True, timeout=timeout)


def token_env(cluster: RayCluster, storage: Path) -> dict[str, str]:
    """What a user of the cluster exports: Ray's token mode and token file, shared storage."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(cluster.token_file),
            "SCALESWEEP_STORAGE": str(storage)}


def job_ids(cluster: RayCluster) -> set[str]:
    return {j["submission_id"] for j in cluster.api("/api/jobs/")}


def actor_ids(cluster: RayCluster, *classes: str) -> set[str]:
    return {a["actor_id"] for c in classes for a in cluster.actors(c)}


# -- without a cluster: the pieces' rules ----------------------------------------------------


def test_auth_token_sources_and_when_the_default_file_is_sent(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    for var in AUTH_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert sub.auth_token("http://10.0.0.5:8265") is None
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("default-token\n")
    assert sub.auth_token("http://127.0.0.1:8265") == "default-token"  # this machine's cluster
    assert sub.auth_token("http://[::1]:8265") == "default-token"
    assert sub.auth_token("http://10.0.0.5:8265") is None  # never to another host unasked
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert sub.auth_token("http://10.0.0.5:8265") == "default-token"
    file = tmp_path / "tok"
    file.write_text("from-file")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(file))
    assert sub.auth_token("ray://10.0.0.5:10001") == "from-file"
    monkeypatch.setenv("RAY_AUTH_TOKEN", "from-env")
    assert sub.auth_token("10.0.0.5:6379") == "from-env"  # RAY_AUTH_TOKEN wins, as in Ray
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert sub.auth_token("http://127.0.0.1:8265") is None


def test_storage_locations_and_tracking_uris_a_cluster_can_use() -> None:
    assert is_uri("s3://bucket/runs") and is_uri("gs://b/x") and is_uri("abfss://c@a/x")
    assert not is_uri("/shared/runs") and not is_uri("file:///shared/runs")
    assert local_path("s3://bucket/runs") is None
    assert local_path("file:///shared/runs") == Path("/shared/runs")
    assert sub._tracking_problems("http://mlflow:5000") == []
    assert sub._tracking_problems("sqlite:////shared/mlflow.db") == []
    for relative in ("sqlite:///mlflow.db", "mlruns", "file://mlruns"):
        assert sub._tracking_problems(relative), relative


# Ray's words when the head's per-client server died before serving (ray.util.client proxier)
SERVER_DIED = ("Initialization failure from server:\nTraceback ...\nRuntimeError: Starting Ray "
               "client server failed. See ray_client_server_23000.err for detailed logs.")


# ... and when it died while the proxy waited for it to start (seen once in CI)
SERVER_GONE = ("Initialization failure from server:\nTraceback ...\n  File \".../proxier.py\", "
               "in start_specific_server\n    cmd = psutil_proc.cmdline()\n...\n"
               "psutil.ZombieProcess: PID still exists but it's a zombie (pid=13603)")


def test_a_client_server_that_did_not_start_is_connected_to_again(
        capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[str] = []

    def init() -> None:
        calls.append("init")
        if calls.count("init") < 3:
            raise ConnectionAbortedError([SERVER_DIED, SERVER_GONE][calls.count("init") - 1])

    client_run.connect_client(init, reset=lambda: calls.append("reset"))
    assert calls == ["init", "reset", "init", "reset", "init"]
    err = capsys.readouterr().err
    assert "did not start (attempt 1 of 3)" in err and "(attempt 2 of 3)" in err


def test_connecting_gives_up_after_the_attempts_and_at_once_on_other_failures() -> None:
    calls: list[str] = []

    def dead() -> None:
        calls.append("init")
        raise ConnectionAbortedError(SERVER_DIED)

    with pytest.raises(ConnectionAbortedError, match="Starting Ray client server failed"):
        client_run.connect_client(dead, reset=lambda: None)
    assert len(calls) == client_run.CLIENT_CONNECT_ATTEMPTS

    calls.clear()

    def refused() -> None:  # a wrong token or version is no start-up hiccup: no second try
        calls.append("init")
        raise ConnectionAbortedError("Initialization failure from server: version mismatch")

    with pytest.raises(ConnectionAbortedError, match="version mismatch"):
        client_run.connect_client(refused, reset=lambda: None)
    assert calls == ["init"]


def test_exit_code_is_the_jobs() -> None:
    def info(status: str, code: int | None) -> SimpleNamespace:
        return SimpleNamespace(status=status, driver_exit_code=code)

    assert sub.job_exit_code(info("SUCCEEDED", 0)) == 0
    assert sub.job_exit_code(info("FAILED", 2)) == 2
    assert sub.job_exit_code(info("FAILED", None)) == 1
    assert sub.job_exit_code(info("STOPPED", -15)) == 1


def test_shipment_copies_the_project_and_an_outside_sweep_and_recipe(tmp_path: Path) -> None:
    recipe = tmp_path / "elsewhere" / "my_recipe.yaml"
    recipe.parent.mkdir()
    recipe.write_text("optimizer: {type: adam, lr: 0.001}\n")
    sweep = tmp_path / "mine.yaml"
    sweep.write_text((SWEEPS / "smoke.yaml").read_text())
    with sub.shipment(str(sweep), ["seed=1"], recipe.resolve()) as ship:
        tree = ship.directory
        assert (tree / "scalesweep" / "orchestrator" / "cli.py").is_file()
        assert (tree / ship.sweep).read_text() == sweep.read_text()
        assert ship.sweep == f"{sub.STAGE}/mine.yaml"
        assert ship.overrides == ["seed=1", f"recipe={sub.STAGE}/recipes/my_recipe.yaml"]
        assert (tree / sub.STAGE / "recipes" / "my_recipe.yaml").is_file()
        for excluded in (".venv", ".git", "mlflow.db", "scalesweep_runs", ".mypy_cache"):
            assert not (tree / excluded).exists(), excluded
    with sub.shipment(SMOKE, [], None) as ship:
        assert ship.sweep == "sweeps/smoke.yaml" and ship.overrides == []
    assert not tree.exists()


# -- on the cluster --------------------------------------------------------------------------


@pytest.mark.slow
def test_submit_rejects_bad_input_before_submitting_anything(cluster: RayCluster,
                                                             tmp_path: Path) -> None:
    before = job_ids(cluster)
    proc = run_cli("submit", SMOKE, "--address", cluster.dashboard, "--set", "axes.world_size=[0]",
                   cwd=tmp_path, timeout=300, **token_env(cluster, tmp_path / "storage"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    # every problem at once: the sweep's and the local MLflow store a job cannot keep
    assert "axes.world_size" in proc.stderr and "--tracking-uri" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = run_cli("submit", SMOKE, "--address", cluster.gcs_address, "--tracking-uri",
                   "http://127.0.0.1:5000", cwd=tmp_path, timeout=300)
    assert proc.returncode == 2 and "http://HEAD:8265" in proc.stderr, proc.stderr
    assert job_ids(cluster) == before


@pytest.mark.slow
def test_submit_without_the_token_is_refused_and_says_how_to_authenticate(
        cluster: RayCluster, tmp_path: Path) -> None:
    before = job_ids(cluster)
    proc = run_cli("submit", SMOKE, "--address", cluster.dashboard, "--tracking-uri",
                   "http://127.0.0.1:5000", cwd=tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "RAY_AUTH_TOKEN" in proc.stderr and "nothing was submitted" in proc.stderr
    assert job_ids(cluster) == before


@pytest.mark.slow
def test_submit_runs_a_ddp_sweep_across_both_nodes_into_mlflow(
        cluster: RayCluster, mlflow_http: MlflowHttp, tmp_path: Path) -> None:
    proc = run_cli("submit", SMOKE, "--address", cluster.dashboard, "--tracking-uri",
                   mlflow_http.uri, *DDP4, "--set", "name=smoke-cluster-ddp",
                   "--summary-json", "out/summary.json", cwd=tmp_path,
                   **token_env(cluster, cluster.base / "shared"))
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    out = proc.stdout
    job = re.search(r"submitted Ray job (\S+) to", out)
    assert job, out
    # the driver's own output, streamed back while the job ran
    assert "completed ws4-warmup20-none" in out and f"job {job[1]} SUCCEEDED" in out
    summary = json.loads((tmp_path / "out/summary.json").read_text())
    assert [(t["name"], t["status"], t["backend"], t["physical_workers"]) for t in summary] == [
        ("ws4-warmup20-none", "completed", "ddp", 4)]
    # the paths printed are ones the user can open: this machine's summary, the MLflow parent
    # run's report (the driver's own report path is in the job's directory on the head)
    assert f"summary: {tmp_path / 'out/summary.json'}" in out and "report: reports/" not in out
    shown = re.search(r"^write the report here: scalesweep report --run-id (\w+) --tracking-uri "
                      rf"{re.escape(mlflow_http.uri)}$", out, re.M)
    assert shown, out

    # the trial's 4 Ray Train workers sat on both nodes (the state API keeps dead actors)
    details = next(j for j in cluster.api("/api/jobs/") if j["submission_id"] == job[1])
    workers = [a for a in cluster.actors("RayTrainWorker") if a["job_id"] == details["job_id"]]
    assert len(workers) == 4
    assert {w["node_id"] for w in workers} == {n["node_id"] for n in cluster.alive_nodes()}

    client = MlflowClient(mlflow_http.uri)
    exp = client.get_experiment_by_name("smoke-cluster-ddp")
    assert exp is not None
    parents = client.search_runs([exp.experiment_id], "tags.`scalesweep.role` = 'parent'")
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.run_id == shown[1]
    assert "report/report.html" in {a.path for a in client.list_artifacts(shown[1], "report")}
    children = client.search_runs([exp.experiment_id],
                                  f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    assert [c.info.run_id for c in children] == [summary[0]["mlflow_run_id"]]
    child = children[0]
    assert parent.info.status == "FINISHED" and child.info.status == "FINISHED"
    assert child.data.params["backend"] == "ddp" and child.data.params["world_size"] == "4"
    curve = client.get_metric_history(child.info.run_id, "dev_loss")
    steps = [m.step for m in curve]
    assert len(steps) >= 4 and steps == sorted(set(steps))
    assert steps[-1] == int(child.data.params["total_updates"])


@pytest.mark.slow
def test_submitted_job_exit_code_comes_back_storage_check_on_the_cluster(
        cluster: RayCluster, mlflow_http: MlflowHttp, tmp_path: Path) -> None:
    if cluster.private_dir is None:
        pytest.skip("needs a mount namespace (root) for a node-local directory")
    proc = run_cli("submit", SMOKE, "--address", cluster.dashboard, "--tracking-uri",
                   mlflow_http.uri, *ONE_SIMULATED, "--set", "name=smoke-unshared", cwd=tmp_path,
                   **token_env(cluster, cluster.private_dir))
    # the driver on the head exits 2 (input problem: the storage is not shared), and so do we
    assert proc.returncode == 2, proc.stdout[-5000:] + proc.stderr[-5000:]
    assert "shared storage check (1 of 2 nodes cannot read" in proc.stdout
    assert MlflowClient(mlflow_http.uri).get_experiment_by_name("smoke-unshared") is None


@pytest.mark.slow
def test_run_stops_before_anything_starts_when_a_node_cannot_see_the_storage(
        cluster: RayCluster, tmp_path: Path) -> None:
    if cluster.private_dir is None:
        pytest.skip("needs a mount namespace (root) for a node-local directory")
    before = actor_ids(cluster, "ImplicitFunc", "RayTrainWorker", "TrainController")
    db = tmp_path / "mlflow.db"
    # host:port, with only RAY_AUTH_TOKEN given: scalesweep turns on Ray's token mode itself
    proc = run_cli("run", SMOKE, "--address", cluster.gcs_address, "--tracking-uri", f"sqlite:///{db}",
                   *DDP4, cwd=tmp_path, timeout=300, RAY_AUTH_TOKEN=cluster.token,
                   SCALESWEEP_STORAGE=str(cluster.private_dir))
    assert proc.returncode == 2, proc.stdout[-5000:] + proc.stderr[-5000:]
    err = proc.stderr
    assert "shared storage check (1 of 2 nodes cannot read" in err, err
    assert cluster.worker_node_id()[:12] in err and str(cluster.private_dir) in err
    assert "SCALESWEEP_STORAGE" in err and "Traceback" not in err
    assert list(cluster.private_dir.iterdir()) == []  # no sweep dir, the marker removed
    if db.exists():  # MLflow may have made its tables; no experiment, no run
        assert MlflowClient(f"sqlite:///{db}").get_experiment_by_name("smoke") is None
    assert actor_ids(cluster, "ImplicitFunc", "RayTrainWorker", "TrainController") == before


@pytest.mark.slow
def test_run_through_ray_client_drives_the_sweep_on_the_head(
        cluster: RayCluster, mlflow_http: MlflowHttp, tmp_path: Path) -> None:
    env = token_env(cluster, cluster.base / "shared")
    del env["RAY_AUTH_MODE"]  # the token file alone is enough
    proc = run_cli("run", SMOKE, "--address", cluster.client_address, "--tracking-uri",
                   mlflow_http.uri, *ONE_SIMULATED, "--set", "name=smoke-client",
                   "--summary-json", "s.json", cwd=tmp_path, **env)
    # the head's Ray Client server logs say why, if it did not start
    assert proc.returncode == 0, (proc.stdout[-5000:] + proc.stderr[-5000:]
                                  + cluster.head_logs("ray_client_server*"))
    assert "its driver runs on the head" in proc.stdout
    summary = json.loads((tmp_path / "s.json").read_text())
    assert [(t["name"], t["status"]) for t in summary] == [("ws2-warmup20-none", "completed")]
    run = MlflowClient(mlflow_http.uri).get_run(summary[0]["mlflow_run_id"])
    assert run.info.status == "FINISHED"
    assert (tmp_path / "reports" / "smoke-client" / "report.html").is_file()  # made here


def test_project_root_is_this_checkout() -> None:
    assert sub.PROJECT_ROOT == ROOT and os.path.isdir(ROOT / "scalesweep" / "orchestrator")


@pytest.mark.slow
def test_ray_address_in_the_environment_counts_as_address(
        cluster: RayCluster, mlflow_http: MlflowHttp, tmp_path: Path) -> None:
    # RAY_ADDRESS names the cluster and no --address is given: run joins that cluster (it used
    # to start a local Ray's ray.init(num_cpus=...), which Ray refuses for an existing cluster)
    env = token_env(cluster, cluster.base / "shared")
    before = actor_ids(cluster, "ImplicitFunc")
    proc = run_cli("run", "--no-report", SMOKE, "--tracking-uri", mlflow_http.uri, *ONE_SIMULATED,
                   "--set", "name=smoke-env-address", "--summary-json", "s.json", cwd=tmp_path,
                   RAY_ADDRESS=cluster.gcs_address, **env)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    summary = json.loads((tmp_path / "s.json").read_text())
    assert [t["status"] for t in summary] == ["completed"]
    # and it ran there, not on a Ray of its own (which would run it as well): its trial's actor
    # is the cluster's (the state API keeps dead actors)
    assert actor_ids(cluster, "ImplicitFunc") - before
    # a Ray Client address there takes the --address ray://... path (the resolution:
    # tests/unit/test_run_validation.py; that path: test_run_through_ray_client_drives_the_sweep_on_the_head)
