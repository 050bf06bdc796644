"""The drivers of tests/integration/test_resume_race_e2e.py: real `scalesweep resume` processes
released together, round after round, on one sweep directory.
``python -m tests.support.race_resume SWEEP_DIR GATE_DIR DRIVERS ROUNDS [MODULE...]``

This process imports the CLI once, and the MODULEs (the sweep's workload, which resume's plan
imports), and forks the DRIVERS drivers from it: a fork costs nothing, where each driver
importing them itself would cost seconds of CPU, the most of this test. It imports and runs
nothing: a thread pool started before a fork (torch's) would not work after it. It forks
another driver for each line ``INDEX ROUND`` read from GATE_DIR/spawn (a FIFO), to replace
one the test killed; it ends when the test closes that FIFO.

Driver INDEX, each round R from its first:

* writes ``ready-R-INDEX`` (its pid) and opens the FIFO ``go-R``, which blocks until the test
  opens the other end: one event releases every driver, and a waiting driver spins on nothing;
* runs the CLI's ``main`` in this process: ``resume SWEEP_DIR --tracking-uri
  sqlite:///GATE_DIR/store-INDEX``;
* writes ``answer-R-INDEX``: its exit status and what it wrote to stderr.

``store-INDEX`` is a FIFO too. resume checks its store right after taking the sweep's lock,
before it reads MLflow or starts Ray, and that check opens the file: so the driver that holds
the lock stops there, holding it, until the test writes to the FIFO (the check then fails:
not a SQLite file, exit 2, and the lock is released) or kills it. The test thus sees every
driver that holds the lock at once, and chooses when the holder lets go. A driver's stdout
(the note of a stale lock taken over) goes to ``out-PID``.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import signal
import sys
import traceback
from pathlib import Path

#: what resume imports up to its store check: imported once, before the forks
IMPORTED = ("scalesweep.orchestrator.cli", "scalesweep.orchestrator.commands.resume",
            "scalesweep.orchestrator.launch.run", "scalesweep.orchestrator.launch.solve_state",
            "scalesweep.orchestrator.usecases.progress", "scalesweep.orchestrator.usecases.run",
            "scalesweep.orchestrator.usecases.solve")


def _write(path: Path, text: str) -> None:
    """Whole or not at all: the test polls for the file and reads it at once."""
    part = path.with_name(path.name + ".part")
    part.write_text(text)
    os.replace(part, path)


def _drive(sweep_dir: Path, gate: Path, index: int, first: int, rounds: int) -> None:
    from scalesweep.orchestrator.cli import main

    argv = ["resume", str(sweep_dir), "--no-report",
            "--tracking-uri", f"sqlite:///{gate / f'store-{index}'}"]
    for round_ in range(first, rounds):
        _write(gate / f"ready-{round_}-{index}", str(os.getpid()))
        os.close(os.open(gate / f"go-{round_}", os.O_RDONLY))  # the gate: blocks until it opens
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = main(argv)
        _write(gate / f"answer-{round_}-{index}", json.dumps({"rc": rc, "stderr": err.getvalue()}))


def _fork(sweep_dir: Path, gate: Path, index: int, first: int, rounds: int, spawn_fd: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork():
        return
    code = 1
    try:
        os.close(spawn_fd)  # only the forking process reads the requests
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        out = os.open(gate / f"out-{os.getpid()}", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        _drive(sweep_dir, gate, index, first, rounds)
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # never back into the forking process's loop


def main(sweep_dir: Path, gate: Path, drivers: int, rounds: int, modules: list[str]) -> int:
    for module in [*IMPORTED, *modules]:
        importlib.import_module(module)
    # the kernel reaps the drivers: one the test killed is gone at once, its pid dead (a
    # zombie would still answer kill(pid, 0), and its lock would not look stale)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    spawn_fd = os.open(gate / "spawn", os.O_RDONLY)  # blocks until the test opens its end
    with os.fdopen(spawn_fd) as requests:
        for index in range(drivers):
            _fork(sweep_dir, gate, index, 0, rounds, spawn_fd)
        for line in requests:
            index, first = map(int, line.split())
            _fork(sweep_dir, gate, index, first, rounds, spawn_fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]))
