"""The Hugging Face Trainer adapter without Ray (scalesweep.adapters.hf): the TrainingArguments
it makes from a trial's config, what it refuses, and a real ``transformers.Trainer`` run in this
process whose every update runs with the planned lr and whose evaluations are reported with
update = the Trainer's global step. tests/integration/test_adapters_e2e.py runs it on Ray Train workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import Trainer, TrainerCallback

from examples import hf_trainer_loop as example
from scalesweep import loop_helpers
from scalesweep.adapters import hf
from scalesweep.adapters._common import AdapterConfigError
from scalesweep.orchestrator.plan.loop_config import loop_config
from scalesweep.orchestrator.plan.rows import make_plan
from scalesweep.orchestrator.spec.load import load_sweep
from scalesweep.trainables import user_loop
from tests.support.helpers import SWEEPS, AsRayTrain


def tiny_gpt2() -> Any:
    return example.GPT2LMHeadModel(example.GPT2Config(
        vocab_size=len(example.VOCAB), n_positions=example.BLOCK, n_embd=16, n_layer=1, n_head=2,
        bos_token_id=None, eos_token_id=None))


def trial_config(*changes: str, world_size: int = 1) -> dict[str, Any]:
    """The config the trial of ``world_size`` in sweeps/hf_trainer.yaml receives."""
    sweep = load_sweep(SWEEPS / "hf_trainer.yaml", list(changes))
    row = next(r for r in make_plan(sweep).rows if r.world_size == world_size)
    return loop_config(row, sweep.workload.train_size())


def test_training_arguments_are_the_trials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = trial_config("training.accum_grad=2", world_size=2)
    args = hf.training_arguments(config, tiny_gpt2(), output_dir=str(tmp_path),
                                dataloader_num_workers=0)
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (8, 2)
    assert args.max_steps == config["total_updates"] == 32
    assert (args.eval_strategy, args.eval_steps) == ("steps", config["eval_every"])
    assert (args.seed, args.learning_rate) == (0, config["lr"]) == (0, 0.006)
    assert (args.warmup_steps, args.max_grad_norm) == (0, 0.0)
    assert (args.save_strategy, args.save_steps, args.save_total_limit) == ("steps", 4, 1)
    assert args.report_to == [] and args.dataloader_drop_last
    # accelerate joins Ray Train's gloo group only when told the run is on CPU: the adapter tells
    # it so exactly where no GPU is visible (on a GPU host the Trainer takes the GPU, under nccl)
    assert args.use_cpu is not torch.cuda.is_available()
    with monkeypatch.context() as hidden:
        hidden.setattr(torch.cuda, "is_available", lambda: False)  # the test hides any GPU
        assert hf.training_arguments(config, tiny_gpt2(), output_dir=str(tmp_path)).use_cpu
    assert hf.training_arguments(trial_config("training.grad_clip=0.5"),
                                 tiny_gpt2()).max_grad_norm == 0.5


def test_what_would_change_the_plan_is_refused_by_name() -> None:
    config = trial_config()
    with pytest.raises(AdapterConfigError, match=r"training_arguments max_steps=5: must not be "
                                                 r"given, the trial's plan sets it \(128\)"):
        hf.training_arguments(config, tiny_gpt2(), max_steps=5)
    with pytest.raises(AdapterConfigError, match=r"physical_workers=1: must equal world_size "
                                                 r"\(2\) under the Hugging Face Trainer adapter"):
        hf.training_arguments({**config, "world_size": 2, "physical_workers": 1}, tiny_gpt2())


def test_a_warmup_override_is_refused_with_where_the_plans_warmup_lives() -> None:
    # the plan's warmup is inside its schedule (16 updates of warmuplr), not TrainingArguments'
    # warmup_steps (0, off): the refusal says so and names the sweep's scheduler block (#34)
    config = trial_config()
    assert config["scheduler"] == {"type": "warmuplr", "warmup_steps": 16}
    for key, value in (("warmup_steps", 40), ("lr_scheduler_type", "linear")):
        with pytest.raises(AdapterConfigError) as refused:
            hf.training_arguments(config, tiny_gpt2(), **{key: value})
        message = str(refused.value)
        assert message.startswith(f"training_arguments {key}={value!r}: must not be given")
        assert "the trial's plan sets it" not in message
        assert "the sweep's `scheduler` block" in message
        assert "{'type': 'warmuplr', 'warmup_steps': 16}" in message
        assert "hf.optimizers(model, config)" in message
    with pytest.raises(AdapterConfigError, match=r"seed=3: must not be given, the trial's plan "
                                                 r"sets it \(0\) from the sweep's seed axis"):
        hf.training_arguments(config, tiny_gpt2(), seed=3)


def test_a_trainer_outside_the_trials_process_group_is_refused(tmp_path: Path) -> None:
    # the ws2 trial's config in one process: the Trainer finds 1 rank, so each worker would
    # train alone on half the planned global batch
    config = trial_config("training.max_updates=4", world_size=2)
    model = example.GPT2LMHeadModel(example.GPT2Config(
        vocab_size=len(example.VOCAB), n_positions=example.BLOCK, n_embd=16, n_layer=1, n_head=2,
        bos_token_id=None, eos_token_id=None))
    trainer = Trainer(model=model, args=hf.training_arguments(config, model, output_dir=str(tmp_path)),
                      train_dataset=example.CharBlocks(64, data_seed=1),
                      eval_dataset=example.CharBlocks(8, data_seed=2),
                      optimizers=hf.optimizers(model, config),
                      callbacks=[hf.ReportCallback(config, send=loop_helpers.build_report)])
    with pytest.raises(AdapterConfigError, match=r"the Hugging Face Trainer runs on 1 rank\(s\): "
                                                 r"must be world_size \(2\)"):
        trainer.train()


class _OptimizerLr(TrainerCallback):
    """The lr the optimizer holds right after each of its steps (the Trainer steps the
    scheduler only after this event): what that update ran with."""

    def __init__(self) -> None:
        self.lrs: list[float] = []

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.lrs.append(kwargs["optimizer"].param_groups[0]["lr"])


@pytest.mark.parametrize("accum", [1, 2])
def test_a_plain_trainer_runs_the_planned_lr_and_reports_each_eval(tmp_path: Path,
                                                                  accum: int) -> None:
    """With accum_grad = 2 the Trainer accumulates two micro-batches per update (WeNet's
    accum_grad: the global batch doubles): the planned lr at each of the same updates, and the
    epochs and samples of the doubled batch."""
    total = 40 if accum == 1 else 20  # evals at 16, 32 and the last; at 8, 16 and the last
    config = trial_config(f"training.max_updates={total}", f"training.accum_grad={accum}")
    model = example.GPT2LMHeadModel(example.GPT2Config(
        vocab_size=len(example.VOCAB), n_positions=example.BLOCK, n_embd=16, n_layer=1, n_head=2,
        bos_token_id=None, eos_token_id=None))
    report, seen = hf.ReportCallback(config, send=AsRayTrain(tmp_path)), _OptimizerLr()
    trainer = Trainer(model=model,
                      args=hf.training_arguments(config, model, output_dir=str(tmp_path / "out")),
                      train_dataset=example.CharBlocks(config["train_size"], data_seed=1),
                      eval_dataset=example.CharBlocks(32, data_seed=2),
                      optimizers=hf.optimizers(model, config), callbacks=[report, seen])
    assert (trainer.args.gradient_accumulation_steps,
            trainer.args.per_device_train_batch_size) == (accum, 8)
    assert config["global_batch"] == 8 * accum
    trainer.train()
    planned = loop_helpers.planned_schedule(config)
    assert trainer.state.global_step == total
    assert seen.lrs == pytest.approx([planned.lr(k) for k in range(1, total + 1)], rel=1e-12)
    assert planned.lr(1) < planned.lr(16) == pytest.approx(0.003)  # warmup 16, then decay
    evals = [*range(config["eval_every"], total, config["eval_every"]), total]
    assert evals == ([16, 32, 40] if accum == 1 else [8, 16, 20])  # every quarter epoch
    assert [r["update"] for r in report.reports] == evals
    for r in report.reports:
        k = int(r["update"])
        assert r["lr"] == pytest.approx(planned.lr(k), rel=1e-12)
        assert (r["epoch"], r["samples_seen"]) == (k / (64 / accum), k * 8.0 * accum)
        assert 0 < r["dev_loss"] < 4
    assert report.reports[-1]["dev_loss"] < report.reports[0]["dev_loss"]
    # the Trainer's own logged loss at each evaluation: its mean since the previous one (a
    # character model's cross-entropy starts near ln 23 = 3.1; a sum over two micro-batches would not)
    logged = {h["step"]: h["loss"] for h in trainer.state.log_history if "loss" in h}
    assert [r["train_loss"] for r in report.reports] == [logged[k] for k in evals]
    assert all(0 < r["train_loss"] < 4 for r in report.reports)
    assert report.reports[-1]["train_loss"] < report.reports[0]["train_loss"]


def _trainer(config: dict[str, Any], out: Path, report: hf.ReportCallback) -> Trainer:
    model = example.GPT2LMHeadModel(example.GPT2Config(
        vocab_size=len(example.VOCAB), n_positions=example.BLOCK, n_embd=16, n_layer=1, n_head=2,
        bos_token_id=None, eos_token_id=None))
    return Trainer(model=model, args=hf.training_arguments(config, model, output_dir=str(out)),
                   train_dataset=example.CharBlocks(config["train_size"], data_seed=1),
                   eval_dataset=example.CharBlocks(32, data_seed=2),
                   optimizers=hf.optimizers(model, config), callbacks=[report])


def test_each_report_carries_its_checkpoint_and_a_resumed_trainer_goes_on_as_before(
        tmp_path: Path) -> None:
    """Every evaluation's report carries the Trainer's checkpoint of that step; a Trainer
    resumed from the one of update 16 (as hf.last_checkpoint gives it after a restart) makes
    the uninterrupted run's later reports: model, optimizer, the planned schedule's count,
    RNG and data position restored."""
    config = trial_config("training.max_updates=40")  # evals (and saves) at 16, 32 and 40
    whole = hf.ReportCallback(config, send=AsRayTrain(tmp_path))
    _trainer(config, tmp_path / "whole", whole).train()
    saved = whole.send.saved  # type: ignore[attr-defined]
    assert sorted(saved) == [16, 32, 40] and (saved[16] / "scheduler.pt").exists()

    resumed = hf.ReportCallback(config, send=AsRayTrain(tmp_path / "r"))
    (tmp_path / "r").mkdir()
    _trainer(config, tmp_path / "resumed", resumed).train(resume_from_checkpoint=str(saved[16]))
    assert [r["update"] for r in resumed.reports] == [32, 40]
    for after, before in zip(resumed.reports, whole.reports[1:], strict=True):
        assert after["lr"] == before["lr"]
        assert after["dev_loss"] == pytest.approx(before["dev_loss"], rel=1e-6)
        # the mean over the same updates since the previous evaluation
        assert after["train_loss"] == pytest.approx(before["train_loss"], rel=1e-6)


def test_saves_between_reports_are_refused_by_name(tmp_path: Path) -> None:
    config = trial_config()  # eval_every 16
    with pytest.raises(AdapterConfigError, match=r"save_steps=24: must be a multiple of the "
                                                 r"trial's eval_every \(16\)"):
        hf.training_arguments(config, tiny_gpt2(), output_dir=str(tmp_path), save_steps=24)
    assert hf.training_arguments(config, tiny_gpt2(), output_dir=str(tmp_path),
                                 save_steps=32).save_steps == 32
    assert hf.training_arguments(config, tiny_gpt2(), output_dir=str(tmp_path),
                                 save_strategy="no").save_strategy == "no"


def test_biases_and_norms_get_no_weight_decay_as_in_hfs_trainer() -> None:
    model = tiny_gpt2()
    config = {**trial_config(), "optimizer": {"type": "adamw", "lr": 0.003, "weight_decay": 0.1}}
    optimizer, _ = hf.optimizers(model, config)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed, exempt = ({names[id(p)] for p in g["params"]} for g in optimizer.param_groups)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.1, 0.0]
    # HF's names, less lm_head.weight: tied to the embedding, named_parameters gives it once
    hf_names = set(Trainer.get_decay_parameter_names(None, model))  # type: ignore[arg-type]
    assert decayed == hf_names & set(names.values())
    assert decayed | exempt == set(names.values()) and not decayed & exempt
    assert "transformer.h.0.attn.c_attn.weight" in decayed
    assert {"transformer.h.0.ln_1.weight", "transformer.h.0.attn.c_attn.bias"} <= exempt


def _gpt2_trainer(config: dict[str, Any], out: Path, callbacks: list[Any]) -> Trainer:
    model = tiny_gpt2()
    return Trainer(model=model, args=hf.training_arguments(config, model, output_dir=str(out)),
                   train_dataset=example.CharBlocks(config["train_size"], data_seed=1),
                   eval_dataset=example.CharBlocks(8, data_seed=2),
                   optimizers=hf.optimizers(model, config), callbacks=callbacks)


def test_a_trainer_without_the_report_callback_fails_its_trial_at_update_1(tmp_path: Path) -> None:
    # in a trial (loop_worker's running), the adapter's scheduler finds at its first step that
    # no hf.ReportCallback saw training begin: the trial fails then, naming the callback, with
    # the FAIL marker its controller raises (not after training to the end, #34 item 3b)
    config = trial_config("training.max_updates=40")
    sent: list[dict[str, Any]] = []
    with user_loop.running("pkg.loops:train", send=sent.append) as run:
        trainer = _gpt2_trainer(config, tmp_path, [])
        with pytest.raises(user_loop.LoopReportError,
                           match=r"without its report callback \(found at update 1, before any "
                                 r"evaluation\): pass callbacks=\[hf.ReportCallback\(config\)\] "
                                 r"to the Trainer"):
            trainer.train()
    assert trainer.state.global_step <= 1 and run.adapter == "hf"
    assert [m[user_loop.MARKER_KEY] for m in sent] == [user_loop.FAIL]
    assert "hf.ReportCallback(config)" in sent[0][user_loop.REASON_KEY]
    # with the callback the same trial trains on; outside a trial nothing is checked
    short = trial_config("training.max_updates=2")
    with user_loop.running("pkg.loops:train", send=sent.append):
        _gpt2_trainer(short, tmp_path / "with", [hf.ReportCallback(short, send=AsRayTrain(tmp_path))]).train()
    _gpt2_trainer(short, tmp_path / "outside", []).train()
    assert len(sent) == 1
