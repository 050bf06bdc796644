"""``digits_cnn``: a small CNN on scikit-learn's bundled 8x8 handwritten digits.

Real data that ships inside scikit-learn (1797 images, 10 classes), so nothing is downloaded.
The train/dev split is stratified by class and fixed by ``split_seed``. Pixels (0..16) are
standardised with the training set's mean and std.

Model: conv 1->16 3x3, conv 16->32 3x3 (both padded, ReLU), 2x2 max-pool, linear 512->10.
Metrics: per-sample cross-entropy and 0/1 accuracy.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.nn import functional as F

from scalesweep.trainables.workloads._common import (
    merge_options,
    pair_dev_batches,
    pair_train_batch,
    place_pair,
    require,
    rng,
)
from scalesweep.trainables.workloads.base import Direction

CLASSES = 10

OPTIONS: dict[str, Any] = {
    "dev_fraction": 0.2,  # share of each class held out for dev
    "split_seed": 0,
}

Batch = tuple[torch.Tensor, torch.Tensor]


def _stratified_split(labels: np.ndarray, dev_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Train and dev indices, each sorted, with every class split in the same proportion."""
    gen = rng(seed, 0)
    train, dev = [], []
    for cls in range(CLASSES):
        members = gen.permutation(np.flatnonzero(labels == cls))
        n_dev = round(dev_fraction * len(members))
        dev.append(members[:n_dev])
        train.append(members[n_dev:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(dev))


class DigitsCNN:
    metrics: Mapping[str, Direction] = {"loss": "min", "accuracy": "max"}
    #: per-sample losses ignore their batch and draw nothing: fused passes are safe
    fusable = True

    def __init__(self, options: Mapping[str, Any]) -> None:
        opts = merge_options(options, OPTIONS)
        frac = opts["dev_fraction"]
        # Each of the 10 classes has about 180 images: keep at least one on either side.
        require(0.01 <= frac <= 0.99, "dev_fraction", frac, "must lie in [0.01, 0.99]")
        self.options = opts
        self.defaults: Mapping[str, Any] = {
            "optimizer": {"type": "adam", "lr": 1e-3},
            "scheduler": {"type": "constant"},
            "per_worker_batch": 16,
            "epochs": 30,
        }

        digits = load_digits()
        images = np.asarray(digits.images, dtype=np.float64)  # [1797, 8, 8], values 0..16
        labels = np.asarray(digits.target, dtype=np.int64)
        train_idx, dev_idx = _stratified_split(labels, frac, opts["split_seed"])
        mean, std = images[train_idx].mean(), images[train_idx].std()
        pixels = torch.from_numpy((images - mean) / std).unsqueeze(1)  # [N, 1, 8, 8], float64
        targets = torch.from_numpy(labels)
        self._host = (pixels[train_idx], targets[train_idx]), (pixels[dev_idx], targets[dev_idx])
        self._train, self._dev = self._host

    def place(self, device: torch.device) -> None:
        """Keep both splits on ``device``, pixels in the default dtype: each batch is then a
        gather there, and nothing is copied to the device per batch (base.py's ``place``)."""
        self._train, self._dev = (place_pair(split, device, cast_targets=False) for split in self._host)

    def train_size(self) -> int:
        return len(self._train[1])

    def dev_size(self) -> int:
        return len(self._dev[1])

    def build_model(self) -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(32 * 4 * 4, CLASSES),
        )

    def train_batch(self, indices: Sequence[int]) -> Batch:
        return pair_train_batch(self._train, indices, cast_targets=False)

    def dev_batches(self, batch_size: int) -> Iterator[Batch]:
        return pair_dev_batches(self._dev, batch_size, cast_targets=False)

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
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


def make(options: Mapping[str, Any]) -> DigitsCNN:
    return DigitsCNN(options)
