"""The Lightning adapter's reported val_loss means the same at every world size
(scalesweep.adapters.lightning.ReportCallback): a module that logs its validation loss without
``sync_dist`` (each rank's value then covers its own shard of the dev set) is reported, at 2
ranks of a real gloo process group, as the whole dev set's mean from the same weights, as at 1
rank; and the first update's gradient norm is the same."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from examples import lightning_loop as example
from scalesweep import loop_helpers
from scalesweep.adapters import lightning
from tests.support import gloo_group

DEV = 128


class _Unsynced(example.SpiralClassifier):
    """The example's module, its val_loss logged per rank (no sync_dist)."""

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))


class _GradNorm(pl.Callback):
    def __init__(self) -> None:
        self.norms: list[float] = []

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                 optimizer: torch.optim.Optimizer) -> None:
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        self.norms.append(float(torch.linalg.vector_norm(torch.stack(
            [torch.linalg.vector_norm(g) for g in grads]))))


def _config(world: int) -> dict[str, Any]:
    batch = 16 // world  # the same global batch of 16
    return {"world_size": world, "physical_workers": world, "per_worker_batch": batch,
            "accum_grad": 1, "global_batch": 16, "total_updates": 1, "eval_every": 1,
            "updates_per_epoch": 1, "seed": 0, "lr": 0.1, "grad_clip": None, "train_size": 16,
            "optimizer": {"type": "sgd", "lr": 0.1}, "schedule": {"type": "constant"}}


def _ranks(rank: int, size: int, out: Path) -> None:
    from pytorch_lightning.strategies import DDPStrategy

    # the process group is made; Lightning joins it as a launcher-made rank of `size` nodes
    os.environ.update(RANK=str(rank), NODE_RANK=str(rank), LOCAL_RANK="0", WORLD_SIZE=str(size),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    config = _config(size)
    pl.seed_everything(0)
    model = _Unsynced(config)
    report, norm = lightning.ReportCallback(config, send=loop_helpers.build_report,
                                            checkpoint=False), _GradNorm()
    trainer = pl.Trainer(**lightning.trainer_arguments(config, ray_train=False),
                         strategy=DDPStrategy(process_group_backend="gloo"), accelerator="cpu",
                         devices=1, num_nodes=size, callbacks=[report, norm])
    # the whole training set is the one update's global batch, whatever its split
    trainer.validate(model, DataLoader(example.make_spirals(DEV, data_seed=2), batch_size=64),
                     verbose=False)
    dev_loss = float(trainer.callback_metrics["val_loss"])  # rank-local: the module's own
    trainer.fit(model, DataLoader(example.make_spirals(16, data_seed=1),
                                  batch_size=config["per_worker_batch"], drop_last=True),
                DataLoader(example.make_spirals(DEV, data_seed=2), batch_size=64))
    (out / f"ws{size}-rank{rank}.json").write_text(json.dumps(
        {"unsynced": dev_loss, "grad_norm": norm.norms[0], "reports": report.reports}))


@pytest.mark.timeout(600)
def test_val_loss_and_first_gradient_are_the_same_at_world_sizes_1_and_2(tmp_path: Path) -> None:
    gloo_group.run(1, _ranks, (1, tmp_path), tmp_path)
    gloo_group.run(2, _ranks, (2, tmp_path), tmp_path)
    one, *two = (json.loads((tmp_path / f"{name}.json").read_text())
                 for name in ("ws1-rank0", "ws2-rank0", "ws2-rank1"))
    assert two[0]["unsynced"] != pytest.approx(one["unsynced"], rel=1e-3)  # a shard's mean alone
    assert two[0]["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-5)
    for rank in two:  # every rank reports the whole dev set's mean after the update
        [r] = rank["reports"]
        assert r["update"] == 1
        assert r["dev_loss"] == pytest.approx(one["reports"][0]["dev_loss"], rel=1e-5)
        # the update's training loss over both shards: training_step's, averaged over ranks
        assert r["train_loss"] == pytest.approx(one["reports"][0]["train_loss"], rel=1e-5)
