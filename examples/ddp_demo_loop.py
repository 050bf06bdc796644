"""A plain PyTorch DDP training loop, swept by scalesweep as it is (sweeps/own_loop.yaml).

This is the standard shape of a Ray Train ``train_loop_per_worker(config)``: a model through
``prepare_model``, a ``DistributedSampler``, an optimizer, the loop, ``ray.train.report``. The
lines marked ``# scalesweep`` are all that sweeping it needs:

* the hyperparameters come from ``config``, the trial's row of ``scalesweep plan --json``
  (``lr``, ``per_worker_batch``, ``seed``, ``total_updates``, ...);
* ``loop_helpers.lr_scheduler`` is the trial's planned schedule (warmup rule and lr rule
  applied) as a torch ``LRScheduler``;
* ``loop_helpers.report`` sends ``{"update", "epoch", "samples_seen", "dev_loss", ...}`` with
  ``ray.train.report`` every ``eval_every`` updates, and the loop's state as its checkpoint;
* ``loop_helpers.restore`` gives that state back when the trial starts again (a lost worker,
  a retry, ``scalesweep resume`` after Ctrl-C or a killed driver), and
  ``loop_helpers.data_position`` where in the data it was: the trial goes on as if it had
  never stopped.

The task: a small MLP regresses 4 outputs of a fixed random teacher on 16-d Gaussian inputs,
plus noise of std 0.1 (the best reachable dev loss is 0.01). Data come from a fixed numpy seed,
so every worker of every trial sees the same samples; the model's initial weights come from
the trial's seed. Run from the repository root:

    python -m scalesweep run sweeps/own_loop.yaml
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import ray.train
import ray.train.torch
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from scalesweep import loop_helpers  # scalesweep

DEV_SIZE = 256


def make_data(size: int, data_seed: int) -> TensorDataset:
    """x ~ N(0, I_16); y = a fixed tanh teacher (4 outputs) + N(0, 0.1^2) noise."""
    teacher = np.random.default_rng(0)
    w1, w2 = teacher.normal(size=(16, 32)) / 4.0, teacher.normal(size=(32, 4)) / np.sqrt(32)
    rng = np.random.default_rng(data_seed)
    x = rng.normal(size=(size, 16))
    y = np.tanh(x @ w1) @ w2 * 2.0 + 0.1 * rng.normal(size=(size, 4))
    return TensorDataset(torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32))


def evaluate(model: nn.Module, dev: TensorDataset) -> float:
    device = next(model.parameters()).device  # the data go where the model is
    model.eval()
    with torch.no_grad():
        x, y = (t.to(device) for t in dev.tensors)
        loss = F.mse_loss(model(x), y).item()
    model.train()
    return loss


def train_loop_per_worker(config: dict[str, Any]) -> None:
    context = ray.train.get_context()
    state = loop_helpers.restore()  # scalesweep: None on a first start
    torch.manual_seed(config["seed"])  # every rank builds the same initial model
    net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    if state is not None:
        net.load_state_dict(state["model"])
    model = ray.train.torch.prepare_model(net)  # on this worker's GPU, if it has one
    device = ray.train.torch.get_device()  # where prepare_model put the model: the batches go there

    train = make_data(config["train_size"], data_seed=1)  # scalesweep: train_size in the sweep file
    dev = make_data(DEV_SIZE, data_seed=2)
    sampler: DistributedSampler[int] = DistributedSampler(
        train, num_replicas=context.get_world_size(), rank=context.get_world_rank(), shuffle=True,
        seed=config["seed"])
    # drop_last: every update has the same global batch (the plan counts full updates only)
    loader = DataLoader(train, batch_size=config["per_worker_batch"], sampler=sampler, drop_last=True)

    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"],
                                momentum=config["optimizer"].get("momentum", 0.0))
    scheduler = loop_helpers.lr_scheduler(optimizer, config)  # scalesweep

    update = 0
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        update = state["update"]
    epoch, done_in_epoch = loop_helpers.data_position(config, update)  # scalesweep
    while update < config["total_updates"]:
        sampler.set_epoch(epoch)
        # a restored trial skips the batches it had already trained on in this epoch
        for x, y in itertools.islice(loader, done_in_epoch, None):
            x, y = x.to(device), y.to(device)
            lr = float(scheduler.get_last_lr()[0])  # the lr this update runs with
            loss = F.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            update += 1
            if loop_helpers.eval_due(config, update):  # scalesweep
                loop_helpers.report(
                    config, update=update, dev_loss=evaluate(model, dev), train_loss=loss.item(),
                    lr=lr, state={"model": net.state_dict(), "optimizer": optimizer.state_dict(),
                                  "scheduler": scheduler.state_dict(), "update": update})
            if update == config["total_updates"]:
                break
        epoch, done_in_epoch = epoch + 1, 0
