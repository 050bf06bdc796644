"""The predictor's backtest on MLPerf's reference convergence points (benchmarks/predict_backtest.py
on the shipped JSON): interpolation and three kinds of extrapolation, each its own row; the
extrapolations' widening, a constant factor and one growing with the step, fitted
leave-one-benchmark-out; coverage per step band; the slope `predict` ships; and the shipped
results file says what this computes."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence

import pytest

from benchmarks.predict_backtest import (
    ABOUT_2X,
    BANDS,
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
    band_coverage,
    band_needs,
    band_of,
    by_band,
    calibration,
    fit_factor,
    fit_slope,
    full_factor,
    full_slope,
    load_rcps,
    lobo_factors,
    lobo_slopes,
    summary,
)
from scalesweep.science.prediction.epochs import EXTRAPOLATION_SLOPE
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


@pytest.mark.parametrize(("lobo", "full"), [(lobo_factors, full_factor), (lobo_slopes, full_slope)],
                         ids=["constant factor", "slope"])
def test_a_benchmarks_widening_is_fitted_without_it(
        bt: Backtest, lobo: Callable[[Sequence[HeldOut]], dict[str, float]],
        full: Callable[[Sequence[HeldOut]], float]) -> None:
    before = lobo(bt.rows)
    held = "retinanet"  # six of its extrapolations miss: it pulls the others' widening up
    # its extrapolations missing by far more: its own widening cannot move, the others' must
    worse = [dataclasses.replace(r, observed=r.predicted * 100) if r.benchmark == held
             and r.kind in EXTRAPOLATION else r for r in bt.rows]
    after = lobo(worse)
    assert after[held] == before[held]
    assert all(after[b] >= before[b] for b in before) and any(after[b] > before[b] for b in before)
    assert full(worse) > full(bt.rows)


def test_the_widened_coverage_is_out_of_sample_and_holds(bt: Backtest) -> None:
    cal = calibration(bt)
    factors, slopes = lobo_factors(bt.rows), lobo_slopes(bt.rows)
    for k in EXTRAPOLATION:
        rows = bt.of(k)
        assert cal[k]["constant"]["hits"] == sum(r.needs <= factors[r.benchmark] for r in rows)
        by_step = sum(r.needs <= 1 + slopes[r.benchmark] * r.step for r in rows)
        assert cal[k]["step"]["hits"] == by_step and cal[k]["step"]["coverage"] >= WIDEN_BELOW
        # a factor fitted on the benchmark itself would be another number: here it is not used
        assert cal[k]["factor_min"] == min(factors[r.benchmark] for r in rows)
        assert cal[k]["slope_min"] == min(slopes[r.benchmark] for r in rows)


def test_the_factor_the_extrapolations_need_grows_with_the_step(bt: Backtest) -> None:
    # the reason the widening is a function of the step: fitted in each band alone, it rises
    ext = [r for r in bt.rows if r.kind in EXTRAPOLATION]
    need = band_needs(bt.rows)
    assert need == {name: fit_factor([r.needs for r in ext if band_of(r.ratio) == name])
                    for name, _, _ in BANDS}
    assert need["< 1.6x"] < need[ABOUT_2X] < need[">= 3x"]


def test_fit_factor_is_the_smallest_at_which_the_share_is_covered() -> None:
    assert fit_factor([0.5] * 9 + [3.0]) == 1.0  # 90 % covered already: never narrower
    assert fit_factor([0.5] * 8 + [2.0, 3.0]) == 2.0
    row = HeldOut(UP_2, "x", 16, (4, 8), observed=12.0, predicted=10.0, ci=(9.0, 100 / 9), neighbours=None)
    assert not row.hit and row.needs == pytest.approx(math.log(1.2) / math.log(10 / 9))
    assert row.hit_widened(row.needs) and not row.hit_widened(row.needs * 0.99)
    with pytest.raises(ValueError, match="needs must hold one or more"):
        fit_factor([])


def test_fit_slope_is_the_smallest_at_which_the_share_is_covered() -> None:
    assert fit_slope([0.0] * 9 + [3.0]) == 0.0
    assert fit_slope([0.0] * 8 + [2.0, 3.0]) == 2.0
    # bare interval [9, 11.1], observed 12: needs 1.73x the half-width, at M/N = 2 a slope of 1.05
    row = HeldOut(UP_2, "x", 16, (4, 8), observed=12.0, predicted=10.0, ci=(9.0, 100 / 9), neighbours=None)
    assert row.ratio == 2.0 and row.slope_needs == pytest.approx((row.needs - 1) / math.log(2))
    assert row.hit_sloped(row.slope_needs) and not row.hit_sloped(row.slope_needs * 0.99)
    down = dataclasses.replace(row, kind=DOWN_2, batch=2, used=(4, 8))
    assert down.ratio == 2.0 and down.slope_needs == row.slope_needs
    assert dataclasses.replace(row, observed=10.5).slope_needs == 0.0  # the bare interval holds it


def _row(batch: int, nearest: int, hit: bool) -> HeldOut:
    observed = 10.0 if hit else 20.0
    return HeldOut(UP_2, "x", batch, (nearest // 2, nearest), observed=observed, predicted=10.0,
                   ci=(9.0, 100 / 9), neighbours=None)


def test_coverage_per_step_band_counts_each_held_out_batch_in_its_band() -> None:
    rows = [_row(120, 100, True), _row(150, 100, False),  # < 1.6x
            _row(160, 100, True), _row(200, 100, True), _row(250, 100, False),  # about 2x, ends included
            _row(251, 100, True),  # between
            _row(300, 100, False), _row(400, 100, True)]  # >= 3x
    got = band_coverage(rows, lambda r: r.hit)
    assert got == {"< 1.6x": (1, 2), ABOUT_2X: (2, 3), "2.5-3x (between)": (1, 1), ">= 3x": (1, 2)}
    assert list(got) == [name for name, _, _ in BANDS]
    assert band_coverage(rows[:2], lambda r: r.hit) == {"< 1.6x": (1, 2)}  # empty bands left out
    with pytest.raises(ValueError, match="M/N must be at least 1"):
        band_of(0.9)


def test_the_bands_pool_the_extrapolation_kinds_and_add_up(bt: Backtest) -> None:
    bands = by_band(bt.rows)
    cal = calibration(bt)
    for kind in EXTRAPOLATION:
        mine = [b for b in bands if b["kind"] == kind]
        assert sum(b["total"] for b in mine) == cal[kind]["total"]
        assert sum(b["hits_bare"] for b in mine) == cal[kind]["hits"]
        assert sum(b["hits_constant"] for b in mine) == cal[kind]["constant"]["hits"]
        assert sum(b["hits_step"] for b in mine) == cal[kind]["step"]["hits"]
    for name, _, _ in BANDS:
        rows = [b for b in bands if b["band"] == name]
        pooled = next(b for b in rows if b["kind"] == "pooled")
        assert pooled["hits_step"] == sum(b["hits_step"] for b in rows if b["kind"] != "pooled")


def test_predict_ships_the_slope_fitted_on_every_benchmark_rounded_up(bt: Backtest) -> None:
    assert math.ceil(full_slope(bt.rows) * 100) / 100 == EXTRAPOLATION_SLOPE


def test_the_shipped_results_are_what_the_backtest_computes(bt: Backtest) -> None:
    shipped = json.loads((ROOT / "benchmarks" / "results" / "predict_backtest.json").read_text())
    assert shipped["raw"]["summary"] == pytest.approx(summary(bt.rows))
    assert shipped["raw"]["calibration"] == json.loads(json.dumps(calibration(bt)))
    assert shipped["raw"]["by_band"] == json.loads(json.dumps(by_band(bt.rows)))
    assert shipped["raw"]["lobo_factors"] == pytest.approx(lobo_factors(bt.rows))
    assert shipped["raw"]["lobo_slopes"] == pytest.approx(lobo_slopes(bt.rows))
    assert shipped["raw"]["full_factor"] == pytest.approx(full_factor(bt.rows))
    assert shipped["raw"]["band_needs"] == pytest.approx(band_needs(bt.rows))
    assert shipped["settings"]["extrapolation_slope_shipped"] == EXTRAPOLATION_SLOPE
