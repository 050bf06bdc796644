"""Named rules from the 2024-25 literature (issue 52, item 3): the optimizer rules
beta2_halflife (Marek et al. 2025) and weight_decay_linear (Bergsma et al. 2025), and the warmup
rule proportional; exact values by hand, then as `plan` and `lr` show them."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from scalesweep.orchestrator.cli import main
from scalesweep.orchestrator.plan.cluster import ClusterInfo
from scalesweep.orchestrator.plan.rows import make_plan
from scalesweep.orchestrator.spec.errors import InputError
from scalesweep.orchestrator.spec.load import load_sweep
from scalesweep.science import scaling
from tests.support.helpers import schedule_spec

ROOT = Path(__file__).resolve().parents[2]
LAPTOP = ClusterInfo(cpus=2, gpus=0, memory_gb=24, where="test machine")


def plan_of(name: str, *sets: str):  # type: ignore[no-untyped-def]
    return make_plan(load_sweep(ROOT / "sweeps" / name, list(sets)), LAPTOP)


# --- beta2_halflife: beta2' = beta2 ** (B / B0) ------------------------------------------------


def test_beta2_halflife_hand_computed() -> None:
    assert scaling.beta2_halflife(0.5, 8, 4) == 0.25  # 0.5 ** 2, exact in binary
    assert scaling.beta2_halflife(0.5, 12, 4) == 0.125
    # 0.999 ** 4 = 1 - 4e-3 + 6e-6 - 4e-9 + 1e-12, expanded by hand
    assert scaling.beta2_halflife(0.999, 16, 4) == pytest.approx(0.996005996001, rel=1e-15)
    assert scaling.beta2_halflife(0.81, 2, 4) == pytest.approx(0.9, rel=1e-15)  # k = 1/2
    assert scaling.beta2_halflife(0.95, 4, 4) == 0.95
    assert scaling.beta2_halflife(0.0, 16, 4) == 0.0


def test_beta2_halflife_keeps_the_half_life_in_samples() -> None:
    """The paper's invariant: B * ln(1/2) / ln(beta2) samples, equal at every batch."""
    def half_life_samples(beta2: float, batch: int) -> float:
        return batch * math.log(0.5) / math.log(beta2)

    for beta2, ref, batch in [(0.999, 64, 256), (0.95, 512, 32), (0.98, 4, 4096)]:
        new = scaling.beta2_halflife(beta2, batch, ref)
        assert half_life_samples(new, batch) == pytest.approx(half_life_samples(beta2, ref),
                                                              rel=1e-9)


@pytest.mark.parametrize("beta2", [1.0, -0.1, 1.5, True, "0.9"])
def test_beta2_halflife_rejects_a_beta2_outside_0_1(beta2: Any) -> None:
    with pytest.raises(ValueError, match="beta2 must be a number in"):
        scaling.beta2_halflife(beta2, 16, 4)


# --- weight_decay_linear: lambda' = lambda * B / B0 -----------------------------------------------


def test_weight_decay_linear_hand_computed() -> None:
    assert scaling.weight_decay_linear(0.05, 16, 4) == 0.2
    assert scaling.weight_decay_linear(0.1, 2, 8) == 0.025
    assert scaling.weight_decay_linear(0.1, 8, 8) == 0.1


def test_weight_decay_linear_keeps_adamw_timescale_at_a_fixed_lr() -> None:
    """tau = B / (eta * lambda * D) (Bergsma et al.): the same at B0 and at B for one eta."""
    eta, dataset = 1e-3, 1_000_000
    for ref, batch, decay in [(64, 256, 0.1), (512, 32, 0.05)]:
        new = scaling.weight_decay_linear(decay, batch, ref)
        assert batch / (eta * new * dataset) == pytest.approx(ref / (eta * decay * dataset),
                                                              rel=1e-12)


@pytest.mark.parametrize("decay", [0, 0.0, -0.1, math.inf, True, None])
def test_weight_decay_linear_rejects_a_decay_that_is_not_positive(decay: Any) -> None:
    with pytest.raises(ValueError, match="weight_decay must be a finite number > 0"):
        scaling.weight_decay_linear(decay, 16, 4)


# --- optimizer_hyperparameters: the rule applied to an optimizer block ------------------------


