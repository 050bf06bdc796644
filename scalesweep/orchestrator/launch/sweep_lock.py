"""One driver per sweep directory: a lock file holding the host and pid of the driver that owns
the sweep, so a second `run`/`resume` on the same directory is refused (exit 2, naming the
driver) instead of training the same trials twice and racing on the same files.

A lock whose process is gone (the driver was killed: the case `resume` exists for) is stale
and is taken over with a note. On another host the process cannot be checked: the message
says which host and pid hold it and how to take it over when the user knows it is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from scalesweep.orchestrator.spec.errors import InputError, Problem

LOCK_FILE = "driver.lock"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _holder(lock: Path) -> dict[str, object] | None:
    try:
        data = json.loads(lock.read_text())
    except (OSError, ValueError):
        return None  # unreadable: half-written by a driver killed while taking it; stale
    return data if isinstance(data, dict) else None


@contextlib.contextmanager
def hold(sweep_dir: Path, command: str) -> Iterator[None]:
    """Own ``sweep_dir`` while the block runs; exit 2 if another live driver owns it."""
    lock = sweep_dir / LOCK_FILE
    me = {"host": socket.gethostname(), "pid": os.getpid(), "command": command,
          "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    for _ in range(2):  # the second pass after removing a stale lock
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _holder(lock)
            host, pid = (holder or {}).get("host"), (holder or {}).get("pid")
            if holder is not None and host == me["host"] and isinstance(pid, int) and _alive(pid):
                raise InputError(str(sweep_dir), [Problem(
                    LOCK_FILE, holder, f"another driver ({holder.get('command')}, pid {pid} on "
                    f"{host}, since {holder.get('since')}) is running this sweep: wait for it, or "
                    f"stop it (kill {pid}) and resume")]) from None
            if holder is not None and host != me["host"]:
                raise InputError(str(sweep_dir), [Problem(
                    LOCK_FILE, holder, f"a driver on host {host} (pid {pid}, since "
                    f"{holder.get('since')}) holds this sweep; if it is gone, delete {lock} and "
                    "resume")]) from None
            print(f"note: taking over {lock} from a driver that is gone ({holder or 'unreadable'})")
            lock.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        break
    try:
        yield
    finally:
        if (_holder(lock) or {}).get("pid") == me["pid"]:
            lock.unlink(missing_ok=True)
