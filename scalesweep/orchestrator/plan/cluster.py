"""What a plan may assume about the machine(s) trials will run on."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: a CPU DDP worker of the built-in workloads; measured: a 16-worker CPU trial takes ~9-10 GiB
WORKER_MEMORY_GB = 0.6


@dataclass(frozen=True)
class ClusterInfo:
    cpus: float
    gpus: float
    memory_gb: float
    where: str  # "this machine" or "the cluster at ..."


def local_cluster() -> ClusterInfo:
    cpus = float(os.cpu_count() or 1)
    try:
        memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        memory_gb = 0.0
    return ClusterInfo(cpus=cpus, gpus=float(_local_gpus()), memory_gb=memory_gb,
                       where="this machine")


def _local_gpus() -> int:
    # no GPU device node: none to count, and no torch to import for a plan (a CPU-only
    # machine's plan stays quick); else torch counts them, as the trials will see them
    if not any(Path("/dev").glob("nvidia[0-9]*")) and not Path("/dev/kfd").exists():
        return 0
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        return 0


def connected_cluster() -> ClusterInfo:
    """Resources of the Ray cluster this process is connected to (``ray.init`` done)."""
    import ray

    res = ray.cluster_resources()
    return ClusterInfo(cpus=float(res.get("CPU", 0)), gpus=float(res.get("GPU", 0)),
                       memory_gb=float(res.get("memory", 0)) / 2**30,
                       where="the connected Ray cluster")
