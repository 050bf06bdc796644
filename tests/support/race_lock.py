"""One of the drivers that race for a sweep's lock (tests/unit/test_sweep_lock.py):
``python -m tests.support.race_lock SWEEP_DIR GATE_DIR INDEX DRIVERS ROUNDS``.

Each round it waits for the gate ``go-ROUND``, then takes the lock at once
(``sweep_lock.hold``). A driver that gets it writes ``won-ROUND-INDEX`` and keeps the lock until
every driver of the round has its answer, so that two drivers holding it together are both
seen; one refused writes ``refused-ROUND-INDEX`` with the message. Either then writes
``done-ROUND-INDEX`` (a winner after releasing)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from scalesweep.orchestrator.launch import sweep_lock
from scalesweep.orchestrator.spec.errors import InputError

#: a driver gives up waiting after this long, so a dead test cannot leave it spinning
MAX_WAIT_S = 120.0


def _wait_for(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + MAX_WAIT_S
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"error: waited {MAX_WAIT_S} s for {what}")
        time.sleep(0.0005)


def _answered(gate: Path, round_: int, drivers: int) -> bool:
    return all((gate / f"won-{round_}-{i}").exists() or (gate / f"refused-{round_}-{i}").exists()
               for i in range(drivers))


def main(sweep_dir: Path, gate: Path, index: int, drivers: int, rounds: int) -> int:
    (gate / f"ready-{index}").touch()
    for round_ in range(rounds):
        _wait_for((gate / f"go-{round_}").exists, f"go-{round_}")
        try:
            with sweep_lock.hold(sweep_dir, "resume"):
                (gate / f"won-{round_}-{index}").touch()
                _wait_for(partial(_answered, gate, round_, drivers), f"round {round_}'s answers")
        except InputError as exc:
            (gate / f"refused-{round_}-{index}").write_text(exc.message())
        (gate / f"done-{round_}-{index}").touch()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), *map(int, sys.argv[3:6])))
