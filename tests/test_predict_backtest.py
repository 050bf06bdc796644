"""The predictor's backtest on MLPerf's reference convergence points (benchmarks/predict_backtest.py
on the shipped JSON): every interior batch size held out, predicted from the rest; the 90 %
interval's hit rate, and the shipped results file says what this computes."""

from __future__ import annotations

import json

import pytest

from benchmarks.predict_backtest import DATA, backtest, load_rcps, summary
from tests.helpers import ROOT


@pytest.fixture(scope="module")
def rows() -> list:
    return backtest()


def test_the_files_parse_whatever_their_key_is_named() -> None:
    lora = load_rcps(DATA / "training_6.1.0" / "rcps_llama2_70b_lora.json")  # "samples to converge"
    assert list(lora) == [8, 16, 32, 128] and all(len(v) == 20 for v in lora.values())


def test_the_interval_is_calibrated_on_data_no_one_here_made(rows: list) -> None:
    s = summary(rows)
    assert s["n"] == 63 and len({r.benchmark for r in rows}) == 18
    # nominal 90 %; 63 held-out batches give a binomial standard error of about 4 points
    assert 0.82 <= s["hit_rate"] <= 0.97
    assert s["median_abs_error"] < 0.05


def test_the_shipped_results_are_what_the_backtest_computes(rows: list) -> None:
    shipped = json.loads((ROOT / "benchmarks" / "results" / "predict_backtest.json").read_text())
    assert shipped["raw"]["summary"] == pytest.approx(summary(rows))
