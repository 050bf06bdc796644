"""One driver per sweep directory (scalesweep.orchestrator.launch.sweep_lock), and two sweeps of
one study making its MLflow experiment at once (tracker.experiment_id_for)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from scalesweep.orchestrator.launch import sweep_lock
from scalesweep.orchestrator.spec.errors import InputError
from scalesweep.orchestrator.tracking.tracker import experiment_id_for
from tests.conftest import MlflowHttp
from tests.support.helpers import race_to_make_experiment, scalesweep


def _write_lock(directory: Path, host: str, pid: int) -> None:
    (directory / sweep_lock.LOCK_FILE).write_text(json.dumps(
        {"host": host, "pid": pid, "command": "resume", "since": "2026-11-25T00:00:00+0000"}))


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_second_driver_is_refused_while_the_first_holds_the_sweep(tmp_path: Path) -> None:
    with sweep_lock.hold(tmp_path, "run"):
        held = json.loads((tmp_path / sweep_lock.LOCK_FILE).read_text())
        assert held["pid"] == os.getpid() and held["host"] == socket.gethostname()
        with pytest.raises(InputError) as err, sweep_lock.hold(tmp_path, "resume"):
            pass
        (problem,) = err.value.problems
        assert problem.path == sweep_lock.LOCK_FILE
        assert f"another driver (run, pid {os.getpid()} on {socket.gethostname()}" in problem.rule
    assert not (tmp_path / sweep_lock.LOCK_FILE).exists()  # released at the end


def test_a_stale_lock_is_taken_over_with_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dead = _dead_pid()
    _write_lock(tmp_path, socket.gethostname(), dead)
    with sweep_lock.hold(tmp_path, "resume"):
        assert json.loads((tmp_path / sweep_lock.LOCK_FILE).read_text())["pid"] == os.getpid()
    assert f"taking over {tmp_path / sweep_lock.LOCK_FILE}" in capsys.readouterr().out
    (tmp_path / sweep_lock.LOCK_FILE).write_text("{half a json")  # killed while taking it
    with sweep_lock.hold(tmp_path, "resume"):
        pass


def test_a_lock_from_another_host_names_it(tmp_path: Path) -> None:
    _write_lock(tmp_path, "head-node-7", 1234)
    with pytest.raises(InputError, match="a driver on host head-node-7 \\(pid 1234"), \
            sweep_lock.hold(tmp_path, "resume"):
        pass
    assert (tmp_path / sweep_lock.LOCK_FILE).exists()  # not ours to remove


def test_resume_is_exit_2_while_a_live_driver_holds_the_sweep(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "scalesweep_runs" / "smoke-0123abcd"
    sweep_dir.mkdir(parents=True)
    (sweep_dir / "scalesweep.json").write_text("{}")
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        _write_lock(sweep_dir, socket.gethostname(), alive.pid)
        done = scalesweep("resume", str(sweep_dir), cwd=tmp_path, timeout=120)
    finally:
        alive.kill()
        alive.wait()
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"another driver (resume, pid {alive.pid}" in done.stderr
    assert not (tmp_path / "mlflow.db").exists()


def test_the_experiment_is_made_once_and_found_by_the_second_sweep(tmp_path: Path,
                                                                    mlflow_http: MlflowHttp) -> None:
    for uri in (f"sqlite:///{tmp_path / 'mlflow.db'}", mlflow_http.uri):
        client = MlflowClient(uri)
        first = experiment_id_for(client, "same-study")
        # the second sweep's create loses to the first one's: it finds the experiment instead
        assert experiment_id_for(client, "same-study") == first
        assert client.get_experiment(first).name == "same-study"


def test_two_drivers_released_together_make_the_experiment_once_on_sqlite(tmp_path: Path) -> None:
    """Real processes, released by one gate: with look-up-then-create, both see no experiment
    and the slower create fails with "already exists". One race: both drivers have connected
    and poll the gate every 0.5 ms, so they are let go within a poll of each other (with
    look-then-create put back, 11 races of 11 failed)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(uri).search_experiments(max_results=1)  # the schema, made before the race
    ids = race_to_make_experiment(uri, "raced", tmp_path / "gate")
    assert len(set(ids)) == 1 and ids[0].isdigit(), ids
    assert MlflowClient(uri).get_experiment(ids[0]).name == "raced"
