"""A sweep driver's callback whose journal's disk fills up (tests/unit/test_journal_full.py):
``python -m tests.support.full_journal URI JOURNAL_DIR MODE``.

MODE ``tmpfs``: JOURNAL_DIR is a small tmpfs mounted for this process only (the test starts it
under ``unshare``); a filler file takes every free block, so the journal grows into the rest of
its last page and then gets ENOSPC, a write cut short first. MODE ``fsize``: where no mount can
be made, RLIMIT_FSIZE stops the journal a few lines on (EFBIG), past a sparse start.

The callback (a real SweepCallback and SweepTracker, MLflow on URI) gets a trial's evals until
the journal refuses one and one more after it; the trial then ends and the experiment too.
Space is freed, and one more eval is journaled. Prints one JSON line: what happened."""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import signal
import sys
from pathlib import Path
from typing import Any

from scalesweep.orchestrator.tracking.callback import SweepCallback
from scalesweep.orchestrator.tracking.tracker import JournalUnwritable, SweepTracker

#: the journal stops long before; a bound for a disk that never fills
MAX_EVALS = 5000
FSIZE_LIMIT = 1 << 20


class Trial:
    """What the callback reads of Tune's Trial."""

    trial_id = "full_00000"
    error_file = None
    error_msg = None

    def __init__(self, name: str) -> None:
        self.config = {"trial_config": {"trial": {"name": name, "total_updates": MAX_EVALS + 10}}}

    def get_error(self) -> None:
        return None


def _fill(directory: Path) -> Path:
    filler = directory / "filler"
    with contextlib.suppress(OSError), filler.open("wb") as f:
        while True:
            f.write(b"\0" * 65536)
            f.flush()
    return filler


def main(uri: str, directory: Path, mode: str) -> int:
    journal = directory / "metrics.journal.jsonl"
    tracker = SweepTracker(uri, "full-disk", flush_every_s=3600, journal=journal)
    parent = tracker.start_parent({}, {})
    out = io.StringIO()
    stops: list[str] = []
    callback = SweepCallback(tracker, lambda name: tracker.child(parent, name, {}), {}, out=out,
                             progress_every_s=3600)

    def stop_tune() -> bool:  # Tune's graceful stop, asked (and granted)
        stops.append("stop")
        return True

    callback.stop_tune = stop_tune
    trial = Trial("t0")
    callback.on_trial_start(0, [trial], trial)

    def report(step: int) -> None:
        callback.on_trial_result(0, [trial], trial, {"update": step, "epoch": step / 10,
                                                     "dev_loss": 1.0 / step, "status": "running"})

    for step in (1, 2, 3):
        report(step)
    if mode == "tmpfs":
        filler = _fill(directory)
    else:  # a file may not grow past the limit: the journal's start is made a sparse hole
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not death
        os.truncate(journal, FSIZE_LIMIT - 1001)
        with journal.open("ab") as f:  # the hole is one line, which the journal's reader skips
            f.write(b"\n")
        resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_LIMIT, resource.RLIM_INFINITY))
    step = 3
    while callback.stopped_by is None and step < MAX_EVALS:
        step += 1
        report(step)
    refused = step
    report(step + 1)  # a result already on its way when Tune was asked to stop
    callback.on_trial_complete(0, [trial], trial)
    ended: dict[str, Any] = {}
    try:
        callback.on_experiment_end([trial])
    except JournalUnwritable as exc:
        ended = {"raised": str(exc), "errno": exc.error.errno}
    if mode == "tmpfs":
        filler.unlink()
    else:
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    tracker.add_result(callback.run_ids["t0"], step + 2, {"dev_loss": 0.5})  # space again
    lines = journal.read_bytes().split(b"\n")
    print(json.dumps({"refused": refused, "stops": len(stops), "printed": out.getvalue(), **ended,
                      "run_id": callback.run_ids["t0"], "journal_ends_with_newline": lines[-1] == b"",
                      "journal_steps": [_step(line) for line in lines[:-1]]}))
    return 0


def _step(line: bytes) -> int | None:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError):
        return None  # the sparse start of the fsize mode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3]))
