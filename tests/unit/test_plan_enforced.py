"""The plan is enforced, not trusted (scalesweep.trainables.user_loop.ReportChecker with the
trial's plan): every report of a train_loop must carry the lr its update ran with, equal to the
planned schedule's; no update may pass the planned total, and the loop must end at it. A trial
that strays fails by name with what to look at for its sender (a loop of its own, the HF or the
Lightning adapter). Real HF and Lightning Trainers, without Ray, show what their reports look
like when a script forgets the adapter's optimizers or builds its own arguments;
tests/integration/test_user_loop_e2e.py fails a trial on a real sweep."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader
from transformers import Trainer, TrainingArguments

from examples import hf_trainer_loop as hf_example
from examples import lightning_loop as pl_example
from scalesweep import loop_helpers
from scalesweep.adapters import hf, lightning
from scalesweep.orchestrator.plan.loop_config import loop_config
from scalesweep.orchestrator.plan.rows import make_plan
from scalesweep.orchestrator.spec.load import load_sweep
from scalesweep.trainables.user_loop import (
    SOURCE_KEY,
    LoopReportError,
    PlanCheck,
    ReportChecker,
    plan_of,
)
from tests.support.helpers import SWEEPS


def _config(sweep: str, *changes: str) -> dict[str, Any]:
    loaded = load_sweep(SWEEPS / sweep, list(changes))
    row = next(r for r in make_plan(loaded).rows if r.world_size == 1)
    return loop_config(row, loaded.workload.train_size())


def _checker(config: dict[str, Any]) -> ReportChecker:
    checker = ReportChecker(trial="ws1-s0", train_loop="pkg.loops:train",
                            updates_per_epoch=int(config["updates_per_epoch"]),
                            global_batch=int(config["global_batch"]))
    checker.start(0.0, plan=plan_of(config))  # what loop_worker's start marker carries
    return checker


def _replay(config: dict[str, Any], reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The reports through the trial's checker, as the Ray Train callback passes them, and the
    loop's end."""
    checker = _checker(config)
    for r in reports:
        checker.check(r, clock=1.0)
    return checker.finish()


def _sent(source: str) -> Callable[..., dict[str, Any]]:
    """``send`` as loop_helpers.report(source=...) hands the report to Ray Train."""
    def send(config: dict[str, Any], **report: Any) -> dict[str, Any]:
        report.pop("checkpoint", None)
        return {**loop_helpers.build_report(config, **report), SOURCE_KEY: source}
    return send


# -- the checker -----------------------------------------------------------------------------


OWN = "own_loop.yaml"  # sgd at 0.05, warmuplr 16 updates at world size 1


def _planned(config: dict[str, Any], update: int, **extra: Any) -> dict[str, Any]:
    return {"update": update, "dev_loss": 0.5,
            "lr": loop_helpers.planned_schedule(config).lr(update), **extra}


def test_a_loop_on_the_plan_passes_and_the_sender_is_taken_off() -> None:
    config = _config(OWN)
    evals = range(config["eval_every"], config["total_updates"] + 1, config["eval_every"])
    checker = _checker(config)
    outs = [checker.check(_planned(config, k, **{SOURCE_KEY: "loop_helpers"}), clock=1.0)
            for k in evals]
    assert all(SOURCE_KEY not in out for out in outs)
    assert checker.finish()["update"] == config["total_updates"]


def test_the_lr_of_every_update_must_be_the_plans() -> None:
    config = _config(OWN)
    planned = loop_helpers.planned_schedule(config)
    assert planned.lr(8) == pytest.approx(config["optimizer"]["lr"] / 2)  # in the warmup
    checker = _checker(config)
    checker.check(_planned(config, 8, lr=planned.lr(8) * (1 + 1e-7)), clock=1.0)  # float noise
    with pytest.raises(LoopReportError) as info:
        checker.check(_planned(config, 16, lr=0.001), clock=1.0)
    assert str(info.value) == (
        f"trial ws1-s0: train_loop pkg.loops:train update 16 ran at lr 0.001, the plan says "
        f"{planned.lr(16):.6g}: is the optimizer stepped with `scheduler = loop_helpers."
        "lr_scheduler(optimizer, config)` (scheduler.step() after each optimizer.step()), and is "
        "the lr reported the one the update ran with (read before scheduler.step())?")


