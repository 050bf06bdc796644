"""A workload whose model for one seed needs more memory than its process may have: the memory
test's trial that runs out (tests/integration/test_memory_e2e.py).

For ``hog_seed`` (the loop seeds torch with the trial's seed right before building the model),
``build_model`` caps its own process's address space (``RLIMIT_AS``) at what it maps now plus
``limit_mib``, then allocates ``CHUNK_MIB`` at a time until the allocation is refused, which it
then is: the MemoryError a worker past its memory gets. Bounded and self-stopping: at most
``MAX_CHUNKS`` chunks, the chunks freed and the limit put back before it raises (a Tune actor is
reused by the next trial), and an AssertionError, not a hog, if the limit never bites."""

from __future__ import annotations

import resource
from collections.abc import Mapping
from typing import Any

import torch

from scalesweep.trainables.workloads.base import Workload
from scalesweep.trainables.workloads.mlp_regression import make as make_mlp

CHUNK_MIB = 32
MAX_CHUNKS = 64  # 2 GiB at most, whatever the limit


def _mapped_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def allocate_past(limit_mib: int) -> None:
    """Allocate past an address-space limit of what is mapped now plus ``limit_mib``; raises the
    MemoryError that ends it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _mapped_bytes() + limit_mib * 2**20
    chunks: list[bytearray] = []
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        for _ in range(MAX_CHUNKS):
            chunks.append(bytearray(CHUNK_MIB * 2**20))
    finally:  # the MemoryError goes on from here
        chunks.clear()
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    raise AssertionError(f"{MAX_CHUNKS * CHUNK_MIB} MiB allocated under a limit of {limit_mib} MiB more")


class _Hog:
    def __init__(self, inner: Workload, hog_seed: int, limit_mib: int) -> None:
        self._inner = inner
        self._hog_seed = hog_seed
        self._limit_mib = limit_mib
        self.metrics = inner.metrics
        self.defaults = inner.defaults

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # unpickling looks these up before they are set
            raise AttributeError(name)
        return getattr(self._inner, name)

    def build_model(self) -> torch.nn.Module:
        if torch.initial_seed() == self._hog_seed:
            allocate_past(self._limit_mib)
        return self._inner.build_model()


def make(options: Mapping[str, Any]) -> Workload:
    opts = dict(options)
    hog_seed = int(opts.pop("hog_seed", 0))
    limit_mib = int(opts.pop("limit_mib", 128))
    return _Hog(make_mlp(opts), hog_seed, limit_mib)
