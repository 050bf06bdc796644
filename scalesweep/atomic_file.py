"""Files written whole or not at all, for every layer that writes one: the sweep driver's state
and results (``orchestrator/tracking/atomic_file.py`` re-exports these), the report's files
(``dashboards/report.py``). A full disk (ENOSPC, EDQUOT) or a kill leaves each file as it was or
as it is meant to be, never half: a reader after the fault finds the old file or the new one,
and a journal line either whole or not there. Standard library only, and a layer of its own
at the bottom (beside ``errors``): the dashboards and trials may import it, and they may not
import the orchestrator."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

#: what says the disk cannot take a file, whoever writes it: no space, a quota, a size limit
#: (RLIMIT_FSIZE, a filesystem's largest file)
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def write_text(path: Path | str, text: str) -> None:
    """Replace ``path`` with ``text`` at once: written to a file beside it, then renamed over
    it (a rename within one directory is atomic)."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: Path | str, data: bytes) -> None:
    """Replace ``path`` with ``data`` at once (as :func:`write_text`); on any error the
    temporary file is removed and ``path`` is left as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
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
