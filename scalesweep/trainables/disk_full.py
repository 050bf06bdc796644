"""A checkpoint the disk cannot take: ENOSPC, EDQUOT (or EFBIG, a limit on a file's size) while
a trial saves one (``checkpointing.save`` in its own temporary directory) or while Tune or Ray
Train persists it to the sweep's storage.

Every trial of the sweep checkpoints to the same disks, so every following trial would fail the
same way: the trial driver finds the error behind whatever wrapped it (Ray Train's
``TrainingFailedError``, a worker's ``UserExceptionWithTraceback``, a ``RayTaskError``, a
chained cause), says so in the trial's last result (:data:`DISK_FULL_KEY`), and the sweep
driver's callback stops the sweep for ``resume`` (:class:`CheckpointUnwritable`), as for a full
journal, instead of failing one trial after another."""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scalesweep.atomic_file import DISK_FULL_ERRNOS
from scalesweep.errors import ScalesweepError
from scalesweep.mlflow_names import ERROR_TAG, STATUS_TAG

#: the key of a failed trial's last result whose checkpoint the disk refused: the path
DISK_FULL_KEY = "_scalesweep_disk_full"
#: the OS's words for those errors, as an error flattened to text carries them ("[Errno 28] No
#: space left on device", pyarrow's "Detail: [errno 28] No space left on device")
_CODES = "|".join(str(e) for e in sorted(DISK_FULL_ERRNOS))
_TEXT = re.compile(rf"\[errno ({_CODES})\]", re.IGNORECASE)
_WORDS = re.compile(r"No space left on device|Disk quota exceeded", re.IGNORECASE)


class CheckpointUnwritable(ScalesweepError, RuntimeError):
    """A trial's checkpoint could not be written (a full disk, a quota): the sweep stops,
    to be resumed once there is space, rather than fail every trial after it alike."""

    def __init__(self, line: str, trial: str, sweep_dir: Path | None) -> None:
        self.line = line
        self.trial = trial
        where = (f"`scalesweep resume {sweep_dir}`" if sweep_dir is not None
                 else "`scalesweep resume` with the sweep's directory")
        super().__init__(
            f"{line}; every trial checkpoints to this disk, so the sweep stopped at trial {trial}: "
            "finished trials are kept, the others go on from their last whole checkpoint. Free "
            f"space, then {where}")


def disk_full(exc: BaseException) -> OSError | None:
    """The OSError behind ``exc`` that says the disk is full, if that is what it is: ``exc``
    itself, a cause or context, Ray's wrappers' (``cause``, ``_base_exc``, Ray Train's
    ``controller_failure`` and ``worker_failures``), or, for an error that crossed a process as
    text only, an OSError made from its words (without a path)."""
    todo, seen = [exc], set()
    while todo:
        error = todo.pop()
        if id(error) in seen:  # a chain that loops
            continue
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in DISK_FULL_ERRNOS:
            return error
        failures = getattr(error, "worker_failures", None)
        todo.extend(e for e in (error.__cause__, error.__context__, getattr(error, "cause", None),
                                getattr(error, "_base_exc", None),
                                getattr(error, "controller_failure", None),
                                *(failures.values() if isinstance(failures, Mapping) else ()))
                    if isinstance(e, BaseException))
    return from_text(str(exc))


def from_text(text: str) -> OSError | None:
    """The disk-full OSError a traceback or an error's text names, or None."""
    found = _TEXT.search(text)
    if found is not None:
        code = int(found.group(1))
        return OSError(code, _strerror(code))
    words = _WORDS.search(text)
    if words is None:
        return None
    code = errno.ENOSPC if words.group(0).lower().startswith("no space") else errno.EDQUOT
    return OSError(code, _strerror(code))


def _strerror(code: int) -> str:
    return os.strerror(code)


def with_path(error: OSError, path: str | Path) -> OSError:
    """``error`` naming ``path`` when it names none (a write's error does not say the file's
    name): the same errno and words."""
    if error.filename is not None:
        return error
    named = OSError(error.errno, error.strerror or _strerror(error.errno or 0), str(path))
    named.__cause__ = error
    return named


def line(error: OSError, where: str | Path | None = None) -> str:
    """``<path>: cannot save the trial's checkpoint (<the OS's words>, <ENOSPC|EDQUOT|EFBIG>)``."""
    code = errno.errorcode.get(error.errno or 0, str(error.errno))
    path = error.filename if error.filename is not None else where
    words = _strerror(error.errno or 0)  # the OS's words: pyarrow's strerror wraps them in its own
    return f"{path or 'the checkpoint'}: cannot save the trial's checkpoint ({words}, {code})"


def failed_result(error: OSError, where: str | Path | None = None) -> dict[str, Any]:
    """The last result of a trial whose checkpoint the disk refused: failed, with the line
    that says where and why, and :data:`DISK_FULL_KEY` (the sweep stops on it)."""
    path = error.filename if error.filename is not None else where
    return {STATUS_TAG: "failed", ERROR_TAG: line(error, where),
            DISK_FULL_KEY: str(path) if path is not None else ""}
