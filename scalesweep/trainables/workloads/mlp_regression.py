"""``mlp_regression``: the model of PyTorch's DDP demo on a learnable synthetic task.

Model: Linear(10, 100) - ReLU - Linear(100, 20), as in the "Getting Started with Distributed
Data Parallel" tutorial. The tutorial regresses onto pure noise, so its loss cannot fall; here
the targets come from a fixed random teacher (a small tanh MLP, scaled to unit variance per
output) plus Gaussian noise of std ``noise``, so the loss falls towards ``noise**2``.

Per-sample loss: squared error averaged over the 20 outputs. Cheapest workload: the loop and
equivalence tests use it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from scalesweep.trainables.workloads._common import (
    merge_options,
    pair_dev_batches,
    pair_train_batch,
    place_pair,
    require,
    rng,
)
from scalesweep.trainables.workloads.base import Direction

if TYPE_CHECKING:  # imported where training needs it: the planner makes this workload too
    import torch
    from torch import nn

IN_FEATURES = 10
HIDDEN = 100
OUT_FEATURES = 20
TEACHER_HIDDEN = 32

OPTIONS: dict[str, Any] = {
    "train_size": 2048,
    "dev_size": 512,
    "noise": 0.1,  # std of the target noise; the best reachable loss is noise**2
    "data_seed": 0,
}

Batch = tuple["torch.Tensor", "torch.Tensor"]


class _Teacher:
    """A fixed random tanh MLP whose outputs are scaled to unit variance."""

    def __init__(self, data_seed: int) -> None:
        gen = rng(data_seed, 0)
        self.w1 = gen.standard_normal((IN_FEATURES, TEACHER_HIDDEN)) / np.sqrt(IN_FEATURES)
        self.w2 = gen.standard_normal((TEACHER_HIDDEN, OUT_FEATURES)) / np.sqrt(TEACHER_HIDDEN)
        self.scale = 1.0
        self.scale = self(gen.standard_normal((4096, IN_FEATURES))).std(axis=0)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y: np.ndarray = np.tanh(2.0 * x @ self.w1) @ self.w2 / self.scale  # gain 2: non-linear
        return y


class MLPRegression:
    metrics: Mapping[str, Direction] = {"loss": "min"}
    #: per-sample losses ignore their batch and draw nothing: fused passes are safe
    fusable = True

    def __init__(self, options: Mapping[str, Any]) -> None:
        opts = merge_options(options, OPTIONS)
        require(opts["train_size"] >= 1, "train_size", opts["train_size"], "must be at least 1")
        require(opts["dev_size"] >= 1, "dev_size", opts["dev_size"], "must be at least 1")
        require(opts["noise"] >= 0, "noise", opts["noise"], "must be at least 0")
        self.options = opts
        # SGD without momentum at the demo's scale (the tutorial uses 1e-3; 1e-2 converges in
        # a few epochs here). Constant lr: the scaling study supplies its own schedules.
        self.defaults: Mapping[str, Any] = {
            "optimizer": {"type": "sgd", "lr": 1e-2, "momentum": 0.0},
            "scheduler": {"type": "constant"},
            "per_worker_batch": 16,
            "epochs": 20,
        }

        teacher = _Teacher(opts["data_seed"])

        def sample(stream: int, n: int) -> tuple[np.ndarray, np.ndarray]:
            gen = rng(opts["data_seed"], stream)
            x = gen.standard_normal((n, IN_FEATURES))
            y = teacher(x) + opts["noise"] * gen.standard_normal((n, OUT_FEATURES))
            return x, y

        # float64 numpy; tensors (views of these) on first use, cast per batch to the loop's dtype
        self._arrays = {"train": sample(1, opts["train_size"]), "dev": sample(2, opts["dev_size"])}
        self._tensors: dict[str, Batch] = {}
        self._placed: dict[str, Batch] = {}  # the splits on the trial's device (place)

    def _split(self, name: str) -> Batch:
        if name in self._placed:
            return self._placed[name]
        if name not in self._tensors:
            import torch

            x, y = self._arrays[name]
            self._tensors[name] = torch.from_numpy(x), torch.from_numpy(y)
        return self._tensors[name]

    def place(self, device: torch.device) -> None:
        """Keep both splits on ``device`` in the default dtype: each batch is then a gather
        there, and nothing is copied to the device per batch (base.py's ``place``)."""
        self._placed = {}
        self._placed = {name: place_pair(self._split(name), device, cast_targets=True)
                        for name in ("train", "dev")}

    def train_size(self) -> int:
        return int(self.options["train_size"])

    def dev_size(self) -> int:
        return int(self.options["dev_size"])

    def build_model(self) -> nn.Module:
        from torch import nn

        return nn.Sequential(nn.Linear(IN_FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT_FEATURES))

    def train_batch(self, indices: Sequence[int]) -> Batch:
        return pair_train_batch(self._split("train"), indices, cast_targets=True)

    def dev_batches(self, batch_size: int) -> Iterator[Batch]:
        return pair_dev_batches(self._split("dev"), batch_size, cast_targets=True)

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        x, y = batch
        return ((model(x) - y) ** 2).mean(dim=1)

    def evaluate(self, model: nn.Module, batch: Batch) -> Mapping[str, torch.Tensor]:
        import torch

        with torch.no_grad():
            return {"loss": self.loss(model, batch)}


def make(options: Mapping[str, Any]) -> MLPRegression:
    return MLPRegression(options)
