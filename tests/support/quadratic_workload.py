"""A workload whose fastest lr is known in closed form: `solve`'s test checks that the search
finds it.

Every sample's loss is the same noise-free quadratic, 0.5 * sum_i h_i * w_i**2, so every batch
has the same gradient and plain SGD contracts coordinate i by |1 - lr * h_i| per update. The
slowest coordinate sets the pace, max_i |1 - lr * h_i|, least at lr* = 2 / (h_min + h_max)
(0.1818 for h = 1 and 10): below it the flat direction crawls, above it the steep one
oscillates, and beyond 2 / h_max (0.2) it diverges. The batch size changes only how many
updates an epoch has, so lr* is the same at every world size.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn

CURVATURES = (1.0, 10.0)
#: the lr with the fastest contraction, 2 / (h_min + h_max)
BEST_LR = 2.0 / (min(CURVATURES) + max(CURVATURES))

Batch = torch.Tensor


class _Point(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(len(CURVATURES)))  # the same start for every seed

    def value(self) -> torch.Tensor:
        h = torch.tensor(CURVATURES, dtype=self.w.dtype)
        return 0.5 * (h * self.w**2).sum()


class Quadratic:
    metrics: Mapping[str, str] = {"loss": "min"}
    fusable = True

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.size = int(options.get("train_size", 64))
        self.defaults: Mapping[str, Any] = {"optimizer": {"type": "sgd", "lr": 0.05},
                                            "scheduler": {"type": "constant"},
                                            "per_worker_batch": 1, "epochs": 4}

    def train_size(self) -> int:
        return self.size

    def dev_size(self) -> int:
        return 1

    def build_model(self) -> nn.Module:
        return _Point()

    def train_batch(self, indices: Sequence[int]) -> Batch:
        return torch.zeros(len(indices))

    def dev_batches(self, batch_size: int) -> Iterator[Batch]:
        yield torch.zeros(1)

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        assert isinstance(model, _Point)
        return model.value().expand(len(batch))

    def evaluate(self, model: nn.Module, batch: Batch) -> Mapping[str, torch.Tensor]:
        assert isinstance(model, _Point)
        return {"loss": model.value().detach().expand(len(batch))}


def make(options: Mapping[str, Any]) -> Quadratic:
    return Quadratic(options)
