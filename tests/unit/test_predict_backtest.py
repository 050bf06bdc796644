"""The predictor's backtest on MLPerf's reference convergence points (benchmarks/predict_backtest.py
on the shipped JSON): interpolation and three kinds of extrapolation, each its own row; the
extrapolations' widening factor fitted leave-one-benchmark-out; the factor `predict` ships; and
the shipped results file says what this computes."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from benchmarks.predict_backtest import (
    DATA,
    DOWN_2,
    EXTRAPOLATION,
    INTERIOR,
    KINDS,
    UP_2,
    UP_ALL,
    WIDEN_BELOW,
    Backtest,
    HeldOut,
    backtest,
    calibration,
    fit_factor,
    full_factor,
    load_rcps,
    lobo_factors,
    summary,
)
from scalesweep.science.stats.predict import EXTRAPOLATION_FACTOR
from tests.support.helpers import ROOT


@pytest.fixture(scope="module")
def bt() -> Backtest:
    return backtest()


def test_the_files_parse_whatever_their_key_is_named() -> None:
    lora = load_rcps(DATA / "training_6.1.0" / "rcps_llama2_70b_lora.json")  # "samples to converge"
    assert list(lora) == [8, 16, 32, 128] and all(len(v) == 20 for v in lora.values())


def test_the_interval_is_calibrated_on_data_no_one_here_made(bt: Backtest) -> None:
    s = summary(bt.rows)
    assert s["n"] == 63 and len({r.benchmark for r in bt.rows}) == 18
    # nominal 90 %; 63 held-out batches give a binomial standard error of about 4 points
    assert 0.82 <= s["hit_rate"] <= 0.97
    assert s["median_abs_error"] < 0.05


def test_interpolation_and_each_extrapolation_are_rows_of_their_own(bt: Backtest) -> None:
    cal = calibration(bt)
    assert list(cal) == list(KINDS)
    # every held-out batch of each kind predicted from the batches that kind names
    for r in bt.of(UP_2):
        assert len(r.used) == 2 and max(r.used) < r.batch
    for r in bt.of(UP_ALL):
        assert all(b < r.batch for b in r.used)
    for r in bt.of(DOWN_2):
        assert len(r.used) == 2 and min(r.used) > r.batch
    for r in bt.of(INTERIOR):
        assert min(r.used) < r.batch < max(r.used)
    got = {k: (c["hits"], c["total"], c["refused"]) for k, c in cal.items()}
    assert got == {INTERIOR: (56, 63, 0), UP_2: (52, 63, 0), UP_ALL: (53, 63, 0), DOWN_2: (54, 62, 1)}
    # the bare interval covers less outside the measured batches than between them
    assert all(cal[k]["coverage"] < WIDEN_BELOW <= cal[INTERIOR]["coverage"] for k in EXTRAPOLATION)
    assert not cal[INTERIOR]["widened"] and all(cal[k]["widened"] for k in EXTRAPOLATION)


def test_the_factor_for_a_benchmark_is_fitted_without_it(bt: Backtest) -> None:
    before = lobo_factors(bt.rows)
    held = "retinanet"  # six of its extrapolations miss: it pulls the others' factor up
    # its extrapolations missing by far more: its own factor cannot move, the others' must
    worse = [dataclasses.replace(r, observed=r.predicted * 100) if r.benchmark == held
             and r.kind in EXTRAPOLATION else r for r in bt.rows]
    after = lobo_factors(worse)
    assert after[held] == before[held]
    assert all(after[b] >= before[b] for b in before) and any(after[b] > before[b] for b in before)
    assert full_factor(worse) > full_factor(bt.rows)


def test_the_widened_coverage_is_out_of_sample_and_holds(bt: Backtest) -> None:
    cal = calibration(bt)
    factors = lobo_factors(bt.rows)
    for k in EXTRAPOLATION:
        rows = bt.of(k)
        hits = sum(r.needs <= factors[r.benchmark] for r in rows)
        assert cal[k]["hits_widened"] == hits and cal[k]["coverage_widened"] >= WIDEN_BELOW
        # a factor fitted on the benchmark itself would be another number: here it is not used
        assert cal[k]["factor_min"] == min(factors[r.benchmark] for r in rows)


def test_fit_factor_is_the_smallest_at_which_the_share_is_covered() -> None:
    assert fit_factor([0.5] * 9 + [3.0]) == 1.0  # 90 % covered already: never narrower
    assert fit_factor([0.5] * 8 + [2.0, 3.0]) == 2.0
    row = HeldOut(UP_2, "x", 16, (4, 8), observed=12.0, predicted=10.0, ci=(9.0, 100 / 9), neighbours=None)
    assert not row.hit and row.needs == pytest.approx(math.log(1.2) / math.log(10 / 9))
    assert row.hit_widened(row.needs) and not row.hit_widened(row.needs * 0.99)
    with pytest.raises(ValueError, match="needs must hold one or more"):
        fit_factor([])


def test_predict_ships_the_factor_fitted_on_every_benchmark_rounded_up(bt: Backtest) -> None:
    assert math.ceil(full_factor(bt.rows) * 100) / 100 == EXTRAPOLATION_FACTOR


def test_the_shipped_results_are_what_the_backtest_computes(bt: Backtest) -> None:
    shipped = json.loads((ROOT / "benchmarks" / "results" / "predict_backtest.json").read_text())
    assert shipped["raw"]["summary"] == pytest.approx(summary(bt.rows))
    assert shipped["raw"]["calibration"] == json.loads(json.dumps(calibration(bt)))
    assert shipped["raw"]["lobo_factors"] == pytest.approx(lobo_factors(bt.rows))
    assert shipped["settings"]["extrapolation_factor_shipped"] == EXTRAPOLATION_FACTOR
