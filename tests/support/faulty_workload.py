"""A workload that fails on purpose for one seed: the fault tests' "trial that fails every time"."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch

from scalesweep.trainables.workloads.base import Workload
from scalesweep.trainables.workloads.mlp_regression import make as make_mlp


class _FailsOnSeed:
    def __init__(self, inner: Workload, fail_seed: int, fail_while: str | None = None,
                 attempts_file: str | None = None) -> None:
        self._inner = inner
        self._fail_seed = fail_seed
        self._fail_while = fail_while
        self._attempts_file = attempts_file
        self.metrics = inner.metrics
        self.defaults = inner.defaults

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # unpickling (a ddp trial's workers) looks these up first
            raise AttributeError(name)
        return getattr(self._inner, name)

    def build_model(self) -> torch.nn.Module:
        # the loop seeds torch with the trial's seed right before building the model
        if self._attempts_file is not None:  # one line per try, whichever layer retried
            with open(self._attempts_file, "a") as f:
                f.write(f"{os.getpid()}\n")
        # fail_while: only while that file exists (a fault the user then fixes)
        if torch.initial_seed() == self._fail_seed and (
                self._fail_while is None or os.path.exists(self._fail_while)):
            raise RuntimeError(f"injected failure for seed {self._fail_seed}")
        return self._inner.build_model()


def make(options: Mapping[str, Any]) -> Workload:
    opts = dict(options)
    fail_seed = int(opts.pop("fail_seed", -1))
    fail_while = opts.pop("fail_while", None)
    attempts = opts.pop("attempts_file", None)
    return _FailsOnSeed(make_mlp(opts), fail_seed, None if fail_while is None else str(fail_while),
                        None if attempts is None else str(attempts))


class _Unpicklable:
    """The mlp workload holding a lock: pickling it fails, as it would for a user's workload
    holding a file handle or a lambda."""

    def __init__(self, inner: Workload) -> None:
        import threading

        self._inner = inner
        self._lock = threading.Lock()
        self.metrics = inner.metrics
        self.defaults = inner.defaults

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def make_unpicklable(options: Mapping[str, Any]) -> Workload:
    return _Unpicklable(make_mlp(options))
