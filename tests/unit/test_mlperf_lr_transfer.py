"""`recommend`'s lr rules backtested on MLPerf's tuned hyperparameters
(benchmarks/mlperf_lr_transfer.py on the shipped JSON): each rule's prediction in closed form,
from the papers' formulas, on cases of the real files; and the shipped results file says what
this computes."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks._common import RESULTS
from benchmarks.mlperf_lr_transfer import (
    FAMILIES,
    RULES,
    Point,
    all_cases,
    points,
    predictions,
    rule_rows,
    warmup_cases,
)
from benchmarks.predict_backtest import DATA


def _file(name: str) -> list[Point]:
    return points(next(DATA.glob(f"*/rcps_{name}.json")))


def _surge(batch: float, ref: float, x: float) -> float:
    """Li et al. 2024's best lr over the reference's, in the closed form
    sqrt(B/B_ref) (x + B_ref) / (x + B)."""
    return math.sqrt(batch / ref) * (x + ref) / (x + batch)


def test_every_benchmark_has_an_optimizer_family_and_its_source() -> None:
    names = {p.stem.removeprefix("rcps_") for p in DATA.glob("*/rcps_*.json")}
    assert names == set(FAMILIES)
    assert all(model in ("sgd", "surge") and source for model, source in FAMILIES.values())


def test_llama_405b_tuned_linearly_past_the_surge_range() -> None:
    """lr 8e-5, 1.6e-4, 3.2e-4 at 1152, 2304, 4608: the factor 2 at N exceeds what the surge
    can give there (sqrt 2), so b_noise is carried as infinite and the model reads sqrt(4) at M
    over the reference, 1 over N."""
    ref, n, m = _file("llama31_405b")
    assert (ref.batch, n.batch, m.batch) == (1152, 2304, 4608)
    p = predictions("surge", ref, n, m)
    assert p["none"] == 1.0 and p["linear"] == 2.0
    assert p["sqrt"] == pytest.approx(math.sqrt(2.0), rel=1e-12)
    assert p["power law"] == pytest.approx(2.0, rel=1e-12)
    assert p["model from the lr"] == pytest.approx(1.0, rel=1e-12)
    slope = (n.epochs - ref.epochs) / (n.batch - ref.batch)
    e_min = ref.epochs - slope * ref.batch
    if slope > 0 and e_min > 0:
        b = e_min / slope
        assert p["model from the epochs"] == pytest.approx(
            _surge(m.batch, ref.batch, b) / _surge(n.batch, ref.batch, b), rel=1e-12)
    else:
        assert p["model from the epochs"] is None


def test_maskrcnn_sgd_law_through_a_factor_inside_its_range() -> None:
    """McCandlish's law, factor k (x + B_ref) / (x + B): solved for x through the tuned factor
    at 48 over 8 (6, linear: x infinite) it reads 8 at 64, 4/3 over N: the tuned ratio."""
    pts = {p.batch: p for p in _file("maskrcnn")}
    ref, n, m = pts[8], pts[48], pts[64]
    p = predictions("sgd", ref, n, m)
    assert p["model from the lr"] == pytest.approx(64 / 48, rel=1e-12)
    assert m.lr / n.lr == pytest.approx(64 / 48, rel=1e-12)


def test_a_surge_factor_inside_the_range_is_solved_for_b_noise_in_closed_form() -> None:
    """A made-up case inside the surge's range: factor 1.25 at k = 4 gives x from
    2 (x + 1) / (x + 4) = 1.25, x = 3 / 0.75 = 4 (B_ref 1), and 4 (5) / 20 = 1 at k = 16."""
    ref, n, m = Point(1, 1.0, None, 10.0), Point(4, 1.25, None, 5.0), Point(16, 9.9, None, 4.0)
    p = predictions("surge", ref, n, m)
    assert p["model from the lr"] == pytest.approx(1.0 / 1.25, rel=1e-12)
    assert _surge(16, 1, 4.0) == pytest.approx(1.0, rel=1e-12)
    # epochs 10 and 5 at 1 and 4 fall: no B_crit, no prediction from the epochs
    assert p["model from the epochs"] is None


def test_the_pooled_rows_count_each_benchmark_once() -> None:
    cs, by_bench = all_cases()
    assert len({c.benchmark for c in cs}) == 18
    rows = {r["rule"]: r for r in rule_rows(cs)}
    assert set(rows) == set(RULES)
    # a rule best on every benchmark would count 18; ties count for each rule, so at least 18 in all
    assert sum(int(str(r["best_on"])) for r in rows.values()) >= 18
    assert all(w.tuned > 0 for w in warmup_cases(by_bench))


def test_the_shipped_results_are_what_the_script_computes() -> None:
    shipped = json.loads((RESULTS / "mlperf_lr_transfer.json").read_text())
    cs, _ = all_cases()
    assert len(shipped["raw"]["cases"]) == len(cs)
    got = {r["rule"]: r for r in rule_rows(cs)}
    for row in shipped["tables"][0]["rows"]:
        assert row["median_factor"] == pytest.approx(got[row["rule"]]["median_factor"], rel=1e-12)
        assert row["best_on"] == got[row["rule"]]["best_on"]
