"""One driver per sweep directory: a second `run`/`resume` on the same directory is refused
(exit 2, naming the driver) instead of training the same trials twice and racing on the same
files.

The driver holds an exclusive ``flock`` on ``driver.lock`` for its whole life. The kernel
arbitrates it, so of drivers started together exactly one gets it, and a driver that dies (even
by SIGKILL) loses it at once: a lock file that nobody holds is stale whatever pid it names (a
restarted container reuses its hostname and small pids, even the new driver's own), and is
taken over with a note. The file also holds the driver's record (host, pid, command, since),
so a refused driver can name the one running. A record from another host is not taken over:
where the filesystem's locks are local to each host, that driver may be alive; the message
says which host and pid hold it and how to take it over when the user knows it is gone.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from scalesweep.orchestrator.spec.errors import InputError, Problem

LOCK_FILE = "driver.lock"
#: a refused driver waits this long for the record of the one that just took the lock
RECORD_WAIT_S = 5.0
#: each try lost only to a driver that released (and removed) the file between our open and our
#: flock; a few in a row would mean drivers starting and ending in a loop
MAX_TRIES = 50


@contextlib.contextmanager
def hold(sweep_dir: Path, command: str) -> Iterator[None]:
    """Own ``sweep_dir`` while the block runs; exit 2 if another live driver owns it."""
    lock = sweep_dir / LOCK_FILE
    fd = _acquire(sweep_dir, lock, command)
    try:
        yield
    finally:
        _release(lock, fd)


def _acquire(sweep_dir: Path, lock: Path, command: str) -> int:
    for _ in range(MAX_TRIES):
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            if not _locked(fd, lock):
                raise _refusal(sweep_dir, lock, _holder_record(lock))
            if _same_file(fd, lock):
                _claim(sweep_dir, lock, fd, command)
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # a driver releasing it removed the file after our open: open the new one
    raise RuntimeError(f"{lock}: the lock file was replaced {MAX_TRIES} times while we took it")


def _locked(fd: int, lock: Path) -> bool:
    """Whether we got the exclusive lock (False: another open file holds it)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
            raise InputError(str(lock.parent), [Problem(
                "storage_path", str(lock.parent), f"this filesystem does not support file locks "
                f"({exc.strerror}), which keep a second driver off a running sweep: put the sweep "
                "directory on a local disk or a filesystem with locks (NFSv4)")]) from None
        raise
    return True


def _same_file(fd: int, lock: Path) -> bool:
    try:
        on_disk = os.stat(lock)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)


def _claim(sweep_dir: Path, lock: Path, fd: int, command: str) -> None:
    """With the lock held: refuse a record from another host, note a stale one, write ours.
    The record is written into the locked file itself, not by rename: the file is the lock."""
    me = {"host": socket.gethostname(), "pid": os.getpid(), "command": command,
          "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    left = _parse(os.pread(fd, 65536, 0))
    if left is not None and left.get("host") != me["host"]:
        raise _refusal(sweep_dir, lock, left)
    if os.fstat(fd).st_size:
        print(f"note: taking over {lock} from a driver that is gone ({left or 'unreadable'})")
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(me).encode(), 0)


def _release(lock: Path, fd: int) -> None:
    """Remove the file while still holding it (nobody can be writing a record then), then
    close it, which drops the lock; a driver that opened the old file sees it is gone."""
    try:
        if _same_file(fd, lock):
            lock.unlink()
    finally:
        os.close(fd)


def _holder_record(lock: Path) -> dict[str, object] | None:
    """The record of the driver holding ``lock``: read until it is whole and not the stale one
    it is replacing (a dead pid on this host), for up to RECORD_WAIT_S."""
    deadline = time.monotonic() + RECORD_WAIT_S
    while True:
        try:
            record = _parse(lock.read_bytes())
        except OSError:
            record = None
        if record is not None and not _stale(record):
            return record
        if time.monotonic() > deadline:
            return None
        time.sleep(0.01)


def _stale(record: dict[str, object]) -> bool:
    pid = record.get("pid")
    return record.get("host") == socket.gethostname() and isinstance(pid, int) and not _alive(pid)


def _parse(data: bytes) -> dict[str, object] | None:
    try:
        record = json.loads(data)
    except ValueError:
        return None  # empty or half-written: being written by a driver that just took the lock
    return record if isinstance(record, dict) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _refusal(sweep_dir: Path, lock: Path, holder: dict[str, object] | None) -> InputError:
    host, pid = (holder or {}).get("host"), (holder or {}).get("pid")
    if holder is None:
        rule = (f"another driver holds this sweep (its record in {lock} is not readable): wait "
                "for it, or stop it and resume")
    elif host == socket.gethostname():
        rule = (f"another driver ({holder.get('command')}, pid {pid} on {host}, since "
                f"{holder.get('since')}) is running this sweep: wait for it, or stop it "
                f"(kill {pid}) and resume")
    else:
        rule = (f"a driver on host {host} (pid {pid}, since {holder.get('since')}) holds this "
                f"sweep; if it is gone, delete {lock} and resume")
    return InputError(str(sweep_dir), [Problem(LOCK_FILE, holder, rule)])
