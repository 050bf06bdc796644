"""The Lightning adapter without Ray (scalesweep.adapters.lightning): the Trainer arguments it
makes from a trial's config, what it refuses, and a real ``pytorch_lightning.Trainer`` fit in
this process whose every update runs with the planned lr and whose validations, the last
included, are reported with update = the Trainer's global step. tests/integration/test_adapters_e2e.py runs
it on Ray Train workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from examples import lightning_loop as example
from scalesweep import loop_helpers
from scalesweep.adapters import lightning
from scalesweep.adapters._common import AdapterConfigError
from scalesweep.orchestrator.plan.loop_config import loop_config
from scalesweep.orchestrator.plan.rows import make_plan
from scalesweep.orchestrator.spec.load import load_sweep
from scalesweep.trainables import user_loop
from tests.support.helpers import SWEEPS, AsRayTrain


def trial_config(*changes: str, world_size: int = 1) -> dict[str, Any]:
    """The config the trial of ``world_size`` in sweeps/lightning.yaml receives."""
    sweep = load_sweep(SWEEPS / "lightning.yaml", list(changes))
    row = next(r for r in make_plan(sweep).rows if r.world_size == world_size)
    return loop_config(row, sweep.workload.train_size())


def test_trainer_arguments_are_the_trials() -> None:
    config = trial_config("training.accum_grad=2", "training.grad_clip=0.5", world_size=2)
    kwargs = lightning.trainer_arguments(config, ray_train=False, deterministic=True)
    assert kwargs["max_steps"] == config["total_updates"] == 48
    # validation every eval_every updates = eval_every x accum_grad batches, across epochs
    assert (kwargs["val_check_interval"], kwargs["check_val_every_n_epoch"]) == (8, None)
    assert config["eval_every"] == 4 and kwargs["accumulate_grad_batches"] == 2
    assert (kwargs["gradient_clip_val"], kwargs["num_sanity_val_steps"]) == (0.5, 0)
    assert kwargs["deterministic"] and not kwargs["enable_checkpointing"] and not kwargs["logger"]
    assert "strategy" not in kwargs  # outside Ray Train: Lightning's own choice
    ray_kwargs = lightning.trainer_arguments(config, ray_train=True)
    assert type(ray_kwargs["strategy"]).__name__ == "RayDDPStrategy"
    assert [type(p).__name__ for p in ray_kwargs["plugins"]] == ["RayLightningEnvironment"]


def test_what_would_change_the_plan_is_refused_by_name() -> None:
    config = trial_config()
    with pytest.raises(AdapterConfigError, match=r"trainer_arguments max_steps=5: must not be "
                                                 r"given, the trial's plan sets it \(192\)"):
        lightning.trainer_arguments(config, max_steps=5)
    with pytest.raises(AdapterConfigError, match=r"physical_workers=1: must equal world_size "
                                                 r"\(2\) under the Lightning adapter"):
        lightning.trainer_arguments({**config, "world_size": 2, "physical_workers": 1})


def test_the_scheduler_gives_the_planned_lr_at_every_step() -> None:
    config = trial_config()
    module = torch.nn.Linear(2, 1)
    chosen = lightning.configure_optimizers(module, config)
    optimizer, scheduler = chosen["optimizer"], chosen["lr_scheduler"]
    assert isinstance(optimizer, torch.optim.Adam) and scheduler["interval"] == "step"
    planned, lrs = loop_helpers.planned_schedule(config), []
    for _ in range(40):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler["scheduler"].step()
    assert lrs == pytest.approx([planned.lr(k) for k in range(1, 41)], rel=1e-12)


class _OptimizerLr(pl.Callback):
    """The lr each optimizer step is about to run with (Lightning steps an ``interval: "step"``
    scheduler after it)."""

    def __init__(self) -> None:
        self.lrs: list[float] = []

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                 optimizer: torch.optim.Optimizer) -> None:
        self.lrs.append(optimizer.param_groups[0]["lr"])


def test_a_plain_trainer_runs_the_planned_lr_and_reports_each_validation(tmp_path: Path) -> None:
    config = trial_config("training.max_updates=40")  # validations at 16, 32 and the last, 40
    pl.seed_everything(0)
    report, seen = lightning.ReportCallback(config, send=AsRayTrain(tmp_path)), _OptimizerLr()
    trainer = pl.Trainer(**lightning.trainer_arguments(config), callbacks=[seen, report])
    train = DataLoader(example.make_spirals(config["train_size"], data_seed=1),
                       batch_size=config["per_worker_batch"], shuffle=True, drop_last=True)
    trainer.fit(example.SpiralClassifier(config), train,
                DataLoader(example.make_spirals(128, data_seed=2), batch_size=64))
    planned = loop_helpers.planned_schedule(config)
    assert trainer.global_step == 40
    assert seen.lrs == pytest.approx([planned.lr(k) for k in range(1, 41)], rel=1e-12)
    assert [r["update"] for r in report.reports] == [16, 32, 40]
    for r in report.reports:
        k = int(r["update"])
        assert r["lr"] == pytest.approx(planned.lr(k), rel=1e-12)
        assert (r["epoch"], r["samples_seen"]) == (k / 64, k * 32.0)
        assert 0 < r["dev_loss"] < 2 and 0 <= r["dev_accuracy"] <= 1


class _RecordingClassifier(example.SpiralClassifier):
    """training_step's loss of every batch, as it returned it."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.losses: list[float] = []

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.losses.append(float(loss))
        return loss


