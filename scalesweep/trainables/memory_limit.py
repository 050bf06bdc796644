"""A worker held to the memory its trial asked for (``resources.memory_per_worker``).

Ray reserves that memory when it places the trial (the ``memory`` resource of each worker's
bundle), so no node is given more trials than it holds; Ray never enforces it, and its own
memory monitor acts only when the whole node is nearly full, by killing the newest task, which
need not be the one that grew. So the loop reads its process's resident memory after each
update and ends the trial with a ``MemoryError`` naming the setting once it is past (its
name says out of memory, which the driver's failure line reads): the trial
that outgrew its share fails, by name, and the others go on. A read is one small ``/proc``
file: cheap beside an update. Where there is no ``/proc`` (not Linux) nothing is checked.
"""

from __future__ import annotations

import os

GIB = 2**30


class WorkerOutOfMemoryError(MemoryError):
    """A worker's resident memory went past its trial's ``memory_per_worker``."""


def resident_bytes() -> int | None:
    """This process's resident set size, or None where ``/proc`` does not say."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class MemoryLimit:
    """``check()`` raises :class:`WorkerOutOfMemoryError` once the process holds more than
    ``gib`` GiB resident; with ``gib`` None it checks nothing."""

    def __init__(self, gib: float | None, trial: str) -> None:
        self.gib, self.trial = gib, trial
        self._limit = None if gib is None else int(gib * GIB)

    def check(self) -> None:
        if self._limit is None:
            return
        held = resident_bytes()
        if held is not None and held > self._limit:
            raise WorkerOutOfMemoryError(
                f"trial {self.trial}'s worker holds {held / GIB:.2f} GiB resident, past "
                f"resources.memory_per_worker ({self.gib:g} GiB)")