@pytest.mark.parametrize(("source", "hint"), [
    ("hf", "is `optimizers=hf.optimizers(model, config)` passed to the Trainer?"),
    ("lightning", "configure_optimizers return `lightning.configure_optimizers(self, config)`?"),
    (None, "loop_helpers.lr_scheduler(optimizer, config)"),  # a plain ray.train.report
])
def test_the_hint_is_the_senders(source: str | None, hint: str) -> None:
    config = _config(OWN)
    report = _planned(config, 8, lr=1.0)
    if source is not None:
        report[SOURCE_KEY] = source
    with pytest.raises(LoopReportError, match="update 8 ran at lr 1, the plan says") as info:
        _checker(config).check(report, clock=1.0)
    assert hint in str(info.value)


def test_a_report_without_lr_says_how_to_report_it() -> None:
    config = _config(OWN)
    with pytest.raises(LoopReportError) as info:
        _checker(config).check({"update": 8, "dev_loss": 0.5}, clock=1.0)
    assert "train_loop pkg.loops:train reported update 8 without 'lr': every report needs the " \
           "lr its update ran with" in str(info.value)
    assert "loop_helpers.report(config, update=k, dev_loss=x, lr=lr)" in str(info.value)


def test_updates_past_the_plan_or_short_of_it_fail_by_name() -> None:
    config = _config(OWN)
    total = config["total_updates"]
    checker = _checker(config)
    with pytest.raises(LoopReportError, match=rf"reported update {total + 16}, past the plan's "
                                              rf"{total} updates: does the loop stop after"):
        checker.check(_planned(config, total + 16), clock=1.0)
    short = _checker(config)
    short.check(_planned(config, total - 16, **{SOURCE_KEY: "hf"}), clock=1.0)
    with pytest.raises(LoopReportError, match=rf"ended at update {total - 16}, the plan says "
                                              rf"{total} updates: are the Trainer's arguments "
                                              r"`args=hf.training_arguments\(config, model\)`"):
        short.finish()


def test_a_checker_without_a_plan_checks_the_contract_alone() -> None:
    """A start marker of a loop_worker from before the plan travelled with it."""
    checker = ReportChecker(trial="t", train_loop="m:f", updates_per_epoch=8, global_batch=8)
    checker.start(0.0)
    checker.check({"update": 3, "dev_loss": 0.5}, clock=1.0)
    assert checker.finish()["update"] == 3


def test_the_plan_is_the_loops_config() -> None:
    config = _config(OWN)
    assert plan_of(config) == {"scheduler": config["scheduler"], "lr": config["optimizer"]["lr"],
                               "total_updates": config["total_updates"]}
    # a start marker of an older version named it schedule: its check reads it the same
    older = {"schedule": config["scheduler"], "lr": config["optimizer"]["lr"],
             "total_updates": config["total_updates"]}
    assert PlanCheck(older).lr(3) == PlanCheck(plan_of(config)).lr(3)
    assert loop_helpers._SOURCE_KEY == SOURCE_KEY


# -- the HF Trainer ----------------------------------------------------------------------------


def _hf_reports(config: dict[str, Any], tmp_path: Path, *, adapter_optimizers: bool = True,
                args: TrainingArguments | None = None) -> list[dict[str, Any]]:
    model = hf_example.GPT2LMHeadModel(hf_example.GPT2Config(
        vocab_size=len(hf_example.VOCAB), n_positions=hf_example.BLOCK, n_embd=16, n_layer=1,
        n_head=2, bos_token_id=None, eos_token_id=None))
    report = hf.ReportCallback(config, send=_sent("hf"))
    trainer = Trainer(
        model=model,
        args=args or hf.training_arguments(config, model, output_dir=str(tmp_path),
                                           save_strategy="no"),
        train_dataset=hf_example.CharBlocks(config["train_size"], data_seed=1),
        eval_dataset=hf_example.CharBlocks(16, data_seed=2),
        optimizers=hf.optimizers(model, config) if adapter_optimizers else (None, None),
        callbacks=[report])
    trainer.train()
    return report.reports