@pytest.mark.parametrize("accum", [1, 2])
def test_each_report_carries_the_mean_train_loss_since_the_last(tmp_path: Path, accum: int) -> None:
    """train_loss is training_step's loss averaged over the batches since the previous report,
    the loss itself even where Lightning divides it by accumulate_grad_batches."""
    config = trial_config("training.max_updates=20", f"training.accum_grad={accum}")
    pl.seed_everything(0)
    report = lightning.ReportCallback(config, send=AsRayTrain(tmp_path), checkpoint=False)
    module = _RecordingClassifier(config)
    trainer = pl.Trainer(**lightning.trainer_arguments(config), callbacks=[report])
    train = DataLoader(example.make_spirals(config["train_size"], data_seed=1),
                       batch_size=config["per_worker_batch"], shuffle=True, drop_last=True)
    trainer.fit(module, train, DataLoader(example.make_spirals(128, data_seed=2), batch_size=64))
    updates = [int(r["update"]) for r in report.reports]
    assert updates[-1] == 20 and len(module.losses) == 20 * accum
    for r, start, end in zip(report.reports, [0, *updates], updates, strict=False):
        batches = module.losses[start * accum:end * accum]
        assert r["train_loss"] == pytest.approx(sum(batches) / len(batches), rel=1e-6)


def test_a_validation_without_the_monitored_loss_is_refused_by_name() -> None:
    config = trial_config("training.max_updates=16")
    report = lightning.ReportCallback(config, monitor="val_nll", send=loop_helpers.build_report)
    trainer = pl.Trainer(**lightning.trainer_arguments(config), callbacks=[report])
    with pytest.raises(AdapterConfigError, match=r"ReportCallback monitor='val_nll': must be "
                                                 r"logged in validation_step"):
        trainer.fit(example.SpiralClassifier(config),
                    DataLoader(example.make_spirals(512, data_seed=1), batch_size=32, drop_last=True),
                    DataLoader(example.make_spirals(64, data_seed=2), batch_size=64))


def test_a_trainer_outside_the_trials_process_group_is_refused() -> None:
    config = trial_config("training.max_updates=4", world_size=2)
    report = lightning.ReportCallback(config, send=loop_helpers.build_report)
    trainer = pl.Trainer(**lightning.trainer_arguments(config), callbacks=[report])
    with pytest.raises(AdapterConfigError, match=r"the Lightning Trainer runs on 1 rank\(s\): "
                                                 r"must be world_size \(2\)"):
        trainer.fit(example.SpiralClassifier(config),
                    DataLoader(example.make_spirals(512, data_seed=1), batch_size=32, drop_last=True))


