"""Real DDP without Ray: a gloo group of spawned processes on 127.0.0.1, for tests that
compare a P-process run against simulate without paying for a Ray cluster."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

TIMEOUT_S = 240


def run(size: int, job: Callable[..., None], args: tuple[Any, ...], out: Path,
        timeout_s: float = TIMEOUT_S) -> None:
    """Run ``job(rank, *args)`` on every rank of a gloo group of ``size`` spawned processes;
    fails naming each rank's exit code if one hangs or fails. ``job`` is a module-level
    function (spawn pickles it by name) that writes its results under ``out``."""
    context = multiprocessing.get_context("spawn")
    init_file = out / "rendezvous"
    processes = [context.Process(target=_process, args=(r, size, str(init_file), job, args))
                 for r in range(size)]
    for process in processes:
        process.start()
    deadline = time.monotonic() + timeout_s
    try:
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
    finally:
        hung = [p for p in processes if p.is_alive()]
        for process in hung:  # ours alone, by handle
            process.kill()
            process.join()
    assert not hung, f"{len(hung)} of {size} gloo workers still running after {timeout_s} s"
    codes = [p.exitcode for p in processes]
    assert codes == [0] * size, f"gloo workers' exit codes {codes} (a negative code is a signal)"
    init_file.unlink(missing_ok=True)


def _process(rank: int, size: int, init_file: str, job: Callable[..., None],
             args: tuple[Any, ...]) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)  # several processes on a small machine
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # 127.0.0.1: never the host's network
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=size)
    try:
        job(rank, *args)
        dist.barrier()  # no rank tears its pairs down while a peer's last collective is in flight
    finally:
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    # Everything is written; skip interpreter finalization, where gloo's worker threads have
    # aborted a finished rank (SIGABRT, "terminate called without an active exception").
    os._exit(0)
