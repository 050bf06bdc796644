"""A complete user-defined workload: two interleaved spirals, classified by a small MLP.

Name it in a sweep file as ``workload: {name: "examples.custom_workload:make", options: {...}}``
(the module must be importable where the driver and the workers run: run from the directory
that holds ``examples/``, or install your package). Every point of the contract in
``scalesweep/trainables/workloads/base.py`` is shown here, with the reason next to it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from scalesweep.trainables.workloads.base import Direction, WorkloadOptionError

DEFAULT_OPTIONS: dict[str, Any] = {"train_size": 2000, "dev_size": 500, "noise": 0.2, "seed": 0}

Batch = tuple[torch.Tensor, torch.Tensor]


def _check(options: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults plus the user's options; anything wrong raises ``WorkloadOptionError``."""
    unknown = sorted(set(options) - set(DEFAULT_OPTIONS))
    if unknown:
        allowed = ", ".join(sorted(DEFAULT_OPTIONS))
        raise WorkloadOptionError(unknown[0], options[unknown[0]], f"unknown; allowed: {allowed}")
    opts = {**DEFAULT_OPTIONS, **options}
    for name in ("train_size", "dev_size"):
        if not isinstance(opts[name], int) or opts[name] < 1:
            raise WorkloadOptionError(name, opts[name], "must be an integer of at least 1")
    if not isinstance(opts["noise"], (int, float)) or opts["noise"] < 0:
        raise WorkloadOptionError("noise", opts["noise"], "must be a number of at least 0")
    if not isinstance(opts["seed"], int):
        raise WorkloadOptionError("seed", opts["seed"], "must be an integer")
    return opts


def _spirals(gen: np.random.Generator, n: int, noise: float) -> tuple[np.ndarray, np.ndarray]:
    labels = gen.integers(0, 2, n)
    turn = np.sqrt(gen.uniform(0, 1, n)) * 3 * np.pi  # sqrt: even density along the arm
    sign = np.where(labels == 0, 1.0, -1.0)  # the second arm is the first rotated by pi
    points = sign[:, None] * np.stack([turn * np.cos(turn), turn * np.sin(turn)], axis=1)
    return points / (3 * np.pi) + noise * gen.standard_normal((n, 2)) / 3, labels


class Spirals:
    # Dev metrics, averaged by the loop over the dev set and reported as dev_loss, dev_accuracy.
    metrics: Mapping[str, Direction] = {"loss": "min", "accuracy": "max"}
    # Optional: a promise that a sample's loss does not depend on the other samples of its
    # batch and that loss() draws no randomness (no dropout). The loop may then run a whole
    # update's micro-batches in a few big passes instead of one per virtual rank (faster, the
    # same gradient). Leave it out (False) when unsure.
    fusable = True

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = _check(options)
        # Used where the sweep file leaves a field out; same shape as the sweep file's own.
        self.defaults: Mapping[str, Any] = {
            "optimizer": {"type": "adam", "lr": 3e-3},
            "scheduler": {"type": "warmuplr", "warmup_steps": 100},
            "per_worker_batch": 32,
            "epochs": 40,
        }
        # Data from the options alone (never from torch's global RNG or the trial seed), so
        # every worker and every trial of a sweep sees the same samples. Separate generators
        # keep the dev set fixed when only train_size changes.
        seed, noise = self.options["seed"], self.options["noise"]
        x, y = _spirals(np.random.default_rng([seed, 1]), self.options["train_size"], noise)
        self._train = torch.from_numpy(x), torch.from_numpy(y)
        x, y = _spirals(np.random.default_rng([seed, 2]), self.options["dev_size"], noise)
        self._dev = torch.from_numpy(x), torch.from_numpy(y)

    # Cheap: the planner calls these to count updates per epoch.
    def train_size(self) -> int:
        return len(self._train[1])

    def dev_size(self) -> int:
        return len(self._dev[1])

    def build_model(self) -> nn.Module:
        # Built in the current default dtype; init draws from torch's global RNG (the loop
        # seeded it), so all ranks start from the same weights.
        return nn.Sequential(nn.Linear(2, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2))

    def train_batch(self, indices: Sequence[int]) -> Batch:
        # Exactly these samples, in this order, cast to the default dtype here (the loop may
        # run in float64), not at make time.
        idx = torch.as_tensor(list(indices), dtype=torch.long)
        return self._train[0][idx].to(torch.get_default_dtype()), self._train[1][idx]

    def dev_batches(self, batch_size: int) -> Iterator[Batch]:
        # The whole dev set, in a fixed order.
        x, y = self._dev
        for start in range(0, len(y), batch_size):
            yield x[start : start + batch_size].to(torch.get_default_dtype()), y[start : start + batch_size]

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        # Per-sample losses, shape [n]: the loop weights them so the gradient is the mean over
        # the global batch, whatever the world size.
        x, y = batch
        return F.cross_entropy(model(x), y, reduction="none")

    def evaluate(self, model: nn.Module, batch: Batch) -> Mapping[str, torch.Tensor]:
        x, y = batch
        with torch.no_grad():
            logits = model(x)
            return {
                "loss": F.cross_entropy(logits, y, reduction="none"),
                "accuracy": (logits.argmax(dim=1) == y).to(logits.dtype),
            }


def make(options: Mapping[str, Any]) -> Spirals:
    return Spirals(options)
