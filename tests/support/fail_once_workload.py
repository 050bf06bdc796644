"""A workload whose trial dies once, at a given evaluation: the fused resume test's fault.

The mlp_regression workload, logging to ``log_dir/log`` a line per model built (``build
<seed>``) and per evaluation (``eval``), which shows where each try of a trial started. The
``fail_at_eval``-th evaluation of a trial (counted in its process; a fused trial evaluates each
seed in turn) raises, unless ``log_dir/failed`` exists; it creates that file first, so the
trial that Tune retries does not die again. No clock: the fault lands at the same step on any
machine.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from scalesweep.trainables.workloads.base import Workload
from scalesweep.trainables.workloads.mlp_regression import make as make_mlp


class _FailsOnce:
    def __init__(self, inner: Workload, log_dir: Path, fail_at_eval: int) -> None:
        self._inner = inner
        self._log_dir = log_dir
        self._fail_at_eval = fail_at_eval
        self._evals = 0
        self.metrics = inner.metrics
        self.defaults = inner.defaults

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # unpickling looks up attributes before _inner is set
            raise AttributeError(name)
        return getattr(self._inner, name)

    def _log(self, line: str) -> None:
        with (self._log_dir / "log").open("a") as f:
            f.write(line + "\n")

    def build_model(self) -> torch.nn.Module:
        self._log(f"build {torch.initial_seed()}")  # the trial seeds torch right before
        return self._inner.build_model()

    def dev_batches(self, batch_size: int) -> Iterator[Any]:
        self._evals += 1
        self._log("eval")
        failed = self._log_dir / "failed"
        if self._evals == self._fail_at_eval and not failed.exists():
            failed.touch()
            raise RuntimeError(f"injected failure at evaluation {self._evals}")
        return self._inner.dev_batches(batch_size)


def make(options: Mapping[str, Any]) -> Workload:
    opts = dict(options)
    log_dir = Path(str(opts.pop("log_dir")))
    fail_at_eval = int(opts.pop("fail_at_eval"))
    return _FailsOnce(make_mlp(opts), log_dir, fail_at_eval)


def tries(log_dir: Path) -> list[tuple[list[int], int]]:
    """Each try of a trial, in order: the seeds whose models it built, and its evaluations."""
    out: list[tuple[list[int], int]] = []
    for line in (log_dir / "log").read_text().splitlines():
        word, *rest = line.split()
        if word == "build":
            if not out or out[-1][1]:  # a build after evaluations: the next try
                out.append(([], 0))
            out[-1][0].append(int(rest[0]))
        else:
            out[-1] = (out[-1][0], out[-1][1] + 1)
    return out
