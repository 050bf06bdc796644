"""A study's report written to a disk that cannot take it (tests/unit/test_report_full.py):
``python -m tests.support.full_report URI EXPERIMENT PARENT_ID DIR MODE HOW``.

DIR holds a report from before (its arms.json and report.html). MODE ``tmpfs``: DIR is a small
tmpfs of this process's own (the test starts it under ``unshare``), filled by a filler file:
ENOSPC. MODE ``fsize``: where no mount can be made, RLIMIT_FSIZE keeps every file this process
writes under a report figure's size: EFBIG.

Then the report is written, HOW ``run``: as the sweep driver does at the end of a sweep
(``usecases.run.write_report`` for parent run PARENT_ID of MLflow on URI); HOW ``report``: as
``scalesweep report --experiment EXPERIMENT --out DIR`` does (the CLI's ``main``, in this
process). Prints one JSON line: the error write_report raised, or the CLI's exit code and
output, and what DIR holds."""

from __future__ import annotations

import contextlib
import io
import json
import resource
import signal
import sys
from pathlib import Path

from scalesweep.dashboards.report import ReportUnwritable
from scalesweep.orchestrator.cli import main as cli
from scalesweep.orchestrator.launch.run import Outcome
from scalesweep.orchestrator.usecases.run import write_report

BEFORE = {"arms.json": '[{"arm": "the report before"}]', "report.html": "<html>before</html>"}
#: under a report figure (tens of KB), over what MLflow's sqlite reader and Python write
FSIZE_LIMIT = 8 * 1024


def main(uri: str, experiment: str, parent: str, directory: Path, mode: str, how: str) -> int:
    for name, text in BEFORE.items():
        (directory / name).write_text(text)
    if mode == "tmpfs":
        with contextlib.suppress(OSError), (directory / "filler").open("wb") as f:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
    else:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not death
        resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_LIMIT, resource.RLIM_INFINITY))
    raised, rc = None, None
    out, err = io.StringIO(), io.StringIO()
    if how == "run":
        try:
            write_report(Outcome(parent_run_id=parent, experiment=experiment, sweep_dir=directory,
                                 tracking_uri=uri), directory)
        except ReportUnwritable as exc:
            raised = str(exc)
    else:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli(["report", "--experiment", experiment, "--tracking-uri", uri, "--out",
                      str(directory)])
    print(json.dumps({"raised": raised, "rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue(),
                      "files": sorted(p.name for p in directory.iterdir() if p.name != "filler"),
                      "before": {name: (directory / name).read_text() for name in BEFORE}}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]), sys.argv[5],
                  sys.argv[6]))
