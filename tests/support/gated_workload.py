"""A workload that holds one trial at a gate until the test opens it: the resume test's
deterministic kill point.

The mlp_regression workload, except that the ``gated_trial``-th trial to build its model (0 is
the first, counted across every process of the sweep through files in ``gate_dir``) stops at its
``gate_eval``-th evaluation: it writes ``gate_dir/waiting`` and waits until ``gate_dir/release``
exists. The test kills the sweep driver while that trial is held, so the kill lands mid-trial
however fast or slow the machine is. A trial built after the gate was passed (the resumed one)
is never held. ``second_gate_eval`` holds the same trial once more, at that evaluation, with
``waiting-2``/``release-2``: the outage test takes MLflow down between the two gates, so the
evaluations in between are made during the outage whatever the machine's speed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from scalesweep.trainables.workloads.base import Workload
from scalesweep.trainables.workloads.mlp_regression import make as make_mlp

#: a held trial gives up waiting after this long, so a test that died cannot leave it forever
MAX_HOLD_S = 900.0


def _claim_build_number(gate_dir: Path) -> int:
    """The number of models built before this one in the whole sweep (atomic across processes)."""
    n = 0
    while True:
        try:
            fd = os.open(gate_dir / f"built-{n}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            n += 1
            continue
        os.close(fd)
        return n


class _Gated:
    def __init__(self, inner: Workload, gate_dir: Path, gated_trial: int, gate_eval: int,
                 second_gate_eval: int | None = None) -> None:
        self._inner = inner
        self._gate_dir = gate_dir
        self._gated_trial = gated_trial
        self._gates = {gate_eval: ("waiting", "release")}
        if second_gate_eval is not None:
            self._gates[second_gate_eval] = ("waiting-2", "release-2")
        self._held = False
        self._evals = 0
        self._build: int | None = None
        self.metrics = inner.metrics
        self.defaults = inner.defaults

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # unpickling looks up attributes before _inner is set
            raise AttributeError(name)
        return getattr(self._inner, name)

    def build_model(self) -> torch.nn.Module:
        # gated_trial -1: every model (a ddp trial, where only rank 0 evaluates, so its rank 0)
        if self._gated_trial >= 0:
            self._build = _claim_build_number(self._gate_dir)
        self._held = self._gated_trial < 0 or self._build == self._gated_trial
        self._evals = 0
        return self._inner.build_model()

    def dev_batches(self, batch_size: int) -> Iterator[Any]:
        self._evals += 1
        if self._build is not None:  # one line per eval: eval_counts reads them
            with (self._gate_dir / f"evals-{self._build}").open("a") as f:
                f.write(".\n")
        if self._held and self._evals in self._gates:
            waiting, release = self._gates[self._evals]
            (self._gate_dir / waiting).touch()
            end = time.monotonic() + MAX_HOLD_S
            while not (self._gate_dir / release).exists() and time.monotonic() < end:
                time.sleep(0.1)
        return self._inner.dev_batches(batch_size)


def eval_counts(gate_dir: Path) -> dict[int, int]:
    """Evaluations each model made, by build number (the order models were built in): a trial
    resumed from a checkpoint makes only those after it, one restarted from update 0 all."""
    return {int(p.name.split("-")[1]): len(p.read_text().splitlines())
            for p in gate_dir.glob("evals-*")}


def make(options: Mapping[str, Any]) -> Workload:
    opts = dict(options)
    gate_dir = Path(str(opts.pop("gate_dir")))
    gated_trial = int(opts.pop("gated_trial", 1))
    gate_eval = int(opts.pop("gate_eval", 4))
    second = opts.pop("second_gate_eval", None)
    return _Gated(make_mlp(opts), gate_dir, gated_trial, gate_eval,
                  None if second is None else int(second))
