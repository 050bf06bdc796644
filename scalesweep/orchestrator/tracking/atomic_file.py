"""Files the driver writes whole or appends to, written so that a full disk (ENOSPC, EDQUOT) or
a kill leaves each one as it was or as it is meant to be, never half: a reader after the fault
(``resume``, a user's script) finds the old file or the new one, and a journal line either
whole or not there."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from scalesweep.errors import ScalesweepError


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


def write_text(path: Path | str, text: str) -> None:
    """Replace ``path`` with ``text`` at once: written to a file beside it, then renamed over
    it (a rename within one directory is atomic)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def append_line(path: Path, line: str) -> None:
    """Append ``line`` and a newline whole, or nothing: a write a full disk cut short is cut
    back off, so the line appended once space is freed does not run into its head (and the
    reader, which skips a line it cannot parse, does not lose that one too)."""
    data = memoryview((line + "\n").encode())
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        start = os.fstat(fd).st_size
        try:
            while data:
                data = data[os.write(fd, data):]
        except OSError:
            with contextlib.suppress(OSError):  # freeing space: it does not fail for want of it
                os.ftruncate(fd, start)
            raise
    finally:
        os.close(fd)
