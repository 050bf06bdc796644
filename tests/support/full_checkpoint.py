"""What tests/integration/test_checkpoint_full_e2e.py needs to fill a trial's checkpoint disk.

``make`` (``workload: {name: 'tests.support.full_checkpoint:make'}``) is
tests.support.gated_workload's, plus ``fsize_after_gate``: where no filesystem can be mounted,
the held trial's process, once its gate is opened, may write no file past that many bytes
(RLIMIT_FSIZE; CPython ignores SIGXFSZ, so a write fails with EFBIG instead of killing it); the
checkpoint it saves next, larger than that, is refused.

``mode()`` says which the machine allows: ``tmpfs`` (a filesystem of the command's own, in a
user namespace: tests/support/small_disk.py) or ``fsize``; ``FILL`` fills that filesystem up
before the command starts.
"""

from __future__ import annotations

import resource
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from scalesweep.trainables.workloads.base import Workload
from scalesweep.trainables.workloads.mlp_regression import make as make_mlp
from tests.support import gated_workload
from tests.support.small_disk import MOUNT

#: ``sh -c FILL sh DIR CMD...``: DIR's filesystem filled with a file of zeros, then CMD
FILL = 'dd if=/dev/zero of="$1/filler" bs=1024 2>/dev/null; shift; exec "$@"'


def mode() -> str:
    """``tmpfs`` where this process can mount a filesystem of its own, else ``fsize``."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return "fsize"
    probe = subprocess.run([unshare, "--user", "--map-root-user", "--mount", "sh", "-c",
                            MOUNT, "sh", "/tmp", "true"], capture_output=True)
    return "tmpfs" if probe.returncode == 0 else "fsize"


class _LimitAfterGate(gated_workload._Gated):
    def __init__(self, inner: Workload, gate_dir: Path, gated_trial: int, gate_eval: int,
                 limit: int) -> None:
        super().__init__(inner, gate_dir, gated_trial, gate_eval)
        self._gate_eval = gate_eval
        self._limit = limit

    def dev_batches(self, batch_size: int) -> Iterator[Any]:
        batches = super().dev_batches(batch_size)  # returns once the gate is open
        if self._held and self._evals == self._gate_eval:
            # no signal.signal here (Tune's thread, not the main one): CPython ignores SIGXFSZ
            # from its start, so a write past the limit fails with EFBIG
            resource.setrlimit(resource.RLIMIT_FSIZE, (self._limit, resource.RLIM_INFINITY))
        return batches


def make(options: Mapping[str, Any]) -> Workload:
    opts = dict(options)
    limit = opts.pop("fsize_after_gate", None)
    if limit is None:
        return gated_workload.make(opts)
    gate_dir = Path(str(opts.pop("gate_dir")))
    gated_trial = int(opts.pop("gated_trial", 1))
    gate_eval = int(opts.pop("gate_eval", 4))
    return _LimitAfterGate(make_mlp(opts), gate_dir, gated_trial, gate_eval,
                           int(limit))
