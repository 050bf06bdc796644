"""Many `scalesweep resume` drivers started together on one interrupted sweep (issue 50): each
round exactly one holds the sweep, every other exits 2 naming it (host and pid), a lock left by
a holder killed with SIGKILL is taken over, and the sweep a last resume finishes has each
trial's evals once.

The sweep is a real `scalesweep run` interrupted by Ctrl-C while its second trial is held at
a gate (tests.support.gated_workload), as tests/integration/test_ctrl_c.py does. The drivers
(tests/support/race_resume.py) run the CLI's own ``main``, round after round, released by
one event (a FIFO's open); the one that gets the lock stops at resume's store check, which
opens a FIFO the test holds, so it keeps the lock until every other driver has its answer,
and two holders would both be seen. That stop comes before Ray and MLflow: the rounds train
nothing, and cost a fork and a CLI call per driver. Every third round the test kills the
holder (SIGKILL), so the next round, and the last resume, find a lock whose pid is dead.
Nothing here waits a fixed time: each wait is for a file or a FIFO's other end, with a
deadline that only bounds a broken driver.

Checked by breaking the lock (``sweep_lock._locked`` always True): round 0 fails, all 8
drivers holding the sweep at once."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from scalesweep.orchestrator.launch import sweep_lock
from tests.conftest import RayHead
from tests.support.gated_workload import eval_counts
from tests.support.helpers import ROOT, SWEEPS, cli_env, scalesweep, stop_group, wait_for
from tests.support.small_disk import assert_each_eval_once

pytestmark = pytest.mark.slow

STUDY = "smoke_race"
#: the smoke study cut to 2 trials of one epoch, one at a time; an eval every 1/4 epoch
SETS = ["--set", f"name={STUDY}", "--set", "axes.scaling_rule=[none]",
        "--set", "resources.max_concurrent_trials=1", "--set", "training.epochs=1",
        "--set", "training.eval_every_epochs=0.25", "--set", "training.checkpoint_every=8"]
WORKLOAD = "tests.support.gated_workload"
TRIALS = {"ws2-warmup20-none", "ws4-warmup20-none"}
DRIVERS, ROUNDS = 8, 20
#: rounds whose holder is killed: the round after each (and the last resume) finds its lock
KILLED = frozenset(range(1, ROUNDS, 3))
#: what the test writes into a holder's "store": not SQLite, so its resume stops there, exit 2
NOT_SQLITE = b"not a sqlite db\n"
DEADLINE_S = 600  # the run and the resume: hang guards only
WAIT_S = 120.0  # a driver's answer: a bound for a broken driver, not a timing assumption


def test_drivers_started_together_one_resumes_and_no_trial_trains_twice(tmp_path: Path,
                                                                          ray_head: RayHead) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    sweep_dir = _interrupted_sweep(tmp_path, gate, ray_head)
    killed = _race(sweep_dir, tmp_path / "race")
    lock = sweep_dir / sweep_lock.LOCK_FILE
    assert json.loads(lock.read_text())["pid"] == killed[-1]  # the last round's holder, killed

    done = scalesweep("resume", "--no-report", str(sweep_dir), *ray_head.args(), cwd=tmp_path,
                      timeout=DEADLINE_S, PYTHONPATH=str(ROOT), **ray_head.env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"taking over {lock} from a driver that is gone ({{'host': '{socket.gethostname()}', " \
        f"'pid': {killed[-1]}" in done.stdout, done.stdout
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name(STUDY)
    assert exp is not None
    children = client.search_runs([exp.experiment_id], "tags.`scalesweep.role` = 'trial'")
    assert sorted(r.info.run_name for r in children) == sorted(TRIALS)  # one run per trial
    assert assert_each_eval_once(client, exp.experiment_id, 8) == TRIALS
    # models built: the finished trial's (0), the held one's (1) and its resume's (2), no other
    assert sorted(eval_counts(gate)) == [0, 1, 2], eval_counts(gate)


def _interrupted_sweep(cwd: Path, gate: Path, ray_head: RayHead) -> Path:
    """A `scalesweep run` stopped by Ctrl-C with its first trial finished and its second held
    at its 3rd eval; the sweep's directory."""
    workload = (f"workload={{name: '{WORKLOAD}:make', options: {{gate_dir: '{gate}', "
                "gated_trial: 1, gate_eval: 3}}")
    driver = subprocess.Popen(
        [sys.executable, "-m", "scalesweep", "run", "--no-report", str(SWEEPS / "smoke.yaml"), *SETS,
         "--set", workload, *ray_head.args()],
        cwd=cwd, env=cli_env(PYTHONPATH=str(ROOT), **ray_head.env()), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True)
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    try:
        try:
            wait_for("the second trial held at the gate", (gate / "waiting").exists, driver, DEADLINE_S)
            wait_for("the first trial finished in MLflow", lambda: _completed(client) == 1, driver,
                     DEADLINE_S)
        except AssertionError as exc:
            stop_group(driver, grace_s=10)
            raise AssertionError(f"{exc}: {driver.communicate()[0][-5000:]}") from None
        os.killpg(driver.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        out, _ = driver.communicate(timeout=DEADLINE_S)
    finally:
        stop_group(driver, grace_s=10)
        (gate / "release").touch()
    assert driver.returncode == 1 and "scalesweep resume" in out, out
    (sweep_dir,) = (cwd / "scalesweep_runs").glob(f"{STUDY}-*")
    assert not (sweep_dir / sweep_lock.LOCK_FILE).exists()
    return sweep_dir


def _completed(client: MlflowClient) -> int:
    exp = client.get_experiment_by_name(STUDY)
    return 0 if exp is None else len(client.search_runs([exp.experiment_id], "tags.status = 'completed'"))


class _Race:
    """The test's side of tests/support/race_resume.py: it opens each round's gate, finds the
    drivers that hold the sweep (their store FIFO has a reader) and the answers of the rest,
    and lets the holder go or kills it."""

    def __init__(self, sweep_dir: Path, gate: Path) -> None:
        self.sweep_dir, self.gate = sweep_dir, gate
        self.lock = sweep_dir / sweep_lock.LOCK_FILE
        self.host = socket.gethostname()
        for name in [*(f"go-{r}" for r in range(ROUNDS)), *(f"store-{i}" for i in range(DRIVERS)), "spawn"]:
            os.mkfifo(gate / name)
        with (gate / "forker.log").open("wb") as log:
            self.forker = subprocess.Popen(
                [sys.executable, "-m", "tests.support.race_resume", str(sweep_dir), str(gate),
                 str(DRIVERS), str(ROUNDS), WORKLOAD], cwd=ROOT, env=cli_env(PYTHONPATH=str(ROOT)),
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.pids: dict[int, int] = {}  # driver index -> its pid, this round
        self.held: dict[int, int] = {}  # driver index -> our end of its store FIFO, while it holds
        self.killed: list[int] = []
        self.spawn = -1  # our end of the forking process's requests, once it listens

    def start(self) -> None:
        self.spawn = self._writer(self.gate / "spawn", "the forking process")

    def round(self, r: int) -> None:
        stale = self.killed[-1] if r - 1 in KILLED else None
        self._lock_left(stale)
        self.pids = {i: int(self._read(f"ready-{r}-{i}")) for i in range(DRIVERS)}
        go = self._writer(self.gate / f"go-{r}", f"round {r}'s drivers")  # releases them all
        try:
            answers = self._answers(r)
        finally:
            os.close(go)  # every driver has passed the gate: each answered or holds the sweep
        assert len(self.held) == 1, f"round {r}: drivers {sorted(self.held)} held the sweep at once"
        (winner,) = self.held
        pid = self.pids[winner]
        assert json.loads(self.lock.read_text())["pid"] == pid, f"round {r}: {self.lock.read_text()}"
        named = f"another driver (resume, pid {pid} on {self.host}"
        for i, answer in answers.items():
            assert answer["rc"] == 2 and named in answer["stderr"], f"round {r}, driver {i}: {answer}"
        if stale is not None:
            out = (self.gate / f"out-{pid}").read_text()
            assert f"from a driver that is gone ({{'host': '{self.host}', 'pid': {stale}" in out, out
        if r in KILLED:
            self._kill(r, winner)
        else:
            self._let_go(r, winner)

    def finish(self) -> None:
        """After the last round: the drivers have ended on their own, and the forking process
        ends when its FIFO closes."""
        self.pids = {}
        os.close(self.spawn)
        self.spawn = -1
        assert self.forker.wait(timeout=WAIT_S) == 0, (self.gate / "forker.log").read_text()

    def stop(self) -> None:
        """Every driver still running first, by pid, then the forking process and its group;
        our FIFO ends last, so no held driver is let past its store check."""
        for pid in self.pids.values():
            _kill(pid)
        for fd in [*self.held.values(), self.spawn]:
            if fd >= 0:
                os.close(fd)
        stop_group(self.forker, grace_s=10)

    def _lock_left(self, stale: int | None) -> None:
        """Before a round: no lock (its holder let go), or the record of the one killed."""
        if stale is None:
            assert not self.lock.exists(), self.lock.read_text()
        else:
            assert json.loads(self.lock.read_text())["pid"] == stale

    def _answers(self, r: int) -> dict[int, dict[str, Any]]:
        """Wait until each driver answered or holds the sweep; the answers."""
        answers: dict[int, dict[str, Any]] = {}
        deadline = time.monotonic() + WAIT_S
        while len(answers) + len(self.held) < DRIVERS:
            for i in set(range(DRIVERS)) - set(answers) - set(self.held):
                path = self.gate / f"answer-{r}-{i}"
                if path.exists():
                    answers[i] = json.loads(path.read_text())
                elif (fd := _open_if_read(self.gate / f"store-{i}")) is not None:
                    self.held[i] = fd
            self._check_alive(deadline, f"round {r}'s answers ({sorted(answers)} answered, "
                                        f"{sorted(self.held)} hold the sweep)")
        return answers

    def _let_go(self, r: int, winner: int) -> None:
        """The holder's store check reads what is not SQLite: exit 2, the lock released."""
        fd = self.held.pop(winner)
        os.write(fd, NOT_SQLITE)
        os.close(fd)
        answer = json.loads(self._read(f"answer-{r}-{winner}"))
        assert answer["rc"] == 2 and "is not a SQLite database" in answer["stderr"], answer
        assert not self.lock.exists(), self.lock.read_text()

    def _kill(self, r: int, winner: int) -> None:
        """SIGKILL while it holds the sweep, then a new driver in its place for the next round."""
        pid = self.pids.pop(winner)
        _kill(pid)
        deadline = time.monotonic() + WAIT_S
        while _alive(pid):  # the forking process's kernel reaps it
            self._check_alive(deadline, f"driver {pid} to die")
        os.close(self.held.pop(winner))
        self.killed.append(pid)
        if r + 1 < ROUNDS:
            os.write(self.spawn, f"{winner} {r + 1}\n".encode())

    def _read(self, name: str) -> str:
        deadline = time.monotonic() + WAIT_S
        while not (self.gate / name).exists():
            self._check_alive(deadline, name)
        return (self.gate / name).read_text()

    def _writer(self, fifo: Path, what: str) -> int:
        """Our end of ``fifo``, once the other end is open (a driver, or the forker, waits there)."""
        deadline = time.monotonic() + WAIT_S
        while (fd := _open_if_read(fifo)) is None:
            self._check_alive(deadline, what)
        return fd

    def _check_alive(self, deadline: float, what: str) -> None:
        """One poll's pause; fail if the forking process ended or the wait passed its bound."""
        if self.forker.poll() is not None or time.monotonic() > deadline:
            logs = {p.name: p.read_text()[-2000:] for p in self.gate.glob("*.log")}
            logs.update({p.name: p.read_text()[-2000:] for p in self.gate.glob("out-*")})
            raise AssertionError(f"no {what} (forker exit {self.forker.poll()}): {logs}")
        time.sleep(0.002)


def _race(sweep_dir: Path, gate: Path) -> list[int]:
    """ROUNDS rounds of DRIVERS resumes; the pids of the holders killed, in order."""
    gate.mkdir()
    race = _Race(sweep_dir, gate)
    try:
        race.start()
        for r in range(ROUNDS):
            race.round(r)
        race.finish()
    finally:
        race.stop()
    return race.killed


def _open_if_read(fifo: Path) -> int | None:
    """A write end of ``fifo`` if something has it open to read (or waits in that open), else
    None, without waiting: Linux fails a non-blocking open for writing with ENXIO then."""
    try:
        return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno != errno.ENXIO:
            raise
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