class _AtStart(pl.Callback):
    """The module's parameters when training starts (after a checkpoint is restored)."""

    def __init__(self) -> None:
        self.parameters: dict[str, torch.Tensor] = {}

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.parameters = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}


def _fit(config: dict[str, Any], report: lightning.ReportCallback,
         ckpt_path: str | None = None) -> tuple[pl.Trainer, _AtStart]:
    pl.seed_everything(0)
    start = _AtStart()
    trainer = pl.Trainer(**lightning.trainer_arguments(config), callbacks=[report, start])
    train = DataLoader(example.make_spirals(config["train_size"], data_seed=1),
                       batch_size=config["per_worker_batch"], shuffle=True, drop_last=True)
    trainer.fit(example.SpiralClassifier(config), train,
                DataLoader(example.make_spirals(128, data_seed=2), batch_size=64),
                ckpt_path=ckpt_path)
    return trainer, start


def test_each_report_carries_its_checkpoint_and_a_resumed_fit_goes_on_from_it(
        tmp_path: Path) -> None:
    """Every validation's report carries the Trainer's checkpoint; a fit resumed from the one
    of update 16 (as lightning.last_checkpoint gives it after a restart) starts from that
    model and update count and reports 32 and 40 only, on the planned lr. (Its losses are not
    the uninterrupted run's: Lightning restores the data position within an epoch only for
    stateful loaders.)"""
    config = trial_config("training.max_updates=40")
    whole = lightning.ReportCallback(config, send=AsRayTrain(tmp_path))
    _fit(config, whole)
    saved = whole.send.saved  # type: ignore[attr-defined]
    assert sorted(saved) == [16, 32, 40]
    checkpoint = saved[16] / lightning.CHECKPOINT_FILE
    at_16 = torch.load(checkpoint, weights_only=False)
    assert at_16["global_step"] == 16

    (tmp_path / "r").mkdir()
    resumed = lightning.ReportCallback(config, send=AsRayTrain(tmp_path / "r"))
    trainer, start = _fit(config, resumed, ckpt_path=str(checkpoint))
    assert start.parameters.keys() == at_16["state_dict"].keys()
    for name, value in at_16["state_dict"].items():
        assert torch.equal(start.parameters[name], value), name
    assert trainer.global_step == 40
    assert [r["update"] for r in resumed.reports] == [32, 40]
    planned = loop_helpers.planned_schedule(config)
    assert [resumed.lrs.at(k) for k in (17, 32, 40)] == pytest.approx(
        [planned.lr(k) for k in (17, 32, 40)], rel=1e-12)
    assert resumed.lrs.at(16) is None  # no update before the restored one was made again


def test_a_trainer_without_the_report_callback_fails_its_trial_at_update_1() -> None:
    # in a trial, the adapter's scheduler finds at its first step that no
    # lightning.ReportCallback saw the fit start: the trial fails then, naming it (#34 item 3b)
    config = trial_config("training.max_updates=40")
    sent: list[dict[str, Any]] = []
    pl.seed_everything(0)
    trainer = pl.Trainer(**lightning.trainer_arguments(config))
    train = DataLoader(example.make_spirals(config["train_size"], data_seed=1),
                       batch_size=config["per_worker_batch"], shuffle=True, drop_last=True)
    with user_loop.running("pkg.loops:train", send=sent.append) as run, pytest.raises(
            user_loop.LoopReportError, match=r"pass callbacks=\[lightning.ReportCallback\(config\)\] "
                                             r"to the pl.Trainer"):
        trainer.fit(example.SpiralClassifier(config), train,
                    DataLoader(example.make_spirals(128, data_seed=2), batch_size=64))
    assert trainer.global_step <= 1 and run.adapter == "lightning"
    assert [m[user_loop.MARKER_KEY] for m in sent] == [user_loop.FAIL]