def test_optimizer_rules_set_only_their_own_setting_with_notes() -> None:
    adam = {"type": "adam", "lr": 0.002}
    out, notes = scaling.optimizer_hyperparameters("beta2_halflife", adam, 16, 4)
    assert out == {"type": "adam", "lr": 0.002, "betas": [0.9, pytest.approx(0.996005996001,
                                                                             rel=1e-15)]}
    assert notes == ["optimizer.betas (0.9, 0.999) -> (0.9, 0.996006) (beta2 ** k: the same "
                     "half-life in samples; beta2_halflife, k = 4)"]
    adamw = {"type": "adamw", "lr": 0.001, "betas": [0.8, 0.95], "weight_decay": 0.05}
    out, notes = scaling.optimizer_hyperparameters("weight_decay_linear", adamw, 64, 4)
    assert out == {**adamw, "weight_decay": 0.8}
    assert notes == ["optimizer.weight_decay 0.05 -> 0.8 (weight_decay * k; weight_decay_linear, "
                     "k = 16)"]
    out, _ = scaling.optimizer_hyperparameters("beta2_halflife", adamw, 8, 4)
    assert out["betas"] == [0.8, pytest.approx(0.9025, rel=1e-15)]  # beta1 stays
    # the reference itself and rule none: the optimizer as it was, so trials merge
    for rule, gb in [("beta2_halflife", 4), ("weight_decay_linear", 4), ("none", 16)]:
        assert scaling.optimizer_hyperparameters(rule, adamw, gb, 4) == (adamw, [])


@pytest.mark.parametrize(("rule", "optimizer", "match"), [
    ("beta2_halflife", {"type": "sgd", "lr": 0.1}, r"optimizer.type must be one of .*'sgd'"),
    ("weight_decay_linear", {"type": "adam", "lr": 0.1, "weight_decay": 0.1},
     r"optimizer.type must be one of \('adamw',\).*'adam', whose weight_decay is an L2 term"),
    ("weight_decay_linear", {"type": "adamw", "lr": 0.1}, r"weight_decay=None"),
    ("weight_decay_linear", {"type": "adamw", "lr": 0.1, "weight_decay": 0.0},
     r"weight_decay=0.0"),
    ("cubic", {"type": "adamw", "lr": 0.1}, r"optimizer_rule must be one of"),
])
def test_optimizer_rules_refuse_what_they_cannot_scale(rule: str, optimizer: dict[str, Any],
                                                       match: str) -> None:
    for gb in (16, 4):  # at the reference too: the sweep is wrong whatever its world sizes
        with pytest.raises(ValueError, match=match):
            scaling.optimizer_hyperparameters(rule, optimizer, gb, 4)


# --- warmup rule proportional: counts x T / T0 ------------------------------------------------


def _apply(spec: dict[str, Any], **kw: Any) -> tuple[Any, float, list[str]]:
    args: dict[str, Any] = {"lr_factor": 1.0, "global_batch": 16, "reference_global_batch": 4,
                            "warmup_rule": "proportional", **kw}
    return scaling.apply(schedule_spec(spec), 0.002, **args)


def test_proportional_keeps_the_warmup_share_of_the_run() -> None:
    # 300 of 512 reference updates; this run has 130: 300 * 130 / 512 = 76.17 -> 76 (scaled,
    # the batch ratio 4/16, would give 75)
    out, _, notes = _apply({"type": "warmuplr", "warmup_steps": 300}, run_updates=130,
                           reference_updates=512)
    assert out["warmup_steps"] == 76
    assert notes == ["scheduler.warmup_steps 300 -> 76 (proportional x 130/512)"]
    # half rounds up, as scaled: 5 * 3 / 2 = 7.5 -> 8; never down to nothing
    out, _, _ = _apply({"type": "warmuplr", "warmup_steps": 5}, run_updates=3, reference_updates=2)
    assert out["warmup_steps"] == 8
    out, _, _ = _apply({"type": "warmuplr", "warmup_steps": 1}, run_updates=1,
                       reference_updates=1000)
    assert out["warmup_steps"] == 1
    # a run as long as the reference's keeps every count, whatever the batch
    out, _, notes = _apply({"type": "warmuplr", "warmup_steps": 300}, run_updates=512,
                           reference_updates=512)
    assert out["warmup_steps"] == 300 and notes == []


def test_proportional_scales_every_count_like_scaled() -> None:
    wsd = {"type": "wsd", "warmup_steps": 100, "decay_steps": 200, "total_steps": 1000}
    out, _, _ = _apply(wsd, run_updates=250, reference_updates=1000)
    assert (out["warmup_steps"], out["total_steps"], out["decay_steps"]) == (25, 250, 50)


@pytest.mark.parametrize("kw", [{}, {"run_updates": 100}, {"run_updates": 100,
                                                          "reference_updates": 0}])
def test_proportional_needs_both_lengths(kw: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="warmup_rule='proportional' keeps the warmup's share"):
        _apply({"type": "warmuplr", "warmup_steps": 300}, **kw)


def test_step_factor_refuses_proportional() -> None:
    with pytest.raises(ValueError, match="T / T0"):
        scaling.step_factor("proportional", 16, 4)


# --- in the plan -----------------------------------------------------------------------------


