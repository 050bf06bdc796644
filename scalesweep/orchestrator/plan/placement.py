"""Where each trial of a plan runs: its backend and physical workers on a cluster, a note when
something was chosen for the user, and whether the cluster can hold it.

A plan's trial arithmetic (plan/rows.py) does not depend on the machine; this does. `run` plans
once on this machine, to refuse bad input before Ray starts, and places the same rows again
on the cluster it connected to (``rows.place``), without judging their schedules again.
"""

from __future__ import annotations

from typing import Any

from scalesweep.orchestrator.plan.cluster import WORKER_MEMORY_GB, ClusterInfo


def _loop_placement(spec: Any, ws: int) -> tuple[str, int, str]:
    """A train_loop's trial: ddp (load refuses simulate), one worker per virtual rank unless
    physical_workers says else: a plain DDP loop's ranks are its workers, and only a loop that
    plays virtual ranks (scalesweep.loop_helpers.VirtualRanks) may have fewer."""
    note = "backend auto -> ddp (a train_loop runs on Ray Train workers)" \
        if spec.backend == "auto" else ""
    if spec.physical_workers == "auto":
        return "ddp", ws, note
    workers = int(spec.physical_workers)
    if workers < ws:
        note = _join(note, f"physical_workers {workers} of world_size {ws}: the train_loop must "
                           f"play the virtual ranks ({_assignment(ws, workers)})")
    return "ddp", workers, note


def placement(spec: Any, ws: int, cluster: ClusterInfo) -> tuple[str, int, str]:
    """(backend, physical workers, a note when something was chosen for the user)."""
    if spec.workload.train_loop is not None:
        return _loop_placement(spec, ws)
    res = spec.resources
    backend = spec.backend
    note = ""
    if backend == "auto":
        wants_gpu = res.gpus_per_worker > 0
        workers = ws if spec.physical_workers == "auto" else spec.physical_workers
        if wants_gpu and cluster.gpus >= workers * res.gpus_per_worker:
            backend = "ddp"
            note = f"backend auto -> ddp ({cluster.where} has {cluster.gpus:g} GPUs)"
        else:
            backend = "simulate"
            why = "no GPUs asked for" if not wants_gpu else (
                f"{cluster.where} has {cluster.gpus:g} GPUs, needs {workers * res.gpus_per_worker:g}")
            note = f"backend auto -> simulate ({why})"
    if backend == "simulate":
        return "simulate", 1, note
    if spec.physical_workers != "auto":
        workers = int(spec.physical_workers)
        if workers <= ws and ws % workers:
            note = _join(note, f"physical_workers {workers} of world_size {ws}: "
                               f"{_assignment(ws, workers)}{_pace(ws, workers)}")
        return "ddp", workers, note
    # ddp, auto workers: one per virtual rank, unless the cluster is smaller. An update lasts
    # as long as its busiest worker's ceil(ws/P) virtual ranks, so: the fewest workers that
    # reach the smallest ceil(ws/P) the cluster allows. That is a divisor of ws whenever one
    # is as fast (it was the rule before workers could play unequal shares, and it keeps every
    # worker busy), and an uneven split only where it is faster: ws 16 on 6 CPUs runs 6
    # workers of 3, 3, 3, 3, 2, 2 ranks (3 per update) rather than 4 of 4; on 12 CPUs, 8 of 2
    # (12 workers would be no faster and hold 4 more CPUs that concurrent trials could use).
    fitting = [p for p in range(1, ws + 1) if p * res.cpus_per_worker <= cluster.cpus
               and p * res.gpus_per_worker <= cluster.gpus + 1e-9]
    workers = _fewest_workers(ws, max(fitting)) if fitting else ws
    if workers != ws:
        note = _join(note, f"physical_workers auto -> {workers} ({cluster.where} has "
                           f"{cluster.cpus:g} CPUs); {_assignment(ws, workers)}")
    return "ddp", workers, note


def _fewest_workers(ws: int, most: int) -> int:
    """The fewest workers whose busiest one plays as few virtual ranks as ``most`` workers'."""
    per = -(-ws // most)  # ceil(ws / most): the busiest worker's ranks with ``most`` workers
    return -(-ws // per)


def _assignment(ws: int, workers: int) -> str:
    """Who plays how many of the ``ws`` virtual ranks (sharding.virtual_rank_counts)."""
    q, r = divmod(ws, workers)
    if not r:
        return f"each plays {q} virtual ranks"
    first = "the first plays" if r == 1 else f"the first {r} play"
    rest = "the last plays" if workers - r == 1 else f"the other {workers - r} play"
    return f"{first} {q + 1} virtual ranks, {rest} {q}"


def _pace(ws: int, workers: int) -> str:
    """Where fewer workers would update as fast (the busiest one sets the pace), say so."""
    fewest = _fewest_workers(ws, workers)
    if fewest == workers:
        return ""
    return (f"; each update waits for the busiest worker's {-(-ws // workers)} ranks, as fast "
            f"as with {fewest} workers")


def _join(note: str, more: str) -> str:
    return f"{note}; {more}" if note else more


def feasible(spec: Any, backend: str, workers: int, cluster: ClusterInfo) -> tuple[bool, str | None]:
    res = spec.resources
    if backend == "simulate":
        need_cpu = res.cpus_per_worker
        if need_cpu > cluster.cpus:
            return False, f"needs {need_cpu:g} CPUs, {cluster.where} has {cluster.cpus:g}"
        if res.memory_per_worker and cluster.memory_gb and res.memory_per_worker > cluster.memory_gb:
            return False, (f"memory_per_worker({res.memory_per_worker:g}) GiB > "
                           f"{cluster.memory_gb:.1f} GiB on {cluster.where}")
        return True, None
    need_cpu, need_gpu = workers * res.cpus_per_worker, workers * res.gpus_per_worker
    if need_cpu > cluster.cpus:
        return False, (f"physical_workers({workers}) * cpus_per_worker({res.cpus_per_worker:g}) = "
                       f"{need_cpu:g} CPUs > {cluster.cpus:g} on {cluster.where}")
    if need_gpu > cluster.gpus + 1e-9:
        return False, (f"physical_workers({workers}) * gpus_per_worker({res.gpus_per_worker:g}) = "
                       f"{need_gpu:g} GPUs > {cluster.gpus:g} on {cluster.where}")
    if res.memory_per_worker:
        need_mem = workers * res.memory_per_worker
        if cluster.memory_gb and need_mem > cluster.memory_gb:
            return False, (f"physical_workers({workers}) * memory_per_worker({res.memory_per_worker:g}) "
                           f"= {need_mem:g} GiB > {cluster.memory_gb:.1f} GiB on {cluster.where}")
        return True, None
    need_mem = workers * WORKER_MEMORY_GB  # what a CPU worker of ours holds, when none is given
    if cluster.memory_gb and need_mem > cluster.memory_gb:
        return False, f"~{need_mem:.1f} GiB for {workers} workers > {cluster.memory_gb:.1f} GiB"
    return True, None
