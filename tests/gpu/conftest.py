"""tests/gpu: checks that need one CUDA GPU (nccl, autocast on CUDA, GPU timings, adapters and
sweeps on a GPU); scripts/gpu_check.sh runs them (docs/cluster.md, "GPU check").

Where no CUDA device is visible they are not collected at all, rather than skipped: under
CI=true a skip is a failure (tests/conftest.py), and a CPU machine lacks nothing it should have.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

collect_ignore_glob = [] if torch.cuda.is_available() else ["test_*.py"]


@pytest.fixture
def nccl(tmp_path: Path) -> Iterator[torch.device]:
    """This process as rank 0 of a one-process nccl group on GPU 0, for the test alone: nccl
    takes one GPU per rank, so one GPU holds P = 1 (the virtual ranks make V > 1). Torn down
    after the test, so that no other test finds a process group initialised."""
    import torch.distributed as dist

    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0,
                            world_size=1, device_id=device)
    try:
        yield device
    finally:
        dist.destroy_process_group()