def test_the_shipped_sweep_plans_each_rule_exactly() -> None:
    plan = plan_of("optimizer_rules.yaml", "axes.seed=[0]")
    rows = {r.name: r for r in plan.rows}
    assert sorted(rows) == sorted(
        ["ws1-warmup100-none", *(f"ws{ws}-warmup{w}-none{rule}" for ws, w in ((4, 25), (16, 6))
                                 for rule in ("", "-beta2_halflife", "-weight_decay_linear"))])
    b16 = rows["ws16-warmup6-none-beta2_halflife"].trial.optimizer.params
    assert b16["betas"] == [0.9, pytest.approx(math.exp(16 * math.log(0.999)), rel=1e-14)]
    assert b16["weight_decay"] == 0.05 and b16["lr"] == 0.001
    w16 = rows["ws16-warmup6-none-weight_decay_linear"].trial.optimizer.params
    assert w16["weight_decay"] == 0.8 and "betas" not in w16
    assert rows["ws16-warmup6-none"].trial.optimizer.params == {"lr": 0.001, "weight_decay": 0.05}
    # at the reference world size every optimizer rule is the baseline trial itself
    assert [c["optimizer_rule"] for c in rows["ws1-warmup100-none"].also] == [
        "beta2_halflife", "weight_decay_linear"]
    assert rows["ws4-warmup25-none-beta2_halflife"].arm == "ws4-warmup25-none-beta2_halflife"
    row = rows["ws4-warmup25-none-weight_decay_linear"]
    assert row.to_json()["axes"]["optimizer_rule"] == "weight_decay_linear"
    assert "optimizer.weight_decay 0.05 -> 0.2 (weight_decay * k; weight_decay_linear, k = 4)" \
        in row.notes
    base = plan.baseline_for(rows["ws16-warmup6-none-beta2_halflife"])
    assert base is not None and base.name == "ws1-warmup100-none"


def test_proportional_in_a_plan_is_the_run_share_not_the_batch_ratio() -> None:
    """With max_updates every trial makes 120 updates: proportional keeps the warmup (the same
    share of the same run length), where scaled divides it by the batch ratio."""
    plan = plan_of("optimizer_rules.yaml", "axes.seed=[0]", "axes.optimizer_rule=[none]",
                   "axes.warmup_rule=[scaled, proportional]", "training.max_updates=120")
    warmups = {(r.world_size, r.warmup_rule): r.warmup_steps for r in plan.rows}
    assert warmups == {(1, "scaled"): 100, (4, "scaled"): 25, (16, "scaled"): 6,
                       (4, "proportional"): 100, (16, "proportional"): 100}


@pytest.mark.parametrize(("sweep", "sets", "match"), [
    ("smoke.yaml", ["axes.optimizer_rule=[beta2_halflife]"],
     r"axes.optimizer_rule = 'beta2_halflife': beta2_halflife scales Adam's beta2, so "
     r"optimizer.type must be one of \('adam', 'adamw'\), but got 'sgd' \(trial world_size="),
    ("wenet_4v16.yaml", ["axes.optimizer_rule=[weight_decay_linear]"],
     r"axes.optimizer_rule = 'weight_decay_linear': .*got 'adam', whose weight_decay is an L2"),
    ("optimizer_rules.yaml", ["optimizer.weight_decay=0"],
     r"axes.optimizer_rule = 'weight_decay_linear': .*weight_decay=0"),
    ("optimizer_rules.yaml", ["axes.scaling_rule=[sqrt_adam]"],
     r"axes.optimizer_rule = 'beta2_halflife': sqrt_adam sets beta2"),
    ("optimizer_rules.yaml", ["training.batch_ramp='4:1'", "axes.world_size=[16]"],
     r"training.batch_ramp = '4:1': optimizer_rule beta2_halflife changes the optimizer"),
    ("optimizer_rules.yaml", ["axes.optimizer_rule=[none]", "axes.warmup_rule=[proportional]",
                              "training.batch_ramp='4:1'", "axes.world_size=[16]"],
     r"warmup_rule proportional keeps the warmup's share"),
    ("optimizer_rules.yaml", ["axes.optimizer_rule=[none, cubic]"], r"axes.optimizer_rule"),
    ("optimizer_rules.yaml", ["baseline.optimizer_rule=cubic"], r"baseline.optimizer_rule"),
])
def test_bad_rules_name_field_value_and_rule(sweep: str, sets: list[str], match: str) -> None:
    with pytest.raises(InputError, match=match):
        plan_of(sweep, *sets)


def test_plan_exits_2_and_lr_shows_the_rules(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(ROOT / "sweeps" / "smoke.yaml"), "--set",
                 "axes.optimizer_rule=[beta2_halflife]"]) == 2
    assert "axes.optimizer_rule = 'beta2_halflife'" in capsys.readouterr().err
    assert main(["lr", str(ROOT / "sweeps" / "optimizer_rules.yaml"), "--updates", "2"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == "update,lr"
    assert ("rule: ws16-warmup6-none-weight_decay_linear: optimizer.weight_decay 0.05 -> 0.8 "
            "(weight_decay * k; weight_decay_linear, k = 16)") in err.splitlines()
    assert ("rule: ws4-warmup25-none-beta2_halflife: optimizer.betas (0.9, 0.999) -> "
            "(0.9, 0.996006) (beta2 ** k: the same half-life in samples; beta2_halflife, k = 4)"
            ) in err.splitlines()
