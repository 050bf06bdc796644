"""On one CUDA GPU: the Hugging Face Trainer and Lightning adapters train on the GPU (no Ray,
as tests/unit/test_adapter_hf.py and tests/unit/test_adapter_lightning.py do on CPU), with the planned lr
at every update and a report at every evaluation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader
from transformers import Trainer

from examples import hf_trainer_loop as hf_example
from examples import lightning_loop as pl_example
from scalesweep import loop_helpers
from scalesweep.adapters import hf, lightning
from tests.support.helpers import AsRayTrain
from tests.unit import test_adapter_hf, test_adapter_lightning

pytestmark = pytest.mark.gpu


def test_the_hf_trainer_trains_on_the_gpu(tmp_path: Path) -> None:
    config = test_adapter_hf.trial_config("training.max_updates=32")  # evals at 16 and 32
    model = test_adapter_hf.tiny_gpt2()
    args = hf.training_arguments(config, model, output_dir=str(tmp_path / "out"))
    assert not args.use_cpu and args.device.type == "cuda"
    report, seen = hf.ReportCallback(config, send=AsRayTrain(tmp_path)), test_adapter_hf._OptimizerLr()
    trainer = Trainer(model=model, args=args,
                      train_dataset=hf_example.CharBlocks(config["train_size"], data_seed=1),
                      eval_dataset=hf_example.CharBlocks(32, data_seed=2),
                      optimizers=hf.optimizers(model, config),  # type: ignore[arg-type]
                      callbacks=[report, seen])
    trainer.train()
    assert {p.device.type for p in model.parameters()} == {"cuda"}
    planned = loop_helpers.planned_schedule(config)
    assert trainer.state.global_step == 32
    assert seen.lrs == pytest.approx([planned.lr(k) for k in range(1, 33)], rel=1e-12)
    assert [r["update"] for r in report.reports] == [16, 32]
    assert all(0 < r["dev_loss"] < 4 for r in report.reports)
    assert report.reports[-1]["dev_loss"] < report.reports[0]["dev_loss"]


class _Devices(test_adapter_lightning._OptimizerLr):
    """The planned lr's record, and the device the module trained on (Lightning moves it back
    to the CPU when the fit ends)."""

    def __init__(self) -> None:
        super().__init__()
        self.devices: set[str] = set()

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                 optimizer: torch.optim.Optimizer) -> None:
        super().on_before_optimizer_step(trainer, pl_module, optimizer)
        self.devices.add(pl_module.device.type)


def test_the_lightning_trainer_trains_on_the_gpu(tmp_path: Path) -> None:
    config = test_adapter_lightning.trial_config("training.max_updates=32")  # validations at 16, 32
    pl.seed_everything(0)
    report, seen = lightning.ReportCallback(config, send=AsRayTrain(tmp_path)), _Devices()
    arguments: dict[str, Any] = lightning.trainer_arguments(config)
    trainer = pl.Trainer(**arguments, callbacks=[seen, report])
    assert trainer.strategy.root_device.type == "cuda"
    train = DataLoader(pl_example.make_spirals(config["train_size"], data_seed=1),
                       batch_size=config["per_worker_batch"], shuffle=True, drop_last=True)
    trainer.fit(pl_example.SpiralClassifier(config), train,
                DataLoader(pl_example.make_spirals(128, data_seed=2), batch_size=64))
    assert seen.devices == {"cuda"}
    planned = loop_helpers.planned_schedule(config)
    assert trainer.global_step == 32
    assert seen.lrs == pytest.approx([planned.lr(k) for k in range(1, 33)], rel=1e-12)
    assert [r["update"] for r in report.reports] == [16, 32]
    assert all(0 < r["dev_loss"] < 2 and 0 <= r["dev_accuracy"] <= 1 for r in report.reports)
