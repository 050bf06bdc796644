"""The transfer backtest's pure parts (benchmarks/transfer.py): the grid at M spans both lr
models' ranges one √2 step past each end, the named rules are cells of it and not repeated as
factors, the two stages' trials merge per arm, and a recipe's epochs over the grid's best are
paired by seed with the order statistics' interval, and the grid at M gets the epochs the
study's measured trade-off asks."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import pandas as pd
import pytest

from benchmarks.transfer import (
    BUDGET_SLACK,
    CASES,
    GRID_STEP,
    QUICK,
    Case,
    SolveRun,
    _merged,
    _rules,
    budget_factor,
    grid_at_m,
    paired,
    study,
    trial_epochs_at,
    with_budget,
    within_a_step,
)


def test_the_grid_at_m_spans_both_models_ranges_one_step_past_each_end() -> None:
    case = Case("k = 16 from N = 2", CASES[0].sweep, reference=1, n=2, k=16)  # M = 32, K = 32
    grid = grid_at_m(case)
    # the surge's low end 1/sqrt(32) = 2^-2.5, one step lower 2^-3; SGD's high end 32 = 2^5, one step higher
    assert grid[0] == pytest.approx(2.0 ** -3) and grid[-1] == pytest.approx(2.0 ** 5.5)
    assert all(b / a == pytest.approx(GRID_STEP) for a, b in itertools.pairwise(grid))
    assert grid_at_m(QUICK) == pytest.approx([1.0, math.sqrt(4.0), 4.0])


def test_the_named_rules_are_cells_and_not_repeated_as_factors() -> None:
    rules = _rules([0.5, 1.0, math.sqrt(8.0), 4.0, 8.0], world=8, reference=1)
    assert rules == ["none", "sqrt", "linear", 0.5, 4.0]


def test_a_study_excludes_every_other_rule_at_the_reference() -> None:
    s = study(QUICK, "t", 4, ["none", "sqrt", 2.5], ["scaled", "fixed"], range(2))
    assert s["axes"]["world_size"] == [1, 4] and s["axes"]["seed"] == [0, 1]
    assert {"world_size": 1, "scaling_rule": 2.5} in s["exclude"]
    assert {"world_size": 1, "warmup_rule": "fixed"} in s["exclude"]
    assert {"world_size": 1, "scaling_rule": "none"} not in s["exclude"]


def _trials(rows: list[tuple[int, str, str, int, float | None]]) -> pd.DataFrame:
    columns = ["world_size", "scaling_rule", "warmup_rule", "seed", "epochs_to_target"]
    return pd.DataFrame(rows, columns=columns)


def test_the_two_stages_merge_per_arm_and_never_drop_a_seed_that_did_not_reach() -> None:
    first = _trials([(4, "sqrt", "scaled", 0, 2.0), (4, "2.5", "scaled", 0, None),
                     (1, "none", "scaled", 0, 1.0)])
    second = _trials([(4, "sqrt", "scaled", 1, 3.0), (4, "x2.5", "scaled", 1, 4.0)])
    arms = {(a.world, a.rule, a.warmup): a for a in _merged(first, second, reference=1)}
    assert arms[(4, "sqrt", "scaled")].epochs == {0: 2.0, 1: 3.0}
    assert arms[(4, "2.5", "scaled")].epochs == {0: math.inf, 1: 4.0}
    assert arms[(4, "sqrt", "scaled")].factor == pytest.approx(2.0)


def test_paired_ratios_by_seed_with_the_order_statistics_interval() -> None:
    p = paired({0: 2.0, 1: 3.0, 2: 6.0, 3: math.inf}, {0: 1.0, 1: 3.0, 2: 2.0, 3: math.inf, 4: 9.0})
    assert p.ratios == (1.0, 1.0, 2.0, 3.0)  # seed 3 reached in neither: 1; seed 4 unpaired: out
    assert p.median == 1.5
    assert p.ci == (1.0, 3.0) and p.confidence == pytest.approx(1 - 2 * 0.5 ** 4)


def test_the_grid_at_m_gets_the_epochs_its_measured_trade_off_asks_and_stops_at_the_target() -> None:
    # E(B) ∝ 1 + B/B_noise: from 32 to 512 samples at B_noise 32, (1 + 16) / (1 + 1) = 8.5
    assert budget_factor(32.0, 32.0, 512.0) == pytest.approx(math.ceil(4 * BUDGET_SLACK * 8.5) / 4)
    assert budget_factor(None, 32.0, 128.0) == pytest.approx(BUDGET_SLACK * 4)  # k without one
    assert budget_factor(1e12, 32.0, 128.0) == BUDGET_SLACK  # far below the noise scale: N's, x slack
    sweep = {"target": {"metric": "dev_loss", "value": 0.05},
             "training": {"per_worker_batch": 16, "epochs": 24, "eval_every_epochs": 0.25}}
    longer = with_budget(sweep, 2.5)
    assert longer["training"] == {"per_worker_batch": 16, "epochs": 60, "eval_every_epochs": 0.625}
    assert longer["stop_at_target"] is True
    assert with_budget({**sweep, "target": {"relative_to_baseline": 0.1}}, 2.0)["stop_at_target"] is False


def test_the_grid_s_trial_epochs_sum_each_trial_s_last_eval_at_m_only() -> None:
    stage = SimpleNamespace(curves=pd.DataFrame({
        "trial": ["a", "a", "b", "ref"], "world_size": [8, 8, 8, 1], "epoch": [1.0, 2.5, 4.0, 9.0]}))
    again = SimpleNamespace(curves=pd.DataFrame({"trial": ["c"], "world_size": [8], "epoch": [0.5]}))
    assert trial_epochs_at(8, stage, again) == 7.0  # 2.5 + 4 + 0.5; the reference's 9 is not M's
    run = SolveRun(2.0, 10, "faster", search_trial_epochs=1.4, grid_trial_epochs=7.0,
                   reaches_best=within_a_step(2.0, 2.0 * GRID_STEP))
    assert run.reaches_best and run.share == pytest.approx(0.2)
    assert not within_a_step(2.0, 2.0 * GRID_STEP * 1.01) and not within_a_step(None, 2.0)