def test_an_hf_trainer_strays_by_name(tmp_path: Path) -> None:
    config = {**_config("hf_trainer.yaml"), "total_updates": 8, "eval_every": 4}
    config["scheduler"] = {**config["scheduler"], "warmup_steps": 8}
    assert loop_helpers.planned_schedule(config).lr(4) == pytest.approx(0.0015)
    assert _replay(config, _hf_reports(config, tmp_path / "a"))["update"] == 8
    # without the adapter's optimizers: HF's own AdamW at the arguments' lr, constant
    with pytest.raises(LoopReportError, match=r"update 4 ran at lr 0.003, the plan says 0.0015: "
                                              r"is `optimizers=hf.optimizers\(model, config\)` "
                                              r"passed to the Trainer\?"):
        _replay(config, _hf_reports(config, tmp_path / "b", adapter_optimizers=False))
    own = TrainingArguments(output_dir=str(tmp_path / "c"), max_steps=16, eval_strategy="steps",
                            eval_steps=4, per_device_train_batch_size=8, save_strategy="no",
                            report_to="none", use_cpu=True)
    with pytest.raises(LoopReportError, match=r"reported update 12, past the plan's 8 updates: "
                                              r"are the Trainer's arguments"):
        _replay(config, _hf_reports(config, tmp_path / "c", args=own))


# -- Lightning ---------------------------------------------------------------------------------


class _OwnOptimizer(pl_example.SpiralClassifier):
    """The example's module with an optimizer of its own, at a constant lr."""

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.5)


def _pl_reports(config: dict[str, Any],
                module: type[pl_example.SpiralClassifier] = pl_example.SpiralClassifier,
                **trainer_changes: Any) -> list[dict[str, Any]]:
    pl.seed_everything(0)
    report = lightning.ReportCallback(config, send=_sent("lightning"), checkpoint=False)
    arguments = {**lightning.trainer_arguments(config), **trainer_changes}
    trainer = pl.Trainer(**arguments, callbacks=[report])
    trainer.fit(module(config),
                DataLoader(pl_example.make_spirals(config["train_size"], data_seed=1),
                           batch_size=config["per_worker_batch"], shuffle=True, drop_last=True),
                DataLoader(pl_example.make_spirals(64, data_seed=2), batch_size=64))
    return report.reports


def test_a_lightning_trainer_strays_by_name() -> None:
    config = {**_config("lightning.yaml"), "total_updates": 8, "eval_every": 4}
    assert _replay(config, _pl_reports(config))["update"] == 8
    with pytest.raises(LoopReportError, match=r"update 4 ran at lr 0.5, the plan says .*: does "
                                              r"the LightningModule's configure_optimizers"):
        _replay(config, _pl_reports(config, _OwnOptimizer))
    # (the adapter's ReportCallback stops a fit at the planned total: a longer max_steps of
    # the script's own cannot run past it, a shorter one ends the trial short)
    with pytest.raises(LoopReportError, match=r"ended at update 4, the plan says 8 updates: is "
                                              r"the Trainer built with"):
        _replay(config, _pl_reports(config, max_steps=4))


def test_a_trial_resumed_past_its_last_update_ends_with_its_last_logged_eval() -> None:
    """Its checkpoint was at the final update when the sweep stopped: the loop restores it and
    has nothing left to train or report; that eval (already in MLflow) is its end."""
    config = _config(OWN)
    total = int(config["total_updates"])
    last = {"update": total, "dev_loss": 0.1, "wall_s": 9.0}
    resumed = ReportChecker(trial="t", train_loop="m:f",
                            updates_per_epoch=int(config["updates_per_epoch"]),
                            global_batch=int(config["global_batch"]), wall_offset=9.0, last=dict(last))
    resumed.start(0.0, plan=plan_of(config))
    end = resumed.finish()
    assert end["update"] == total and end["status"] == "completed" and end["train_seconds"] == 9.0
    # a fresh trial that never reports still fails by name
    with pytest.raises(LoopReportError, match=r"returned without ever calling ray\.train\.report"):
        _checker(config).finish()
