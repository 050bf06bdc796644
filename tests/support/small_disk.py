"""A directory whose filesystem fills up: a 256 KB tmpfs mounted on it in a user namespace of
the command's own (nothing is mounted outside it, and it goes away with the command), or, with
``mode="fsize"``, the command's RLIMIT_FSIZE, set by the command itself."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

MOUNT = 'mount -t tmpfs -o size=256k tmpfs "$1" && shift && exec "$@"'


def on_small_disk(cmd: list[str], small: Path, mode: str) -> list[str]:
    """``cmd`` run with ``small`` on a tmpfs of its own (``mode="tmpfs"``), else as it is."""
    if mode != "tmpfs":
        return cmd
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare: no filesystem of our own to fill")
    wrap = [unshare, "--user", "--map-root-user", "--mount", "sh", "-c", MOUNT, "sh", str(small)]
    probe = subprocess.run([*wrap, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"no user namespace with a mount of its own here: {probe.stderr.strip()}")
    return [*wrap, *cmd]


def assert_each_eval_once(client: Any, experiment_id: str, checkpoint_every: int) -> set[str]:
    """The completed trials of a sweep that a full disk stopped and ``resume`` finished, by
    name: each FINISHED, each eval in its ``dev_loss`` history once and none missing (every
    ``eval_every`` updates, every ``checkpoint_every``, and the last)."""
    finished: set[str] = set()
    for child in client.search_runs([experiment_id], "tags.status = 'completed'"):
        assert child.info.status == "FINISHED", child.info.run_name
        total, every = int(child.data.params["total_updates"]), int(child.data.params["eval_every"])
        steps = [m.step for m in client.get_metric_history(child.info.run_id, "dev_loss")]
        assert steps == sorted({*range(every, total + 1, every),
                                *range(checkpoint_every, total + 1, checkpoint_every), total}), \
            child.info.run_name
        finished.add(child.info.run_name)
    return finished
