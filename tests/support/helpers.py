"""Shared test helpers: run the real CLI, start real servers on 127.0.0.1, read MLflow."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from scalesweep import loop_helpers
from scalesweep.science import schedules

ROOT = Path(__file__).resolve().parents[2]
SWEEPS = ROOT / "sweeps"
#: the console script of the environment running the tests (the checkout's .venv, or the venv a
#: wheel was installed into by tests/integration/test_wheel_install.py), not a path inside the checkout
SCALESWEEP = Path(sys.executable).parent / "scalesweep"


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update({"RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"}, **extra)
    return env


def bounded_run(cmd: Sequence[str], *, timeout: float, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(cmd, capture_output=True, text=True)`` in a process group of its own:
    past ``timeout``, or when the test itself is stopped (pytest-timeout), the whole group is
    killed, so a CLI or benchmark the test started cannot leave a child (a benchmark's
    `scalesweep run`, a local Ray) running after the test."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def same_value(a: object, b: object) -> bool:
    """Equal as one study's tables and another's hold a value: missing on both sides (JSON's
    null, a table's NaN), floats to rounding (rel 1e-9), anything else exactly."""
    def missing(x: object) -> bool:
        return x is None or (isinstance(x, float) and math.isnan(x))

    if missing(a) or missing(b):
        return missing(a) and missing(b)
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9)
    return a == b


def scalesweep(*args: str, cwd: Path, timeout: float = 600, **env: str
               ) -> subprocess.CompletedProcess[str]:
    return bounded_run([sys.executable, "-m", "scalesweep", *args], cwd=cwd, env=cli_env(**env),
                       timeout=timeout)


def cli(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> str:
    """stdout of a successful in-process run of the CLI."""
    from scalesweep.orchestrator.cli import main

    capsys.readouterr()
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


#: ports a Ray on default settings takes (the dashboard agent's, the Ray Client server's and
#: the specific servers it starts per client): a cluster of a test on another xdist worker must
#: not hold one of them when a local Ray starts
RAY_DEFAULT_PORTS = frozenset({52365, 10001, *range(23000, 24001)})


#: every port free_port has handed out in this process: the kernel may give a just-closed port
#: again, and one Ray node's list of ports with a repeat fails its start (it did, once, in CI)
_HANDED_OUT: set[int] = set()


def stop_group(proc: subprocess.Popen[Any], grace_s: float = 60) -> None:
    """End the process group a test started with ``start_new_session=True`` (``proc`` leads
    it): SIGTERM, then SIGKILL after ``grace_s``. Nothing outside that group is signalled."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def free_port() -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in RAY_DEFAULT_PORTS and port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def wait_http(url: str, timeout: float = 60.0, proc: subprocess.Popen[Any] | None = None) -> None:
    """Until ``url`` answers; a bound, not a speed check (a loaded 2-core box starts a server in
    tens of seconds); ``proc``, the server's process, fails the wait at once if it ends."""
    end = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"the server for {url} exited with {proc.returncode}") from None
            if time.monotonic() > end:
                raise TimeoutError(f"{url} did not answer in {timeout} s") from None
            time.sleep(0.5)



def wait_for(what: str, condition: Callable[[], bool], driver: subprocess.Popen[Any],
             deadline_s: float) -> None:
    """Poll ``condition`` until it holds; fail at once if the sweep ``driver`` exits first, or
    after ``deadline_s`` (a hang guard only)."""
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert driver.poll() is None, f"the sweep driver exited while waiting for {what}"
        assert time.monotonic() < deadline, f"no {what} in {deadline_s} s"
        time.sleep(0.3)

class MlflowServer:
    """A real `mlflow server` on 127.0.0.1, stopped by its own pid."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> MlflowServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = (self.workdir / "server.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1",
             "--port", str(self.port), "--backend-store-uri",
             f"sqlite:///{self.workdir / 'server.db'}", "--workers", "1"],
            cwd=self.workdir, stdout=log, stderr=log, env=cli_env(), start_new_session=True)
        # MLflow 3's server starts its job consumers too: minutes on a loaded 2-core box
        wait_http(f"{self.uri}/health", timeout=240, proc=self.proc)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
        self.proc = None


class AsRayTrain:
    """``send`` as Ray Train takes a report: the metrics, and a copy of the checkpoint's
    directory made before the call returns (the Trainer deletes its older copies)."""

    def __init__(self, into: Path) -> None:
        self.into, self.saved = into, {}  # type: dict[int, Path]

    def __call__(self, config: dict[str, Any], *, checkpoint: Any = None,
                 **report: Any) -> dict[str, float]:
        metrics = loop_helpers.build_report(config, **report)
        if checkpoint is not None:
            self.saved[int(metrics["update"])] = Path(
                shutil.copytree(checkpoint.path, self.into / f"update-{metrics['update']}"))
        return metrics


def race_to_make_experiment(uri: str, name: str, gate: Path, drivers: int = 2,
                            env: dict[str, str] | None = None) -> list[str]:
    """``drivers`` processes (tests/support/race_experiment.py) released together by a gate file make
    the experiment ``name``; each one's last line (the experiment id, or its error)."""
    gate.mkdir(parents=True, exist_ok=True)
    procs = [subprocess.Popen([sys.executable, "-m", "tests.support.race_experiment", uri, name, str(gate),
                               str(i)], cwd=ROOT, env=env or cli_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for i in range(drivers)]
    try:
        deadline = time.monotonic() + 120
        while not all((gate / f"ready-{i}").exists() for i in range(drivers)):
            assert time.monotonic() < deadline, "the drivers never got ready"
            assert all(p.poll() is None for p in procs), [p.communicate()[0] for p in procs]
            time.sleep(0.05)
        (gate / "go").touch()
        return [p.communicate(timeout=120)[0].strip().splitlines()[-1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def schedule_spec(sp: Any, base_lr: float | None = None) -> schedules.ScheduleSpec:
    """A test's schedule dict judged once (``resolve``), as a notebook does before building it;
    a ScheduleSpec as it is."""
    return sp if isinstance(sp, schedules.ScheduleSpec) else schedules.resolve(sp, base_lr)


def built_schedule(sp: Any, base_lr: float) -> schedules.BuiltSchedule:
    """A test's schedule dict (or spec) resolved, then built at ``base_lr``."""
    return schedules.build(schedule_spec(sp, base_lr), base_lr)
