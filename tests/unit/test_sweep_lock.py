"""One driver per sweep directory (scalesweep.orchestrator.launch.sweep_lock), and two sweeps of
one study making its MLflow experiment at once (tracker.experiment_id_for)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from scalesweep.orchestrator.launch import sweep_lock
from scalesweep.orchestrator.spec.errors import InputError
from scalesweep.orchestrator.tracking.tracker import experiment_id_for
from tests.conftest import MlflowHttp
from tests.support.helpers import ROOT, cli_env, race_to_make_experiment, scalesweep


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
    with _holding(sweep_dir) as holder:
        done = scalesweep("resume", str(sweep_dir), cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"another driver (resume, pid {holder.pid}" in done.stderr
    assert not (tmp_path / "mlflow.db").exists()


def test_a_lock_naming_this_very_process_is_taken_over(tmp_path: Path) -> None:
    """A resume in a restarted container: the same hostname, and the same small pid as the
    driver that held the lock before the restart. Nobody holds the lock, so it is ours."""
    _write_lock(tmp_path, socket.gethostname(), os.getpid())
    with sweep_lock.hold(tmp_path, "resume"):
        assert json.loads((tmp_path / sweep_lock.LOCK_FILE).read_text())["command"] == "resume"


def test_a_driver_killed_while_holding_the_sweep_leaves_it_to_the_next(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with _holding(tmp_path) as holder:
        with pytest.raises(InputError, match=f"pid {holder.pid} on"), sweep_lock.hold(tmp_path, "resume"):
            pass
        holder.kill()  # SIGKILL: the kernel drops its lock; its record stays behind
        holder.wait()
        with sweep_lock.hold(tmp_path, "resume"):
            pass
    assert f"from a driver that is gone ({{'host': '{socket.gethostname()}', 'pid': {holder.pid}" \
        in capsys.readouterr().out


RACE_DRIVERS, RACE_ROUNDS = 8, 24


def test_drivers_released_together_exactly_one_holds_the_sweep(tmp_path: Path) -> None:
    """Real processes (tests/support/race_lock.py) released together by a gate, round after
    round, half the rounds with a stale lock of a dead driver on this host: each round exactly
    one driver holds the sweep (it keeps it until every driver has its answer), and the others
    are refused naming it. With the old unlink-then-O_EXCL takeover put back, 20, 22 and 23 of
    24 rounds (three runs) had two to seven drivers holding the sweep at once."""
    sweep_dir, gate = tmp_path / "sweep", tmp_path / "gate"
    sweep_dir.mkdir()
    gate.mkdir()
    dead = _dead_pid()
    lock = sweep_dir / sweep_lock.LOCK_FILE
    procs = [subprocess.Popen([sys.executable, "-m", "tests.support.race_lock", str(sweep_dir), str(gate),
                               str(i), str(RACE_DRIVERS), str(RACE_ROUNDS)], cwd=ROOT, env=cli_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(RACE_DRIVERS)]
    bad: dict[int, str] = {}
    try:
        _wait_for_files(gate, [f"ready-{i}" for i in range(RACE_DRIVERS)], procs)
        for r in range(RACE_ROUNDS):
            if lock.exists():  # a winner that thought it held someone else's lock left it
                bad[r - 1] = f"{bad.get(r - 1, '')} left {lock.read_text()!r}"
                lock.unlink()
            if r % 2:
                _write_lock(sweep_dir, socket.gethostname(), dead)
            (gate / f"go-{r}").touch()
            _wait_for_files(gate, [f"done-{r}-{i}" for i in range(RACE_DRIVERS)], procs)
            won = [i for i in range(RACE_DRIVERS) if (gate / f"won-{r}-{i}").exists()]
            if len(won) != 1:
                bad[r] = f"held by drivers {won}"
                continue
            named = f"another driver (resume, pid {procs[won[0]].pid} on {socket.gethostname()}"
            unnamed = [i for i in range(RACE_DRIVERS)
                       if i != won[0] and named not in (gate / f"refused-{r}-{i}").read_text()]
            if unnamed:
                bad[r] = f"drivers {unnamed} refused without naming the holder"
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert not bad, f"{len(bad)} of {RACE_ROUNDS} rounds went wrong: {bad}"
    assert not lock.exists()


@contextlib.contextmanager
def _holding(sweep_dir: Path) -> Iterator[subprocess.Popen[str]]:
    """A driver in another process holding ``sweep_dir`` until the block ends."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; "
         "from scalesweep.orchestrator.launch import sweep_lock\n"
         "with sweep_lock.hold(Path(sys.argv[1]), 'resume'):\n"
         "    print('held', flush=True); sys.stdin.read()", str(sweep_dir)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        yield holder
    finally:
        holder.kill()
        holder.wait()


def _wait_for_files(gate: Path, names: list[str], procs: list[subprocess.Popen[str]]) -> None:
    deadline = time.monotonic() + 120  # a bound for a broken driver, not a timing assumption
    while not all((gate / name).exists() for name in names):
        # a driver ends (0) after writing its last round's files; any other end is a failure
        if time.monotonic() > deadline or any(p.poll() not in (None, 0) for p in procs):
            outputs = [p.communicate(timeout=10)[0] if p.poll() is not None else "running" for p in procs]
            raise AssertionError(f"drivers never wrote {names}: {outputs}")
        time.sleep(0.005)


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


class _BothLookFirst(MlflowClient):
    """A client whose look-up that finds no experiment waits until every driver's look-up has
    found none (or ``gate`` is broken): the one interleaving that fails look-then-create, forced
    rather than hoped for. Create-first never waits here: its loser looks up only after the
    winner's create, and finds the experiment."""

    def __init__(self, uri: str, gate: threading.Barrier) -> None:
        super().__init__(uri)
        self.gate = gate
        self.waited = False

    def get_experiment_by_name(self, name: str) -> Any:
        found = super().get_experiment_by_name(name)
        if found is None:
            self.waited = True
            with contextlib.suppress(threading.BrokenBarrierError):
                self.gate.wait(timeout=60)  # a bound for a broken test, never reached when it holds
        return found


def test_drivers_that_all_look_before_any_creates_still_share_one_experiment(tmp_path: Path) -> None:
    """The sequential test and the timed race above can pass look-then-create by luck; here every
    look-up that finds nothing waits for the other drivers' look-ups, so look-then-create always
    has two creates of one name and one driver fails (checked: with look-then-create put back,
    every run failed with "already exists")."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(uri).search_experiments(max_results=1)  # the schema, made before the race
    drivers = 3
    gate = threading.Barrier(drivers)
    clients = [_BothLookFirst(uri, gate) for _ in range(drivers)]
    with concurrent.futures.ThreadPoolExecutor(drivers) as pool:
        outcomes = list(pool.map(lambda c: _id_or_error(c, "raced"), clients))
    assert len(set(outcomes)) == 1 and outcomes[0].isdigit(), outcomes
    assert MlflowClient(uri).get_experiment(outcomes[0]).name == "raced"
    assert not any(c.waited for c in clients)  # create-first: nobody saw "no experiment"


def _id_or_error(client: MlflowClient, name: str) -> str:
    try:
        return experiment_id_for(client, name)
    except Exception as exc:  # look-then-create's loser: "already exists"
        return f"error: {type(exc).__name__}: {exc}"
