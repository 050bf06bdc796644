"""The WeNet and DeepSpeed recipe readers take a user's COMPLETE training file verbatim.

From a real file (model, encoder, dataset, ZeRO, fp16, ... all present) they pick exactly the
optimizer, the scheduler, accum_grad, grad_clip, the per-worker batch and the epochs; everything
else is listed as ignored (and `plan -v` shows that list); the sweep's own values override the
recipe's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli import main
from orchestrator.plan import make_plan
from orchestrator.recipes import read_recipe
from orchestrator.sweep import load_sweep

# WeNet's AISHELL-1 u2++ conformer train.yaml (wenet/examples/aishell/s0/conf), complete.
WENET_COMPLETE = """\
# network architecture
encoder: conformer
encoder_conf:
    output_size: 256
    attention_heads: 4
    linear_units: 2048
    num_blocks: 12
    dropout_rate: 0.1
    positional_dropout_rate: 0.1
    attention_dropout_rate: 0.1
    input_layer: conv2d
    normalize_before: true
    cnn_module_kernel: 8
    use_cnn_module: true
    activation_type: swish
    pos_enc_layer_type: rel_pos
    selfattention_layer_type: rel_selfattn
    causal: true
    use_dynamic_chunk: true
    cnn_module_norm: layer_norm
    use_dynamic_left_chunk: false

decoder: bitransformer
decoder_conf:
    attention_heads: 4
    linear_units: 2048
    num_blocks: 3
    r_num_blocks: 3
    dropout_rate: 0.1
    positional_dropout_rate: 0.1
    self_attention_dropout_rate: 0.1
    src_attention_dropout_rate: 0.1

tokenizer: char
tokenizer_conf:
  symbol_table_path: 'data/dict/lang_char.txt'
  split_with_space: false
  bpe_path: null
  non_lang_syms_path: null
  is_multilingual: false
  num_languages: 1
  special_tokens:
    <blank>: 0
    <unk>: 1
    <sos>: 2
    <eos>: 2

ctc: ctc
ctc_conf:
  ctc_blank_id: 0

cmvn: global_cmvn
cmvn_conf:
  cmvn_file: 'data/train/global_cmvn'
  is_json_cmvn: true

model: asr_model
model_conf:
    ctc_weight: 0.3
    lsm_weight: 0.1
    length_normalized_loss: false
    reverse_weight: 0.3

dataset: asr
dataset_conf:
    filter_conf:
        max_length: 40960
        min_length: 0
        token_max_length: 200
        token_min_length: 1
    resample_conf:
        resample_rate: 16000
    speed_perturb: true
    fbank_conf:
        num_mel_bins: 80
        frame_shift: 10
        frame_length: 25
        dither: 1.0
    spec_aug: true
    spec_aug_conf:
        num_t_mask: 2
        num_f_mask: 2
        max_t: 50
        max_f: 10
    spec_sub: true
    spec_sub_conf:
        num_t_sub: 3
        max_t: 30
    shuffle: true
    shuffle_conf:
        shuffle_size: 1500
    sort: true
    sort_conf:
        sort_size: 500
    batch_conf:
        batch_type: 'static'
        batch_size: 16

grad_clip: 5
accum_grad: 1
max_epoch: 360
log_interval: 100

optim: adam
optim_conf:
    lr: 0.001
scheduler: warmuplr
scheduler_conf:
    warmup_steps: 25000
