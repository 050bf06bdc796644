"""scalesweep.science.scaling: lr rules, warmup rules and their application to schedule specs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from scalesweep.science import scaling
from scalesweep.science import schedules as S
from tests.support.helpers import built_schedule, schedule_spec

ONECYCLE = {"type": "OneCycle", "cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3,
            "cycle_first_step_size": 1000, "decay_step_size": 1000, "decay_lr_rate": 0.001}


def _apply(spec: dict[str, Any], lr: float = 0.002, **kw: Any) -> tuple[dict[str, Any], float,
                                                                           list[str]]:
    args: dict[str, Any] = {"lr_factor": 1.0, "warmup_rule": "fixed", "global_batch": 16,
                            "reference_global_batch": 4, **kw}
    return scaling.apply(schedule_spec(spec), lr, **args)


# --- invalid arguments --------------------------------------------------------------------------


@pytest.mark.parametrize(("rule", "gb", "ref"), [
    ("cubic", 16, 4), ("Linear", 16, 4), ("linear", 0, 4), ("linear", 16, 0), ("sqrt", True, 4),
    ("none", 16.0, 4), ("none", 16, -4), (0.0, 16, 4), (-2.0, 16, 4), (math.inf, 16, 4),
    (True, 16, 4), (math.nan, 16, 4),
])
def test_lr_factor_rejects(rule: Any, gb: Any, ref: Any) -> None:
    with pytest.raises(ValueError, match="must be"):
        scaling.lr_factor(rule, gb, ref)


@pytest.mark.parametrize(("rule", "gb", "ref"), [
    ("double", 16, 4), (-1, 16, 4), (True, 16, 4), (2.5, 16, 4), ("scaled", 0, 4),
    ("fixed", 16, None),
])
def test_step_factor_rejects(rule: Any, gb: Any, ref: Any) -> None:
    with pytest.raises(ValueError, match="must be"):
        scaling.step_factor(rule, gb, ref)


@pytest.mark.parametrize("kw", [
    {"lr_factor": 0.0}, {"lr_factor": -2.0}, {"lr_factor": float("nan")}, {"lr_factor": True},
    {"warmup_rule": "double"}, {"warmup_rule": -5}, {"warmup_rule": False},
    {"global_batch": 0}, {"reference_global_batch": 2.0},
])
def test_apply_rejects_bad_arguments(kw: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(kw))):
        _apply({"type": "warmuplr"}, **kw)


@pytest.mark.parametrize("lr", [-0.1, float("inf"), None])
def test_apply_rejects_bad_optimizer_lr(lr: Any) -> None:
    with pytest.raises(ValueError, match="optimizer_lr"):
        _apply({"type": "warmuplr"}, lr)


def test_apply_takes_only_a_resolved_spec_and_names_the_judge() -> None:
    with pytest.raises(TypeError, match=r"scaling.apply takes a ScheduleSpec, but got "
                                        r"\{'type': 'warmuplr'\}: make it with schedules.resolve"):
        scaling.apply({"type": "warmuplr"}, 0.1, lr_factor=1.0,  # type: ignore[arg-type]
                      warmup_rule="fixed", global_batch=16, reference_global_batch=4)


def test_explicit_warmup_needs_a_warmup_param_and_a_valid_result() -> None:
    with pytest.raises(ValueError, match="constant has no warmup"):
        _apply({"type": "constant"}, warmup_rule=100)
    with pytest.raises(ValueError, match="warmup_num_steps"):  # DeepSpeed needs >= 1
        _apply({"type": "WarmupLR"}, warmup_rule=0)


# --- behaviour ------------------------------------------------------------------------------------


def test_lr_factor_values() -> None:
    assert scaling.SCALING_RULES == ("none", "linear", "sqrt", "sqrt_adam")
    assert [scaling.lr_factor(r, 512, 128) for r in scaling.SCALING_RULES] == [1.0, 4.0, 2.0, 2.0]
    assert scaling.lr_factor("sqrt", 64, 128) == math.sqrt(0.5)  # below the reference batch
    assert scaling.lr_factor("linear", 128, 128) == 1.0
    # an explicit factor (what `solve` found) is the factor whatever the batches
    assert scaling.lr_factor(3.2, 512, 128) == scaling.lr_factor(3.2, 64, 128) == 3.2
    assert [scaling.rule_label(r) for r in ("linear", 3.2, 2.0)] == ["linear", "x3.2", "x2"]


def test_a_sweep_with_an_explicit_lr_factor_plans_that_lr(tmp_path: Path) -> None:
    from scalesweep.orchestrator.plan.rows import make_plan
    from scalesweep.orchestrator.spec.errors import InputError
    from scalesweep.orchestrator.spec.load import load_sweep

    text = ("name: f\nworkload: {name: mlp_regression}\ntarget: {metric: dev_loss, value: 0.5}\n"
            "reference: {world_size: 1}\noptimizer: {type: adam, lr: 0.01}\n"
            "axes: {world_size: [4], scaling_rule: [linear, 2.5, 3]}\n")
    (tmp_path / "f.yaml").write_text(text)
    rows = make_plan(load_sweep(str(tmp_path / "f.yaml"), [])).rows
    assert [(r.name, r.lr) for r in rows] == [("ws4-warmup0-linear", pytest.approx(0.04)),
                                               ("ws4-warmup0-x2.5", pytest.approx(0.025)),
                                               ("ws4-warmup0-x3", pytest.approx(0.03))]
    (tmp_path / "f.yaml").write_text(text.replace("2.5, 3", "0, -1"))
    with pytest.raises(InputError, match=r"axes.scaling_rule.*an explicit lr factor must be a number > 0"):
        load_sweep(str(tmp_path / "f.yaml"), [])


@pytest.mark.parametrize(("optimizer", "gb", "ref"), [
    ({"type": "sgd", "lr": 0.1}, 512, 128), ({"lr": 0.1}, 512, 128),
    ({"type": "adam", "lr": 0.1}, 0, 128), ({"type": "adam", "lr": 0.1}, 512, 1.5),
])
def test_adam_hyperparameters_rejects_bad_arguments(optimizer: dict[str, Any], gb: Any,
                                                    ref: Any) -> None:
    with pytest.raises(ValueError, match="must be"):
        scaling.adam_hyperparameters(optimizer, gb, ref)


@pytest.mark.parametrize(("betas", "gb", "which"), [
    ((0.9, 0.999), 16 * 128, "beta1 = 1 - k(1 - beta1) = 1 - 16 * (1 - 0.9) = -0.6"),
    ((0.9, 0.999), 10 * 128, "beta1"),  # exactly 0 (2e-16 in floats) is no beta either
    ((0.5, 0.999), 2000 * 128, "beta1"),
    ((0.9999, 0.999), 1000 * 128, "beta2"),  # beta2 -> 0 at k = 1000, beta1 -> 0.9
])
def test_sqrt_adam_rejects_betas_that_reach_zero(betas: tuple[float, float], gb: int,
                                                 which: str) -> None:
    with pytest.raises(ValueError, match=r"sqrt_adam: .*<= 0.*k < 1 / \(1 - beta") as info:
        scaling.adam_hyperparameters({"type": "adam", "lr": 1e-3, "betas": betas}, gb, 128)
    assert which in str(info.value)


def test_sqrt_adam_hand_computed() -> None:
    """Malladi et al. 2022, k = B/B0: lr x sqrt(k), beta -> 1 - k(1 - beta), eps -> eps/sqrt(k)."""
    # torch's defaults (0.9, 0.999), 1e-8 at k = 4: (0.6, 0.996), 5e-9; the lr is lr_factor's
    out, notes = scaling.adam_hyperparameters({"type": "adam", "lr": 0.004}, 512, 128)
    assert out["type"] == "adam" and out["lr"] == 0.004
    assert out["betas"] == pytest.approx([0.6, 0.996], abs=1e-15)
    assert out["eps"] == pytest.approx(5e-9, rel=1e-15)
    assert scaling.lr_factor("sqrt_adam", 512, 128) == 2.0
    assert notes == ["optimizer.betas (0.9, 0.999) -> (0.6, 0.996) (1 - k(1 - beta); sqrt_adam, k = 4)",
                     "optimizer.eps 1e-08 -> 5e-09 (eps / sqrt(k); sqrt_adam, k = 4)"]
    # a WeNet-style Adam (0.9, 0.98), eps 1e-9, 4 -> 16 GPUs: (0.6, 0.92), 5e-10
    out, _ = scaling.adam_hyperparameters(
        {"type": "adamw", "lr": 0.002, "betas": [0.9, 0.98], "eps": 1e-9, "weight_decay": 0.01},
        16 * 16, 4 * 16)
    assert out["betas"] == pytest.approx([0.6, 0.92], abs=1e-15)
    assert out["eps"] == pytest.approx(5e-10, rel=1e-15)
    assert out["weight_decay"] == 0.01
    # below the reference (k = 1/2): betas closer to 1, eps larger
    out, _ = scaling.adam_hyperparameters({"type": "adam", "lr": 1e-3}, 64, 128)
    assert out["betas"] == pytest.approx([0.95, 0.9995], abs=1e-15)
    assert out["eps"] == pytest.approx(1e-8 * math.sqrt(2), rel=1e-15)
    # at the reference nothing changes (so the plan merges it with the other rules' trial)
    assert scaling.adam_hyperparameters({"type": "adam", "lr": 1e-3}, 128, 128) == (
        {"type": "adam", "lr": 1e-3}, [])


def test_step_factor_values() -> None:
    assert scaling.step_factor("fixed", 512, 128) == 1.0
    assert scaling.step_factor("scaled", 512, 128) == 0.25
    assert scaling.step_factor("scaled", 64, 128) == 2.0
    assert scaling.step_factor(6250, 512, 128) == 1.0  # an explicit value is no factor


def test_wenet_4_to_16_gpus() -> None:
    spec, lr, notes = _apply({"type": "warmuplr", "warmup_steps": 25000}, 0.002,
                             lr_factor=4.0, warmup_rule="scaled", scaling_rule="linear")
    assert spec == {"type": "warmuplr", "warmup_steps": 6250}
    assert lr == 0.008
    assert notes == ["optimizer.lr 0.002 -> 0.008 (linear x 4)",
                     "scheduler.warmup_steps 25000 -> 6250 (scaled x 4/16)"]
    # the default warmup (25000) is scaled the same way
    assert _apply({"type": "warmuplr"}, warmup_rule="scaled")[0]["warmup_steps"] == 6250


def test_scaled_warmup_keeps_the_curve_in_samples() -> None:
    """WeNet's lr depends on update/warmup only: at 4x the batch, update k of the scaled run
    sees exactly the lr of update 4k of the reference run."""
    ref = built_schedule({"type": "warmuplr", "warmup_steps": 400}, 0.002)
    spec, lr, _ = _apply({"type": "warmuplr", "warmup_steps": 400}, warmup_rule="scaled")
    big = built_schedule(spec, lr)
    for k in range(1, 1000):
        assert big.lr(k) == pytest.approx(ref.lr(4 * k), rel=1e-12)


def test_fixed_and_no_lr_change_leave_everything() -> None:
    spec, lr, notes = _apply({"type": "warmuplr", "warmup_steps": 100})
    assert (spec, lr, notes) == ({"type": "warmuplr", "warmup_steps": 100}, 0.002, [])


def test_scaled_rounding() -> None:
    def scaled(w: int, gb: int, ref: int) -> int:
        out = _apply({"type": "warmuplr", "warmup_steps": w}, warmup_rule="scaled",
                     global_batch=gb, reference_global_batch=ref)[0]
        return int(out["warmup_steps"])

    assert scaled(10, 4, 1) == 3  # 2.5 rounds half up
    assert scaled(9, 4, 1) == 2  # 2.25
    assert scaled(3, 1000, 1) == 1  # a warmup never scales to nothing
    assert scaled(0, 16, 4) == 0
    assert scaled(25000, 4, 16) == 100000  # smaller batch: longer warmup
    assert scaled(7, 3, 1) == 2  # exact arithmetic: 7/3


def test_explicit_warmup_sets_only_the_warmup_param() -> None:
    spec, _, notes = _apply({"type": "WarmupDecayLR", "total_num_steps": 5000}, warmup_rule=1562)
    assert (spec["warmup_num_steps"], spec["total_num_steps"]) == (1562, 5000)
    assert notes == ["scheduler.warmup_num_steps 1000 -> 1562 (explicit)"]


def test_onecycle_scales_its_lrs_and_every_step_count() -> None:
    spec, lr, notes = _apply(ONECYCLE, 0.5, lr_factor=2.0, warmup_rule="scaled")
    assert lr == 0.5  # OneCycle overwrites the optimizer lr: nothing to scale
    assert (spec["cycle_min_lr"], spec["cycle_max_lr"]) == (2e-4, 2e-3)
    assert (spec["cycle_first_step_size"], spec["decay_step_size"]) == (250, 250)
    assert spec["cycle_second_step_size"] is None  # still "same as the first half"
    assert spec["cycle_first_stair_count"] == 0  # a count of stairs, not of updates
    assert spec["type"] == "onecycle" and len(notes) == 4
    assert S.validate(spec) == []


def test_ds_warmuplr_scales_the_optimizer_lr_only_when_it_reads_it() -> None:
    spec, lr, _ = _apply({"type": "WarmupLR"}, 0.002, lr_factor=4.0)
    assert (spec["warmup_max_lr"], lr) == (None, 0.008)
    spec, lr, _ = _apply({"type": "WarmupLR", "warmup_min_lr": 1e-4, "warmup_max_lr": 1e-3},
                         0.002, lr_factor=4.0)
    assert (spec["warmup_min_lr"], spec["warmup_max_lr"], lr) == (4e-4, 4e-3, 0.002)


def test_ratio_schedules_scale_the_optimizer_lr() -> None:
    spec, lr, notes = _apply({"type": "WarmupCosineLR", "total_num_steps": 8000}, 0.002,
                             lr_factor=2.0, warmup_rule="scaled")
    assert (spec["total_num_steps"], spec["warmup_num_steps"], lr) == (2000, 250, 0.004)
    assert spec["cos_min_ratio"] == 0.0001  # ratios are not lrs
    assert S.peak_lr(spec, lr) == pytest.approx(0.004, rel=1e-12)
    assert len(notes) == 3


def test_gradual_warmup_starts_at_the_reference_lr() -> None:
    spec, lr, notes = _apply({"type": "gradual_warmup", "warmup_steps": 100}, 0.1,
                             lr_factor=4.0, scaling_rule="linear")
    assert (spec["start_lr"], lr) == (0.1, 0.4)
    s = built_schedule(spec, lr)
    assert (s.lr(1), s.lr(101)) == (0.1, 0.4)
    assert "scheduler.start_lr null -> 0.1 (gradual warmup starts at the reference lr)" in notes
    # below the reference batch there is nothing to warm up to: start at the target
    spec, lr, _ = _apply({"type": "gradual_warmup", "warmup_steps": 100}, 0.1, lr_factor=0.25)
    assert spec["start_lr"] == lr == 0.025
    # an explicit start_lr is an absolute lr like any other
    spec, _, _ = _apply({"type": "gradual_warmup", "warmup_steps": 100, "start_lr": 0.01}, 0.1,
                        lr_factor=4.0)
    assert spec["start_lr"] == 0.04


def test_apply_accepts_aliases_and_does_not_mutate_its_input() -> None:
    given = {"type": "WarmupLR", "warmup_num_steps": 400}
    before = dict(given)
    spec, _, _ = _apply(given, warmup_rule="scaled")
    assert given == before
    assert spec == {"type": "ds_warmuplr", "warmup_min_lr": 0.0, "warmup_max_lr": None,
                    "warmup_num_steps": 100, "warmup_type": "log"}
