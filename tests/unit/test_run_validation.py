"""`run` finds every input problem before Ray starts or MLflow is touched, and takes its
cluster from --address or RAY_ADDRESS."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalesweep.orchestrator.launch.run import ray_address
from tests.support.helpers import SWEEPS, scalesweep


def test_a_plan_problem_stops_run_before_ray_and_mlflow(tmp_path: Path) -> None:
    # RAY_ADDRESS names a port where nothing listens: had run connected first, it would fail
    # with a connection error (exit 1) instead of the input error
    proc = scalesweep("run", str(SWEEPS / "smoke.yaml"), "--set", "physical_workers=2",
                      cwd=tmp_path, timeout=120, RAY_ADDRESS="127.0.0.1:1")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "physical_workers" in proc.stderr and "use 1 or auto" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []  # no mlflow.db, no sweep directory


def test_ray_address_comes_from_the_flag_then_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert ray_address(None) is None
    assert ray_address("auto") == "auto"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    assert ray_address(None) == "10.0.0.5:6379"
    assert ray_address("ray://h:10001") == "ray://h:10001"  # the flag wins
    monkeypatch.setenv("RAY_ADDRESS", "")
    assert ray_address(None) is None


def test_a_ray_client_address_in_the_environment_runs_the_driver_on_the_head(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # as --address ray://... does (tests/integration/test_cluster.py runs that path on a real
    # cluster): the address is resolved before the run use case picks the Ray Client path
    from scalesweep.orchestrator.launch import client_run
    from scalesweep.orchestrator.launch import run as launch_run
    from scalesweep.orchestrator.usecases.progress import console
    from scalesweep.orchestrator.usecases.run import run_study
    from scalesweep.orchestrator.usecases.study import load_file

    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(client_run, "run_via_client",
                        lambda sweep, **kw: calls.append(("client", kw["address"])))
    monkeypatch.setattr(launch_run, "run_loaded", lambda sweep, **kw: calls.append(("here", kw["address"])))
    study = load_file(SWEEPS / "smoke.yaml")
    monkeypatch.setenv("RAY_ADDRESS", "ray://10.0.0.5:10001")
    run_study(study, address=None, tracking_uri="sqlite:///x.db", progress=console())
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    run_study(study, address=None, tracking_uri="sqlite:///x.db", progress=console())
    assert calls == [("client", "ray://10.0.0.5:10001"), ("here", "10.0.0.5:6379")]
