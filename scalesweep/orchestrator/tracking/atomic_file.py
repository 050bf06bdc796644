"""Files the driver writes whole or appends to, written so that a full disk (ENOSPC, EDQUOT) or
a kill leaves each one as it was or as it is meant to be, never half: a reader after the fault
(``resume``, a user's script) finds the old file or the new one, and a journal line either
whole or not there. The writing itself is ``scalesweep.atomic_file``'s (the report's
files use it too, and the dashboards may not import the orchestrator); the driver's error for a
results file the disk refused is here."""

from __future__ import annotations

import errno
from pathlib import Path

from scalesweep.atomic_file import append_line, write_bytes, write_text
from scalesweep.errors import ScalesweepError

__all__ = ["ResultsUnwritable", "append_line", "write_bytes", "write_text"]


class ResultsUnwritable(ScalesweepError, RuntimeError):
    """A results file of a sweep that ran (``summary.json``, ``arms.json``) could not be
    written: a full disk (ENOSPC), a quota (EDQUOT) or another OSError. The trials' runs are in
    MLflow; ``resume`` writes the file once there is space."""

    def __init__(self, path: Path, error: OSError, sweep_dir: Path) -> None:
        self.path = path
        self.error = error
        code = errno.errorcode.get(error.errno or 0, str(error.errno))
        super().__init__(
            f"{path}: cannot write the sweep's results ({error.strerror or error}, {code}); the "
            f"trials and their evals are in MLflow, the file before this one (if any) is whole. "
            f"Free space, then `scalesweep resume {sweep_dir}`")
