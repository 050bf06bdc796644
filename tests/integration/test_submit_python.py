"""`scalesweep submit` checks the cluster's Python first (issue #13 item 6).

Fast: the comparison of a probe's report with this machine (what is fatal, what is a warning,
what the messages name), and the probe's entrypoint finding an interpreter the way it does on a
head -- from its parent's ``--python_worker_command`` -- run here under a stand-in parent.

Slow: the user's case on a real Ray head started with this venv's ``ray`` but a PATH whose
``python`` has no torch: the job runs with the interpreter of Ray's workers and succeeds.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scalesweep.orchestrator.cluster import cluster_probe
from scalesweep.orchestrator.cluster.cluster_probe import MARK, PACKAGES
from scalesweep.orchestrator.cluster.cluster_python import (
    SCRIPT,
    check,
    local_report,
    parse_report,
    probe_entrypoint,
)
from tests.conftest import MlflowHttp
from tests.support.cluster_helpers import RayCluster
from tests.support.helpers import SWEEPS, cli_env

ADDRESS = "http://127.0.0.1:8275"
EXE = "/opt/py/bin/python3.11"
VERSIONS = {"torch": "2.5.1+cpu", "mlflow": "3.1.0", "ray": "2.60.0", "ray.train": "2.60.0",
            "pydantic": "2.9.2", "yaml": "6.0.2", "numpy": "2.1.3", "pandas": "2.2.3",
            "matplotlib": "3.9.2", "sklearn": "1.5.2"}


def report(python: tuple[int, int, int] = (3, 11, 7), exe: str = EXE, **changes: Any) -> dict[str, Any]:
    """A probe report as cluster_probe makes it; ``changes`` maps a package to its entry's
    changes (``None``: missing)."""
    packages: dict[str, Any] = {}
    for name in PACKAGES:
        entry = {"imports": True, "version": VERSIONS[name], "error": None}
        change = changes.get(name.replace(".", "_"), {})
        if change is None:
            entry = {"imports": False, "version": None,
                     "error": f"ModuleNotFoundError: No module named {name!r}"}
        else:
            entry.update(change)
        packages[name] = entry
    return {"executable": exe, "python": list(python), "flags": [], "packages": packages,
            "found_by": "raylet", "driver_executable": exe, "error": None}


# -- the comparison ------------------------------------------------------------------------


def test_same_environment_is_fine_and_the_job_runs_the_probed_interpreter() -> None:
    verdict = check(ADDRESS, report(), report(exe="/home/me/.venv/bin/python"))
    assert verdict.problems == [] and verdict.warnings == []
    assert verdict.command == [EXE] and verdict.python == "3.11.7"


def test_a_missing_package_and_a_python_minor_mismatch_are_fatal() -> None:
    remote = report(python=(3, 12, 1), torch=None)
    verdict = check(ADDRESS, remote, report())
    assert [p.path for p in verdict.problems] == ["python", "torch"]
    message = verdict.error().message()
    # one message: where, which interpreter, what is missing there, what we have here, the fix
    assert message.startswith(f"the cluster at {ADDRESS} runs Ray workers with {EXE} (Python 3.12.1)")
    assert "3 problems" in message
    torch = next(str(p) for p in verdict.problems if p.path == "torch")
    assert f"{EXE} cannot import torch (ModuleNotFoundError: No module named 'torch')" in torch
    assert "here: torch 2.5.1+cpu" in torch and "'missing'" in torch
    python = next(str(p) for p in verdict.problems if p.path == "python")
    assert "3.12.1" in python and "3.11.7" in python and EXE in python
    fix = str(verdict.error().problems[-1])
    assert fix.startswith(f"how to fix = '{EXE}'") and "from a Python 3.11 environment" in fix
    assert "submit from a Python 3.12 one" in fix and "Nothing was submitted" in fix
    # packages alone: install them there, or start Ray from where they are
    fix = str(check(ADDRESS, report(torch=None), report()).error().problems[-1])
    assert f"{EXE} -m pip install" in fix and "start Ray from an environment that has them" in fix


def test_ray_train_and_a_broken_import_are_fatal_too() -> None:
    remote = report(ray_train=None, numpy={"imports": False, "version": None,
                                           "error": "ImportError: libgfortran.so.5: cannot open"})
    verdict = check(ADDRESS, remote, report())
    by_name = {p.path: str(p) for p in verdict.problems}
    assert set(by_name) == {"ray.train", "numpy"}
    assert "'fails to import'" in by_name["numpy"] and "libgfortran" in by_name["numpy"]
    assert "here: numpy 2.1.3" in by_name["numpy"]


def test_other_versions_are_warnings_naming_both_and_the_interpreter() -> None:
    remote = report(python=(3, 11, 2), mlflow={"version": "3.0.1"})
    verdict = check(ADDRESS, remote, report())
    assert verdict.problems == []
    assert verdict.warnings == [
        f"the cluster's Ray workers ({EXE}) run Python 3.11.2, this machine 3.11.7",
        f"the cluster's Ray workers ({EXE}) have mlflow 3.0.1, this machine 3.1.0"]
    # a CUDA build against the CPU build of one torch version is what docs/cluster.md asks for
    assert check(ADDRESS, report(torch={"version": "2.5.1+cu124"}), report()).warnings == []
    # a package missing here too still stops the job (the cluster is what runs it)
    here = report(sklearn=None)
    problems = check(ADDRESS, report(sklearn=None), here).problems
    assert [p.path for p in problems] == ["sklearn"] and "not installed either" in str(problems[0])


def test_a_probe_run_by_the_paths_python_without_ray_says_so() -> None:
    remote = report(exe="/usr/bin/python3", torch=None)
    remote.update(found_by="PATH", error="cannot import ray (ModuleNotFoundError: No module named 'ray')")
    verdict = check(ADDRESS, remote, report())
    first = str(verdict.problems[0])
    assert first.startswith("ray = '/usr/bin/python3'") and "first python on the head's PATH" in first
    assert "cannot import ray" in first
    assert "torch" in {p.path for p in verdict.problems}


def test_parse_report_takes_the_marked_line_and_local_report_is_this_interpreter() -> None:
    logs = f"Running entrypoint ...\nnoise\n{MARK}{json.dumps(report())}\n"
    assert parse_report(logs) == report()
    assert parse_report("no report\n") is None and parse_report(f"{MARK}{{not json\n") is None
    here = local_report()
    assert here["executable"] == sys.executable
    assert here["python"] == list(sys.version_info[:3])
    assert here["packages"]["torch"]["imports"] and here["packages"]["ray.train"]["version"]


def test_submit_shows_the_mlflow_parent_run_not_the_heads_report_path(
        capsys: pytest.CaptureFixture[str]) -> None:
    from scalesweep.orchestrator.cluster import submit as sub
    from scalesweep.orchestrator.tracking.sweep_runs import parent_run_line

    logs = ("sweep smoke: 1 trials, MLflow parent run 0123abcd at http://mlflow:5000; state in /s\n"
            "report: reports/smoke/report.html\n")
    # the line run_sweep prints, which submit reads back: one definition for both
    assert parent_run_line("0123abcd", "http://mlflow:5000") in logs
    for line in logs.splitlines():
        sub._show(line)
    sub._show(f"{sub.SUMMARY_MARK}[]")
    sub._where_results_are(logs, "http://mlflow:5000")
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "sweep smoke: 1 trials, MLflow parent run 0123abcd at http://mlflow:5000; state in /s",
        "report: made on the head and logged on the MLflow parent run (artifacts report/); how to "
        "get it here is printed at the end",
        "MLflow parent run 0123abcd at http://mlflow:5000: the report is logged there as artifacts "
        "report/ (report.html, figures, trials.csv)",
        "write the report here: scalesweep report --run-id 0123abcd --tracking-uri http://mlflow:5000"]


# -- the probe's entrypoint, under a stand-in for the raylet -------------------------------


def python_without_ray() -> str:
    """An interpreter on this machine that cannot import ray (so the probe stops quickly,
    without looking for a Ray cluster)."""
    for candidate in (getattr(sys, "_base_executable", ""), "/usr/bin/python3"):
        if candidate and Path(candidate).is_file() and subprocess.run(
                [candidate, "-c", "import ray"], capture_output=True).returncode != 0:
            return candidate
    pytest.skip("every python here has ray")


def test_entrypoint_takes_the_interpreter_from_its_parents_worker_command(tmp_path: Path) -> None:
    # where a head has a raylet, the parent: any process whose command line carries
    # --python_worker_command=... . A path with a space, quoted as Ray's list2cmdline does.
    bindir = tmp_path / "my env" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "python3").symlink_to(python_without_ray())
    work = tmp_path / "job"
    work.mkdir()
    (work / SCRIPT).write_text(Path(cluster_probe.__file__).read_text())
    worker_command = subprocess.list2cmdline([str(bindir / "python3"), "-u", "default_worker.py"])
    parent = ("import subprocess, sys; "
              "sys.exit(subprocess.run(['sh', '-c', sys.argv[1]]).returncode)")
    proc = subprocess.run([sys.executable, "-c", parent, probe_entrypoint(),
                           f"--python_worker_command={worker_command}"],
                          cwd=work, capture_output=True, text=True, timeout=60,
                          env=cli_env(PATH="/usr/bin:/bin"))
    assert proc.returncode == 0, proc.stderr
    remote = parse_report(proc.stdout)
    assert remote is not None, proc.stdout + proc.stderr
    assert remote["found_by"] == "raylet"
    assert remote["driver_executable"] == str(bindir / "python3")
    assert "cannot import ray" in remote["error"]
    verdict = check(ADDRESS, remote, local_report())
    assert verdict.problems and str(bindir / "python3") in verdict.error().message()


# -- the user's case, on a real head -------------------------------------------------------


@pytest.fixture(scope="module")
def stripped_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    """A head started by this venv's ``ray`` (so its workers run this venv's python) with a
    PATH that holds neither the venv's bin nor any python with torch: its ``python`` is the
    system's."""
    base = tmp_path_factory.mktemp("stripped")
    stub = base / "bin"
    stub.mkdir()
    system = "/usr/bin/python3"
    if not Path(system).is_file() or subprocess.run([system, "-c", "import torch"],
                                                    capture_output=True).returncode == 0:
        pytest.skip("needs a system python3 without torch")
    (stub / "python").symlink_to(system)
    cluster = RayCluster(base, head_cpus=2, nodes=1, path=f"{stub}:/usr/bin:/bin")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
    assert not cluster.leftover_pids(), "processes of the test cluster outlived it"


