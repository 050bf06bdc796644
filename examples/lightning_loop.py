"""A small LightningModule trained by a plain PyTorch Lightning ``Trainer``, swept by scalesweep
as it is (sweeps/lightning.yaml).

This is how such a script is usually written: a ``LightningModule`` with ``training_step``,
``validation_step`` and ``configure_optimizers``, two DataLoaders, ``Trainer.fit``. The lines
marked ``# scalesweep`` are all that sweeping it needs (``scalesweep.adapters.lightning``):

* ``lightning.configure_optimizers(self, config)``: the sweep's optimizer with the trial's
  planned lr schedule (warmup rule and lr rule applied), stepped every update;
* ``lightning.trainer_arguments(config)``: the trial's updates, validation cadence,
  accumulation and clipping, and Ray Train's DDP strategy and environment;
* ``lightning.ReportCallback(config)``: reports the logged ``val_loss`` at every validation,
  update = ``trainer.global_step``, with the ``Trainer``'s checkpoint;
* ``lightning.last_checkpoint()``: where to resume after a lost worker, a retry or
  ``scalesweep resume`` (None on a first start).

The task: a small MLP classifies points of three interleaved spirals in the plane (with label
noise, so no model reaches zero loss). Data come from a fixed numpy seed, so every worker of
every trial sees the same samples; the model's initial weights come from the trial's seed.
Run from the repository root (needs the extra: ``pip install -e '.[lightning]'``):

    python -m scalesweep run sweeps/lightning.yaml
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from ray.train.lightning import prepare_trainer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from scalesweep.adapters import lightning  # scalesweep

DEV_SIZE = 256
ARMS = 3


def make_spirals(size: int, data_seed: int) -> TensorDataset:
    """Points on three spirals of angle 0..1.5 pi (labels = arm), with Gaussian noise of std 0.1
    and 5% of labels flipped."""
    rng = np.random.default_rng(data_seed)
    arm = rng.integers(0, ARMS, size)
    t = rng.uniform(0.0, 1.0, size)
    angle = 1.5 * np.pi * t + 2 * np.pi * arm / ARMS
    noise = 0.1 * rng.normal(size=(size, 2)) * t[:, None]
    x = np.stack([t * np.cos(angle), t * np.sin(angle)], axis=1) + noise
    flipped = rng.random(size) < 0.05
    label = np.where(flipped, rng.integers(0, ARMS, size), arm)
    return TensorDataset(torch.tensor(x, dtype=torch.float32), torch.tensor(label))


class SpiralClassifier(pl.LightningModule):
    def __init__(self, config: dict[str, Any], hidden: int = 64) -> None:
        super().__init__()
        self.config = config
        self.net = nn.Sequential(nn.Linear(2, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                 nn.Linear(hidden, ARMS))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        logits = self.net(x)
        self.log("val_loss", F.cross_entropy(logits, y), sync_dist=True)
        self.log("val_accuracy", (logits.argmax(-1) == y).float().mean(), sync_dist=True)

    def configure_optimizers(self) -> dict[str, Any]:
        return lightning.configure_optimizers(self, self.config)  # scalesweep


def train_loop_per_worker(config: dict[str, Any]) -> None:
    pl.seed_everything(config["seed"])  # scalesweep: every rank builds the same initial model
    model = SpiralClassifier(config)
    # scalesweep: train_size in the sweep file; drop_last: every update is a full global batch
    train = DataLoader(make_spirals(config["train_size"], data_seed=1),
                       batch_size=config["per_worker_batch"], shuffle=True, drop_last=True)
    dev = DataLoader(make_spirals(DEV_SIZE, data_seed=2), batch_size=64)

    trainer = pl.Trainer(**lightning.trainer_arguments(config),  # scalesweep
                         callbacks=[lightning.ReportCallback(config)])  # scalesweep
    trainer = prepare_trainer(trainer)
    with lightning.last_checkpoint() as resume:  # scalesweep: None on a first start
        trainer.fit(model, train, dev, ckpt_path=resume)
