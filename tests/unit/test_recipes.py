"""The WeNet and DeepSpeed recipe readers take a user's COMPLETE training file verbatim.

From a real file (model, encoder, dataset, ZeRO, fp16, ... all present) they pick exactly the
optimizer, the scheduler, accum_grad, grad_clip, the per-worker batch and the epochs; everything
else is listed as ignored (and `plan -v` shows that list); the sweep's own values override the
recipe's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scalesweep.orchestrator.cli import main
from scalesweep.orchestrator.plan.rows import make_plan
from scalesweep.orchestrator.spec.errors import InputError
from scalesweep.orchestrator.spec.load import load_sweep
from scalesweep.orchestrator.spec.recipes import read_recipe
from tests.support.helpers import cli

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
    "steps_per_print", "wall_clock_breakdown", "prescale_gradients", "fp16",
    "bf16", "zero_optimization", "activation_checkpointing", "flops_profiler", "tensorboard",
    "comms_logger", "optimizer.params.torch_adam",
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
    """train_batch_size 256 = micro 8 * accumulation 4 * 8 GPUs: without a reference: in the
    sweep the reference is the world size the config was written for, 8, and its batch 256."""
    monkeypatch.chdir(tmp_path)
    path = sweep_file(tmp_path, deepspeed_file, "training: {epochs: 1}\naxes:\n"
                      "  world_size: [2, 4]\n  warmup_rule: [scaled]\n  scaling_rule: [linear]\n")
    sweep = load_sweep(path)
    assert sweep.reference_world_size == 8
    rows = make_plan(sweep).rows
    assert [r.scheduler for r in rows] == ["ds_warmup_decay", "ds_warmup_decay"]
    assert [r.global_batch for r in rows] == [2 * 8 * 4, 4 * 8 * 4]
    assert {r.reference_global_batch for r in rows} == {256}
    # scaled: 2000 updates at the reference batch 256 become 8000 at 64 and 4000 at 128
    assert [r.warmup_steps for r in rows] == [8000, 4000]
    # linear: warmup_max_lr (an absolute lr of the schedule) follows the batch
    assert rows[0].peak_lr == pytest.approx(3e-4 / 4, rel=1e-12)
    assert rows[1].peak_lr == pytest.approx(3e-4 / 2, rel=1e-12)


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


# --- real configs from the frameworks' own repositories (tests/data/README.md) ----------------

DATA = Path(__file__).resolve().parents[1] / "data"


def data_sweep(tmp_path: Path, recipe: str, body: str,
               target: str = "{metric: dev_loss, relative_to_baseline: 0.1}") -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(f"name: real-config\nworkload: {{name: mlp_regression, options: {{train_size: "
                    f"4096}}}}\nrecipe: {DATA / recipe}\ntarget: {target}\n{body}")
    return path


@pytest.mark.parametrize(("recipe", "ref_ws", "expect"), [
    # train_batch_size 8 alone: accumulation 1, micro batch 8 // world size
    ("deepspeed_torch_compile_z2.json", 2, (8, 4, 1)),
    ("deepspeed_torch_compile_z2.json", 4, (8, 2, 1)),
    # train_batch_size 24 with micro 3: accumulation 24 // 3 // world size
    ("deepspeed_bing_bert_squad_bsz24_fp32.json", 2, (24, 3, 4)),
    # micro 8 with accumulation 3: train_batch_size = 8 * 3 * world size
    ("deepspeed_megatron_gpt2_bs8_gas3.json", 4, (96, 8, 3)),
    # train_batch_size 4 with accumulation 1: micro 4 // world size // 1
    ("deepspeed_megatron_gpt2_scheduler.json", 2, (4, 2, 1)),
])
def test_deepspeed_batch_is_resolved_as_deepspeed_does(
        recipe: str, ref_ws: int, expect: tuple[int, int, int], tmp_path: Path) -> None:
    """Issue #13: any two of the triple give the third at the reference world size (DeepSpeed's
    world size); the reference global batch is train_batch_size."""
    if recipe.startswith("deepspeed_bing"):  # its bias_correction: false is refused (below)
        text = (DATA / recipe).read_text().replace('"bias_correction": false', '"amsgrad": false')
        (tmp_path / recipe).write_text(text)
        path = data_sweep(tmp_path, recipe, "")
        path.write_text(path.read_text().replace(str(DATA / recipe), str(tmp_path / recipe)))
        body_path = path
    else:
        body_path = data_sweep(tmp_path, recipe, "")
    body_path.write_text(body_path.read_text() + f"reference: {{world_size: {ref_ws}}}\n"
                         f"training: {{epochs: 1}}\naxes: {{world_size: [{ref_ws}, {2 * ref_ws}], "
                         "scaling_rule: [none, linear]}\n")
    sweep = load_sweep(body_path)
    tb, mb, ga = expect
    assert sweep.deepspeed_batch is not None
    assert (sweep.deepspeed_batch.train_batch, sweep.deepspeed_batch.micro,
            sweep.deepspeed_batch.accum) == expect
    rows = make_plan(sweep).rows
    assert [(r.per_worker_batch, r.accum_grad) for r in rows] == [(mb, ga)] * len(rows)
    assert {r.reference_global_batch for r in rows} == {tb}
    assert rows[0].global_batch == tb  # the baseline at the reference runs DeepSpeed's batch
    linear = next(r for r in rows if r.scaling_rule == "linear")
    assert linear.global_batch == 2 * tb
    assert linear.peak_lr == pytest.approx(2 * rows[0].peak_lr, rel=1e-12)


def test_issue_example_train_batch_512_micro_32_at_4_gpus(tmp_path: Path) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_batch_size": 512, "train_micro_batch_size_per_gpu": 32,
                              "optimizer": {"type": "Adam", "params": {"lr": 4e-4}}}))
    path = tmp_path / "study.yaml"
    path.write_text(f"name: issue\nworkload: {{name: mlp_regression, options: {{train_size: 65536}}}}"
                    f"\nrecipe: {ds}\ntarget: {{metric: dev_loss, value: 0.1}}\n"
                    "reference: {world_size: 4}\ntraining: {epochs: 1}\naxes: {world_size: [4, 8]}\n")
    (ws4, ws8) = make_plan(load_sweep(path)).rows
    assert (ws4.global_batch, ws4.per_worker_batch, ws4.accum_grad) == (512, 32, 4)
    assert ws4.updates_per_epoch == 65536 // 512
    assert (ws8.global_batch, ws8.reference_global_batch) == (1024, 512)


def test_deepspeed_complete_triple_sets_the_reference_world_size(tmp_path: Path) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_batch_size": 512, "train_micro_batch_size_per_gpu": 32,
                              "gradient_accumulation_steps": 4}))
    path = sweep_file(tmp_path, ds, "training: {epochs: 1}\naxes: {world_size: [2, 4]}\n")
    sweep = load_sweep(path)
    assert sweep.reference_world_size == 4
    assert any("the world size" in n and "train_batch_size 512" in n for n in sweep.notes)


@pytest.mark.parametrize(("config", "ref", "expect"), [
    # 512 // 32 // 3 = 5, and 32 * 5 * 3 = 480 != 512: DeepSpeed's assertion
    ({"train_batch_size": 512, "train_micro_batch_size_per_gpu": 32}, "reference: {world_size: 3}\n",
     "512 != 32 * 5 * 3 = 480"),
    # all three, inconsistent at the sweep's reference world size
    ({"train_batch_size": 512, "train_micro_batch_size_per_gpu": 32,
      "gradient_accumulation_steps": 4}, "reference: {world_size: 2}\n", "512 != 32 * 4 * 2 = 256"),
    # all three, no reference: no world size gives this batch
    ({"train_batch_size": 500, "train_micro_batch_size_per_gpu": 32,
      "gradient_accumulation_steps": 4}, "", "not a whole multiple"),
    # micro batch of 0 derived: 8 // 16 // 1
    ({"train_batch_size": 8, "gradient_accumulation_steps": 16}, "reference: {world_size: 1}\n",
     "each >= 1"),
])
def test_inconsistent_deepspeed_batch_is_exit_2_naming_all_three(
        config: dict[str, Any], ref: str, expect: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps(config))
    path = sweep_file(tmp_path, ds, f"{ref}training: {{epochs: 1}}\naxes: {{world_size: [2, 4]}}\n")
    capsys.readouterr()
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert ("train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps = "
            in err), err
    assert expect in err


def test_deepspeed_auto_batch_is_refused(tmp_path: Path) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto"}))
    with pytest.raises(InputError, match="Hugging Face Trainer"):
        read_recipe(ds)


# --- DeepSpeed's optimizer ----------------------------------------------------------------------


@pytest.mark.parametrize(("opt", "expect"), [
    # "Adam" defaults to adam_w_mode true: AdamW, with FusedAdam's weight_decay 0 and lr 1e-3
    ({"type": "Adam", "params": {}}, {"type": "adamw", "lr": 1e-3, "weight_decay": 0.0}),
    ({"type": "adam", "params": {"lr": 0.1, "adam_w_mode": False}},
     {"type": "adam", "lr": 0.1, "weight_decay": 0.0}),
    # the name AdamW forces decoupled decay whatever adam_w_mode says
    ({"type": "AdamW", "params": {"lr": 0.1, "adam_w_mode": False, "weight_decay": 0.1}},
     {"type": "adamw", "lr": 0.1, "weight_decay": 0.1}),
    # torch_adam: true picks torch.optim.AdamW, whose weight_decay default is 0.01
    ({"type": "Adam", "params": {"lr": 0.1, "torch_adam": True}},
     {"type": "adamw", "lr": 0.1, "weight_decay": 0.01}),
    ({"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9, "foreach": True}},
     {"type": "sgd", "lr": 0.1, "momentum": 0.9}),
])
def test_deepspeed_optimizer_as_deepspeed_builds_it(opt: dict[str, Any], expect: dict[str, Any],
                                                   tmp_path: Path) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"optimizer": opt}))
    assert read_recipe(ds).settings["optimizer"] == expect


def test_real_config_adam_is_adamw(tmp_path: Path) -> None:
    recipe = read_recipe(DATA / "deepspeed_torch_compile_z2.json")
    assert recipe.settings["optimizer"] == {"type": "adamw", "lr": 0.001, "betas": [0.8, 0.999],
                                            "eps": 1e-8, "weight_decay": 3e-7}
    assert "adam_w_mode true (DeepSpeed's default)" in recipe.origins["optimizer.type"]


@pytest.mark.parametrize(("opt", "path", "expect"), [
    ({"type": "Adam", "params": {"bias_correction": False}}, "optimizer.params.bias_correction",
     "always corrects"),
    ({"type": "Adam", "params": {"maximize": True}}, "optimizer.maximize", "unknown adamw setting"),
    ({"type": "Adam", "params": {"max_grad_norm": 1.0}}, "optimizer.max_grad_norm", "unknown"),
    ({"type": "Adam", "params": {"adam_w_mode": "yes"}}, "optimizer.params.adam_w_mode",
     "true or false"),
    ({"type": "sgd", "params": {"lr": 0.1}}, "optimizer.type", "exact name"),
    ({"type": "SGD", "params": {"lr": 0.1, "maximize": True}}, "optimizer.maximize", "unknown"),
])
def test_deepspeed_optimizer_keys_that_change_the_maths_are_exit_2(
        opt: dict[str, Any], path: str, expect: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 8, "optimizer": opt}))
    study = sweep_file(tmp_path, ds, "training: {epochs: 1}\naxes: {world_size: [2]}\n")
    capsys.readouterr()
    assert main(["plan", str(study)]) == 2
    err = capsys.readouterr().err
    assert path in err and expect in err, err


def test_real_config_bias_correction_false_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"optimizer\.params\.bias_correction = False"):
        read_recipe(DATA / "deepspeed_bing_bert_squad_bsz24_fp32.json")


# --- values the originals accept ------------------------------------------------------------------


def test_last_batch_iteration_minus_one_is_accepted(tmp_path: Path) -> None:
    """A real config (PyTorch Lightning's DeepSpeed tests) carries the default explicitly."""
    recipe = read_recipe(DATA / "lightning_deepspeed_sgd_warmuplr.json")
    assert recipe.settings["scheduler"] == {"type": "WarmupLR", "warmup_min_lr": 0,
                                            "warmup_max_lr": 3e-5, "warmup_num_steps": 100}
    assert recipe.settings["optimizer"] == {"type": "sgd", "lr": 3e-5}
    assert any(i.startswith("scheduler.params.last_batch_iteration") for i in recipe.ignored)
    ds = tmp_path / "ds.json"
    ds.write_text((DATA / "lightning_deepspeed_sgd_warmuplr.json").read_text().replace(
        '"last_batch_iteration": -1', '"last_batch_iteration": 500'))
    with pytest.raises(InputError, match="last_batch_iteration = 500: only -1"):
        read_recipe(ds)


def test_integral_floats_count_updates(tmp_path: Path) -> None:
    text = (DATA / "wenet_aishell_train_conformer.yaml").read_text()
    assert "warmup_steps: 25000" in text
    wenet = tmp_path / "train.yaml"
    wenet.write_text(text.replace("warmup_steps: 25000", "warmup_steps: 25000.0")
                     .replace("accum_grad: 4", "accum_grad: 4.0"))
    recipe = read_recipe(wenet)
    assert recipe.settings["scheduler"] == {"type": "warmuplr", "warmup_steps": 25000}
    assert type(recipe.settings["scheduler"]["warmup_steps"]) is int
    assert recipe.settings["training"]["accum_grad"] == 4
    path = sweep_file(tmp_path, wenet, "training: {epochs: 1}\nscheduler: {warmup_steps: 300.0}\n"
                      "axes: {world_size: [2], scheduler.warmup_steps: [100.0, 200]}\n")
    rows = make_plan(load_sweep(path)).rows
    assert [r.warmup_steps for r in rows] == [100, 200]
    # a fraction is still not a count of updates
    path = sweep_file(tmp_path, wenet, "training: {epochs: 1}\nscheduler: {warmup_steps: 12.5}\n"
                      "axes: {world_size: [2]}\n")
    with pytest.raises(InputError, match=r"warmup_steps = 12\.5: must be an integer"):
        load_sweep(path)


def test_real_wenet_config_plans_as_wenet_runs_it(tmp_path: Path) -> None:
    recipe = read_recipe(DATA / "wenet_aishell_train_conformer.yaml")
    assert recipe.settings == {
        "optimizer": {"type": "adam", "lr": 0.002},
        "scheduler": {"type": "warmuplr", "warmup_steps": 25000},
        "training": {"accum_grad": 4, "grad_clip": 5, "epochs": 240, "per_worker_batch": 16},
    }
    path = data_sweep(tmp_path, "wenet_aishell_train_conformer.yaml",
                      "reference: {world_size: 4}\ntraining: {epochs: 1}\n"
                      "axes: {world_size: [4, 16], warmup_rule: [fixed, scaled]}\n")
    rows = make_plan(load_sweep(path)).rows
    assert {(r.world_size, r.warmup_steps) for r in rows} == {(4, 25000), (16, 25000), (16, 6250)}
    assert {r.reference_global_batch for r in rows} == {4 * 16 * 4}


# --- the plan shows where each value came from ---------------------------------------------------


def test_plan_shows_the_batch_optimizer_and_schedule_deepspeed_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = data_sweep(tmp_path, "deepspeed_torch_compile_z2.json",
                      "reference: {world_size: 2}\ntraining: {epochs: 1}\n"
                      "axes: {world_size: [2, 4]}\n")
    out = cli(["plan", str(path)], capsys)
    name = str(DATA / "deepspeed_torch_compile_z2.json")
    assert f"settings from recipe {name} (deepspeed), before the axes:" in out
    lines = {line.split("<-")[0].strip(): line.split("<-")[1].strip()
             for line in out.splitlines() if "<-" in line}
    assert lines["optimizer.type = 'adamw'"].endswith(
        "optimizer.type 'Adam' with adam_w_mode true (DeepSpeed's default)")
    assert lines["training.per_worker_batch = 4"].endswith(
        "train_micro_batch_size_per_gpu = train_batch_size 8 // world size 2")
    assert "DeepSpeed's default with train_batch_size alone" in lines["training.accum_grad = 1"]
    assert lines["reference global batch = 8"].endswith(f"{name}: train_batch_size")
    assert lines["scheduler.warmup_num_steps = 1000"].endswith("scheduler.params.warmup_num_steps")


# --- a relative target needs a baseline trial ---------------------------------------------------


@pytest.mark.parametrize(("sets", "expect"), [
    ("baseline: {world_size: -3, warmup_rule: fixed, scaling_rule: none}\n",
     "baseline.world_size = -3: must be a world size"),
    ("baseline: {world_size: 0, warmup_rule: fixed, scaling_rule: none}\n",
     "baseline.world_size = 0: must be a world size"),
    ("baseline: {world_size: 'many', warmup_rule: fixed, scaling_rule: none}\n",
     "baseline.world_size = 'many': must be a world size"),
    ("baseline: {world_size: 16, warmup_rule: fixed, scaling_rule: none}\n",
     "baseline.world_size = 16: matches no trial of the plan (its world_size values: 2, 4)"),
    ("baseline: {world_size: 2, warmup_rule: fixed, scaling_rule: none}\n"
     "exclude: [{world_size: 2}]\n", "baseline.world_size = 2: matches no trial"),
    # the default baseline is the reference world size with fixed warmup and no lr scaling
    ("reference: {world_size: 8}\n", "reference.world_size = 8: matches no trial"),
    ("reference: {global_batch: 64}\n", "target.relative_to_baseline = 0.1: a relative target "
     "needs a baseline trial"),
])
def test_a_relative_target_without_a_baseline_trial_is_exit_2(
        sets: str, expect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "study.yaml"
    path.write_text("name: void\nworkload: {name: mlp_regression}\n"
                    "target: {metric: dev_loss, relative_to_baseline: 0.1}\n"
                    f"training: {{epochs: 1}}\n{sets}axes: {{world_size: [2, 4]}}\n")
    capsys.readouterr()
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert expect in err, err
    assert list(tmp_path.iterdir()) == [path]


def test_a_baseline_outside_the_axes_that_is_the_same_trial_is_found(tmp_path: Path) -> None:
    """warmup_rule fixed with axes of only scaled: at the reference world size it is one trial."""
    path = tmp_path / "study.yaml"
    path.write_text("name: alias\nworkload: {name: mlp_regression}\nreference: {world_size: 2}\n"
                    "target: {metric: dev_loss, relative_to_baseline: 0.1}\n"
                    "baseline: {world_size: 2, warmup_rule: fixed, scaling_rule: none}\n"
                    "scheduler: {type: gradual_warmup, warmup_steps: 20}\ntraining: {epochs: 1}\n"
                    "axes: {world_size: [2, 4], warmup_rule: [scaled]}\n")
    plan = make_plan(load_sweep(path))
    base = next(r for r in plan.rows if r.world_size == 2)
    assert all(plan.baseline_for(r) is base for r in plan.rows)


def test_an_absolute_target_keeps_a_missing_baseline_as_a_note(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "study.yaml"
    path.write_text("name: one\nworkload: {name: mlp_regression}\ntarget: {metric: dev_loss, "
                    "value: 0.1}\nbaseline: {world_size: 2}\ntraining: {epochs: 1}\n"
                    "axes: {world_size: [16]}\n")
    plan = make_plan(load_sweep(path))
    assert any("baseline world_size=2 is not among the axis values" in n for n in plan.notes)