@pytest.mark.slow
def test_submit_runs_the_workers_python_not_the_paths(stripped_head: RayCluster,
                                                      mlflow_http: MlflowHttp, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient
    from ray.job_submission import JobStatus, JobSubmissionClient

    cluster = stripped_head
    # the user's failure, first: a job's shell `python` on this head has no torch
    jobs = JobSubmissionClient(cluster.dashboard, headers={"Authorization": f"Bearer {cluster.token}"})
    plain = jobs.submit_job(entrypoint="python -c 'import torch'")
    deadline = time.monotonic() + 180  # an event, not a duration: the deadline only ends a hang
    while jobs.get_job_status(plain) not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
        assert time.monotonic() < deadline, f"job {plain} did not end in 180 s: {jobs.get_job_status(plain)}"
        time.sleep(0.5)
    assert jobs.get_job_status(plain) == JobStatus.FAILED
    assert "No module named 'torch'" in jobs.get_job_logs(plain)

    env = {k: v for k, v in cli_env().items()
           if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS")}
    env.update(HOME=str(tmp_path), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(cluster.token_file),
               SCALESWEEP_STORAGE=str(cluster.base / "shared"))
    proc = subprocess.run(
        [sys.executable, "-m", "scalesweep", "submit", str(SWEEPS / "smoke.yaml"),
         "--address", cluster.dashboard, "--tracking-uri", mlflow_http.uri,
         "--set", "name=smoke-stripped-path", "--set", "axes.world_size=[2]",
         "--set", "axes.scaling_rule=[none]", "--set", "training.epochs=2",
         "--summary-json", "out/s.json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout
    assert proc.returncode == 0, out[-5000:] + proc.stderr[-5000:]
    # the probe found the workers' interpreter: this venv's, though not on the head's PATH
    found = re.search(rf"^cluster at {re.escape(cluster.dashboard)}: Ray workers run (\S+) "
                      r"\(Python [\d.]+\), which imports scalesweep's dependencies; the job runs "
                      r"with it \(probed in [\d.]+ s[^)]*\)$", out, re.M)
    assert found, out
    assert Path(found[1]).parent == Path(sys.executable).parent
    assert re.search(rf"submitted Ray job \S+ to \S+: {re.escape(found[1])} -m scalesweep run ", out)
    summary = json.loads((tmp_path / "out" / "s.json").read_text())
    assert [(t["name"], t["status"]) for t in summary] == [("ws2-warmup20-none", "completed")]
    assert f"summary: {tmp_path / 'out' / 's.json'}" in out

    # where the results are: the MLflow parent run, not a path in the job's directory
    assert "report: reports/" not in out
    parent = re.search(r"^write the report here: scalesweep report --run-id (\w+) --tracking-uri "
                       rf"{re.escape(mlflow_http.uri)}$", out, re.M)
    assert parent, out
    client = MlflowClient(mlflow_http.uri)
    run = client.get_run(parent[1])
    assert run.data.tags.get("scalesweep.role") == "parent"
    assert "report/report.html" in {a.path for a in client.list_artifacts(parent[1], "report")}
    # the probe was a job of its own, before the sweep's, and left the cluster as it was
    probes = [j for j in jobs.list_jobs()
              if j.submission_id and j.submission_id.startswith("scalesweep-probe-")]
    assert [(j.status, (j.metadata or {}).get("scalesweep.probe")) for j in probes] == [
        (JobStatus.SUCCEEDED, "python")]
