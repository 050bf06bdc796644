"""A sweep's results written to a disk that cannot take them (tests/unit/test_results_full.py):
``python -m tests.support.full_results URI DIR MODE``.

DIR holds a summary.json from before. MODE ``tmpfs``: DIR is a small tmpfs of this process's own
(the test starts it under ``unshare``), filled by a filler file: ENOSPC. MODE ``fsize``: where no
mount can be made, RLIMIT_FSIZE keeps any file under twice MLflow's sqlite file: EFBIG.
Then the driver's ``_write_results`` writes a summary larger than that, for a real parent
run in MLflow on URI.
Prints one JSON line: the error raised, what DIR holds, the summary's text."""

from __future__ import annotations

import contextlib
import json
import resource
import signal
import sys
from pathlib import Path

from scalesweep.orchestrator.launch.run import Outcome, _write_results
from scalesweep.orchestrator.tracking.atomic_file import ResultsUnwritable
from scalesweep.orchestrator.tracking.tracker import SweepTracker

BEFORE = '[{"name": "the run before"}]'


def main(uri: str, directory: Path, mode: str) -> int:
    tracker = SweepTracker(uri, "full-results")
    parent = tracker.start_parent({}, {})
    (directory / "summary.json").write_text(BEFORE)
    if mode == "tmpfs":
        with contextlib.suppress(OSError), (directory / "filler").open("wb") as f:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
    limit = 4096
    if mode != "tmpfs":  # a limit above MLflow's sqlite file, which must still take the KILLED
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not death
        limit = 2 * Path(uri.removeprefix("sqlite:///")).stat().st_size
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    outcome = Outcome(parent_run_id=parent, experiment="full-results", sweep_dir=directory,
                      tracking_uri=uri, trials=[{"name": "x" * limit, "status": "completed"}])
    raised = None
    try:
        _write_results(outcome, None, tracker)
    except ResultsUnwritable as exc:
        raised = str(exc)
    print(json.dumps({"raised": raised, "parent": parent,
                      "files": sorted(p.name for p in directory.iterdir()),
                      "summary": (directory / "summary.json").read_text()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3]))