"""
WENET_USED = {
    "optimizer": {"type": "adam", "lr": 0.001},
    "scheduler": {"type": "warmuplr", "warmup_steps": 25000},
    "training": {"accum_grad": 1, "grad_clip": 5, "epochs": 360, "per_worker_batch": 16},
}
WENET_IGNORED = {
    "cmvn", "cmvn_conf", "ctc", "ctc_conf", "dataset", "decoder", "decoder_conf", "encoder",
    "encoder_conf", "log_interval", "model", "model_conf", "tokenizer", "tokenizer_conf",
    "dataset_conf.fbank_conf", "dataset_conf.filter_conf", "dataset_conf.resample_conf",
    "dataset_conf.shuffle", "dataset_conf.shuffle_conf", "dataset_conf.sort",
    "dataset_conf.sort_conf", "dataset_conf.spec_aug", "dataset_conf.spec_aug_conf",
    "dataset_conf.spec_sub", "dataset_conf.spec_sub_conf", "dataset_conf.speed_perturb",
}

# A DeepSpeed config as used for GPT-style pre-training, complete: ZeRO-2 with CPU offload,
# fp16 with dynamic loss scaling, activation checkpointing, monitors.
DEEPSPEED_COMPLETE: dict[str, Any] = {
    "train_batch_size": 256,
    "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 4,
    "gradient_clipping": 1.0,
    "steps_per_print": 100,
    "wall_clock_breakdown": False,
    "prescale_gradients": False,
    "optimizer": {
        "type": "AdamW",
        "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1,
                   "torch_adam": True, "adam_w_mode": True},
    },
    "scheduler": {
        "type": "WarmupDecayLR",
        "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-4, "warmup_num_steps": 2000,
                   "total_num_steps": 100000, "warmup_type": "linear"},
    },
    "fp16": {"enabled": True, "loss_scale": 0, "loss_scale_window": 1000,
             "initial_scale_power": 16, "hysteresis": 2, "min_loss_scale": 1},
    "bf16": {"enabled": False},
    "zero_optimization": {
        "stage": 2, "allgather_partitions": True, "allgather_bucket_size": 5e8,
        "overlap_comm": True, "reduce_scatter": True, "reduce_bucket_size": 5e8,
        "contiguous_gradients": True, "offload_optimizer": {"device": "cpu", "pin_memory": True},
    },
    "activation_checkpointing": {"partition_activations": True, "contiguous_memory_optimization":
                                 False, "cpu_checkpointing": False},
    "flops_profiler": {"enabled": False, "profile_step": 1},
    "tensorboard": {"enabled": True, "output_path": "logs/", "job_name": "gpt"},
    "comms_logger": {"enabled": False},
}
DEEPSPEED_USED = {
    "optimizer": {"type": "adamw", "lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8,
                  "weight_decay": 0.1},
    "scheduler": {"type": "WarmupDecayLR", "warmup_min_lr": 0, "warmup_max_lr": 3e-4,
                  "warmup_num_steps": 2000, "total_num_steps": 100000, "warmup_type": "linear"},
    "training": {"per_worker_batch": 8, "accum_grad": 4, "grad_clip": 1.0},
}
DEEPSPEED_IGNORED = {
    "train_batch_size", "steps_per_print", "wall_clock_breakdown", "prescale_gradients", "fp16",
    "bf16", "zero_optimization", "activation_checkpointing", "flops_profiler", "tensorboard",
    "comms_logger", "optimizer.params.torch_adam", "optimizer.params.adam_w_mode",
}


@pytest.fixture
def wenet_file(tmp_path: Path) -> Path:
    path = tmp_path / "train_u2++_conformer.yaml"
    path.write_text(WENET_COMPLETE)
    return path


@pytest.fixture
def deepspeed_file(tmp_path: Path) -> Path:
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(DEEPSPEED_COMPLETE, indent=2))
    return path


def sweep_file(directory: Path, recipe: Path, body: str = "") -> Path:
    path = directory / "study.yaml"
    path.write_text(f"name: recipe-study\nworkload: {{name: mlp_regression}}\nrecipe: {recipe.name}\n"
                    f"target: {{metric: dev_loss, value: 0.1}}\n{body}")
    return path


def cli(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


# --- the readers ------------------------------------------------------------------------------


def test_wenet_reader_takes_exactly_the_training_settings(wenet_file: Path) -> None:
    recipe = read_recipe(wenet_file)
    assert recipe.kind == "wenet"
    assert recipe.settings == WENET_USED
    assert set(recipe.ignored) == WENET_IGNORED
    assert len(recipe.ignored) == len(WENET_IGNORED)
    # every value says where in the user's file it came from
    assert recipe.origins == {
        "optimizer.type": "optim", "optimizer.lr": "optim_conf.lr",
        "scheduler.type": "scheduler", "scheduler.warmup_steps": "scheduler_conf.warmup_steps",
        "training.accum_grad": "accum_grad", "training.grad_clip": "grad_clip",
        "training.epochs": "max_epoch",
        "training.per_worker_batch": "dataset_conf.batch_conf.batch_size",
    }


def test_wenet_dynamic_batches_are_ignored_with_a_reason(tmp_path: Path) -> None:
    path = tmp_path / "dynamic.yaml"
    path.write_text(WENET_COMPLETE.replace("batch_type: 'static'\n        batch_size: 16",
                                           "batch_type: 'dynamic'\n        max_frames_in_batch: 12000"))
    recipe = read_recipe(path)
    assert "per_worker_batch" not in recipe.settings["training"]
    (why,) = [i for i in recipe.ignored if i.startswith("dataset_conf.batch_conf")]
    assert "'dynamic'" in why and "training.per_worker_batch" in why


def test_deepspeed_reader_takes_exactly_the_training_settings(deepspeed_file: Path) -> None:
    recipe = read_recipe(deepspeed_file)
    assert recipe.kind == "deepspeed"
    assert recipe.settings == DEEPSPEED_USED
    assert set(recipe.ignored) == DEEPSPEED_IGNORED
    assert len(recipe.ignored) == len(DEEPSPEED_IGNORED)
    assert recipe.origins["scheduler.warmup_num_steps"] == "scheduler.params.warmup_num_steps"
    assert recipe.origins["training.per_worker_batch"] == "train_micro_batch_size_per_gpu"
    assert "epochs" not in recipe.settings["training"]  # DeepSpeed has no epoch count


# --- in a sweep: the recipe's values are the base, the sweep's override them -----------------


def test_wenet_recipe_in_a_sweep_is_overridden_by_the_sweep(
        tmp_path: Path, wenet_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = sweep_file(tmp_path, wenet_file,
                      "optimizer: {lr: 0.004}\nscheduler: {warmup_steps: 300}\n"
                      "training: {accum_grad: 2, epochs: 3}\naxes: {world_size: [2, 4]}\n")
    sweep = load_sweep(path)
    base = sweep.base
    assert base.optimizer == {"type": "adam", "lr": 0.004}
    assert base.scheduler == {"type": "warmuplr", "warmup_steps": 300}
    training = {k: base.training[k] for k in ("per_worker_batch", "grad_clip", "accum_grad", "epochs")}
    assert training == {"per_worker_batch": 16, "grad_clip": 5, "accum_grad": 2, "epochs": 3}
    assert "optim" in base.origins["optimizer.type"] and wenet_file.name in base.origins[
        "optimizer.type"]
    assert base.origins["training.per_worker_batch"].endswith("dataset_conf.batch_conf.batch_size")
    assert base.origins["optimizer.lr"] == base.origins["scheduler.warmup_steps"] == "sweep"
    assert base.origins["training.epochs"] == "sweep"

    rows = make_plan(sweep).rows
    assert [r.world_size for r in rows] == [2, 4]
    for row in rows:
        assert (row.warmup_steps, row.accum_grad, row.per_worker_batch) == (300, 2, 16)
        assert row.trial.grad_clip == 5
        assert row.base_lr == 0.004
        assert row.epochs == pytest.approx(3, rel=0.05)


def test_axes_override_the_recipe(tmp_path: Path, wenet_file: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = sweep_file(tmp_path, wenet_file, "training: {epochs: 1}\naxes:\n  world_size: [2]\n"
                      "  scheduler.warmup_steps: [100, 200]\n  optimizer.lr: [0.01]\n")
    rows = make_plan(load_sweep(path)).rows
    assert [(r.warmup_steps, r.base_lr) for r in rows] == [(100, 0.01), (200, 0.01)]


def test_a_different_type_in_the_sweep_drops_the_recipes_params(
        tmp_path: Path, deepspeed_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """AdamW's betas mean nothing to SGD, nor WarmupDecayLR's params to a gradual warmup."""
    monkeypatch.chdir(tmp_path)
    path = sweep_file(tmp_path, deepspeed_file,
                      "optimizer: {type: sgd, lr: 0.1, momentum: 0.9}\n"
                      "scheduler: {type: gradual_warmup, warmup_steps: 50}\n"
                      "training: {epochs: 1}\naxes: {world_size: [2]}\n")
    sweep = load_sweep(path)
    assert sweep.base.optimizer == {"type": "sgd", "lr": 0.1, "momentum": 0.9}
    assert sweep.base.scheduler == {"type": "gradual_warmup", "warmup_steps": 50}
    assert sweep.base.training["per_worker_batch"] == 8  # still the recipe's
    assert sweep.base.training["accum_grad"] == 4
    (row,) = make_plan(sweep).rows
    assert row.scheduler == "gradual_warmup" and row.warmup_steps == 50


def test_a_deepspeed_recipe_plans(tmp_path: Path, deepspeed_file: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = sweep_file(tmp_path, deepspeed_file, "training: {epochs: 1}\naxes:\n"
                      "  world_size: [2, 4]\n  warmup_rule: [scaled]\n  scaling_rule: [linear]\n")
    rows = make_plan(load_sweep(path)).rows
    assert [r.scheduler for r in rows] == ["ds_warmup_decay", "ds_warmup_decay"]
    assert [r.global_batch for r in rows] == [2 * 8 * 4, 4 * 8 * 4]
    # scaled: 2000 updates at the reference (ws 2) become 1000 at twice the batch
    assert [r.warmup_steps for r in rows] == [2000, 1000]
    # linear: warmup_max_lr (an absolute lr of the schedule) doubles with the batch
    assert rows[1].peak_lr == pytest.approx(2 * rows[0].peak_lr, rel=1e-12)
    assert rows[0].peak_lr == pytest.approx(3e-4, rel=1e-12)


# --- plan -v lists what was ignored ---------------------------------------------------------


@pytest.mark.parametrize("which", ["wenet", "deepspeed"])
def test_plan_verbose_lists_the_ignored_sections(
        which: str, tmp_path: Path, wenet_file: Path, deepspeed_file: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    recipe, ignored = ((wenet_file, WENET_IGNORED) if which == "wenet"
                       else (deepspeed_file, DEEPSPEED_IGNORED))
    path = sweep_file(tmp_path, recipe, "training: {epochs: 1}\naxes: {world_size: [2]}\n")

    quiet = cli(["plan", str(path)], capsys)
    assert f"{len(ignored)} sections not used by scalesweep (list them with -v)" in quiet

    verbose = cli(["plan", str(path), "-v"], capsys)
    tail = verbose.split("ignored sections:\n", 1)[1]
    assert f"({which}); ignored sections:" in verbose
    assert {line.strip() for line in tail.splitlines()} == ignored
    for used in ("optim", "optim_conf", "scheduler", "scheduler_conf", "accum_grad", "grad_clip",
                 "max_epoch", "optimizer", "train_micro_batch_size_per_gpu",
                 "gradient_accumulation_steps", "gradient_clipping"):
        assert f"  {used}\n" not in tail + "\n"


# --- our own form -------------------------------------------------------------------------------


def test_own_form_recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    own = tmp_path / "own.yaml"
    own.write_text("optimizer: {type: adam, lr: 0.003}\n"
                   "scheduler: {type: warmuplr, warmup_steps: 123}\n"
                   "training: {per_worker_batch: 8}\n")
    recipe = read_recipe(own)
    path = sweep_file(tmp_path, own, "optimizer: {lr: 0.003}\ntraining: {epochs: 1}\n"
                      "axes: {world_size: [2]}\n")
    (row,) = make_plan(load_sweep(path)).rows
    assert (row.warmup_steps, row.per_worker_batch) == (123, 8)
    assert recipe.kind == "scalesweep"
    assert recipe.settings == {"optimizer": {"type": "adam", "lr": 0.003},
                               "scheduler": {"type": "warmuplr", "warmup_steps": 123},
                               "training": {"per_worker_batch": 8}}
