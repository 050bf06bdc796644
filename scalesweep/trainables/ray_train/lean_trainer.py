"""Ray Train V2's ``TorchTrainer`` without the helper processes a trial never uses.

Besides its controller and workers, each Ray Train run starts helper actors, each one a Python
process of its own that imports Ray. For a sweep of many short trials on a small machine they
are a large share of its CPU (benchmarks/results/cpu_by_process.md, "CPU seconds by process
kind"). Two of them serve nothing in a sweep's trial:

* the ``DatasetManager``, which hands Ray Data datasets to the workers, started whether or not
  the run has any: a trial passes none (its workload builds its own data);
* the ``PreemptionWatcher``, which polls Ray for drained nodes and logs the ranks they held (and
  answers ``ray.train.get_preemption_info``, which no loop here asks): off unless
  ``RAY_TRAIN_ENABLE_PREEMPTION_WATCHER`` is set, Ray's own switch, which then decides.

Everything else -- the placement group cleaner, the synchronization actor behind each report,
Tune's hand-off queue -- does work for the trial and stays.
"""

from __future__ import annotations

import os
from typing import Any

from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
from ray.train.v2.torch.torch_trainer import TorchTrainer

PREEMPTION_WATCHER_ENV = "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"


class LeanTorchTrainer(TorchTrainer):
    """A ``TorchTrainer`` without the datasets callback when it has no datasets."""

    def _create_default_callbacks(self) -> list[Any]:
        callbacks = list(super()._create_default_callbacks())
        if self.datasets:
            return callbacks
        return [cb for cb in callbacks if not isinstance(cb, DatasetsCallback)]


def use_no_preemption_watcher() -> str:
    """Leave the preemption watcher out of the Ray Train runs this process starts, unless the
    environment already says; returns the value in force. Ray Train hands the variable on to
    the controller it starts, which reads it."""
    return os.environ.setdefault(PREEMPTION_WATCHER_ENV, "0")
