"""science.prediction.batch_fit: S = S_min (1 + B_crit / B) on synthetic data, refusals, recommendations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scalesweep.science.prediction import batch_fit as bf

S_MIN, B_CRIT = 1000.0, 512.0
BATCHES = [64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0]


def _s(b: float) -> float:
    return S_MIN * (1 + B_CRIT / b)


# --- invalid arguments --------------------------------------------------------------------


@pytest.mark.parametrize(("batches", "updates", "match"), [
    ([64.0, 128.0], [1.0], "pair up"),
    ([64.0, 0.0], [1.0, 2.0], "batches must be finite and positive"),
    ([64.0, 128.0], [1.0, math.nan], "updates must be finite and positive"),
    ([64.0, 64.0, 64.0], [1.0, 2.0, 3.0], "at least 2 distinct batch sizes"),
])  # fmt: skip
def test_fit_rejects(batches: list[float], updates: list[float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        bf.fit(batches, updates)


def test_recommend_rejects_a_bad_batch() -> None:
    with pytest.raises(ValueError, match="batch must be positive"):
        bf.recommend([], 0)


# --- the fit ------------------------------------------------------------------------------


def test_exact_data_gives_the_known_b_crit() -> None:
    f = bf.fit(BATCHES, [_s(b) for b in BATCHES])
    assert (f.s_min, f.b_crit, f.r2) == pytest.approx((S_MIN, B_CRIT, 1.0), rel=1e-12)
    assert f.n_batches == 6 and max(abs(r) for r in f.residuals) < 1e-12
    assert f.predict(4096) == pytest.approx(_s(4096))
    assert bf.judge(f) == [] and bf.judge(f, 4096) == []


def test_noisy_data_within_a_few_percent() -> None:
    gen = np.random.default_rng(0)
    noisy = [_s(b) * (1 + 0.03 * gen.standard_normal()) for b in BATCHES]
    f = bf.fit(BATCHES, noisy)
    assert f.b_crit == pytest.approx(B_CRIT, rel=0.15)
    assert f.r2 > 0.99 and bf.judge(f) == []
    assert all(abs(r) < 0.1 for r in f.residuals)


# --- refusals -----------------------------------------------------------------------------


def test_two_batch_sizes_fit_exactly_and_prove_nothing() -> None:
    f = bf.fit([64.0, 256.0], [_s(64), _s(256)])
    assert f.b_crit == pytest.approx(B_CRIT) and f.r2 == 1.0
    assert any("only 2 batch sizes" in p for p in bf.judge(f))


def test_poor_fit_is_refused() -> None:
    f = bf.fit(BATCHES, [3000.0, 1000.0, 2800.0, 900.0, 2500.0, 800.0])
    assert f.r2 < bf.MIN_R2
    assert any(p.startswith("poor fit: R²") for p in bf.judge(f))


def test_updates_that_do_not_fall_with_batch_are_no_critical_batch() -> None:
    f = bf.fit(BATCHES, [1000.0, 1100.0, 1200.0, 1300.0, 1400.0, 1500.0])
    assert math.isnan(f.b_crit)
    assert any("do not fall as the batch grows" in p for p in bf.judge(f))


def test_perfect_scaling_puts_b_crit_beyond_the_range() -> None:
    f = bf.fit(BATCHES, [64000.0 / b for b in BATCHES])  # S = 64000 / B: S_min = 0
    assert any("S_min <= 0" in p for p in bf.judge(f))
    # B_crit fitted far above the largest batch measured
    far = bf.fit(BATCHES, [100.0 * (1 + 100_000 / b) for b in BATCHES])
    assert far.b_crit == pytest.approx(100_000)
    assert any("far outside the measured batch range 64..2048" in p for p in bf.judge(far))
    # ... which does not stop a prediction within the range: the curve is 1/B there
    assert bf.judge(far, 2048) == []


def test_extrapolation_far_beyond_the_measured_range_is_refused() -> None:
    f = bf.fit(BATCHES, [_s(b) for b in BATCHES])
    assert bf.judge(f, 4096) == []  # 2x the largest: still believed
    assert any("target batch 8192 is more than 2x outside" in p for p in bf.judge(f, 8192))
    assert any("target batch 16 is more than 2x outside" in p for p in bf.judge(f, 16))


# --- recommendations ----------------------------------------------------------------------


def _arm(name: str, factor: float, failed_at: float | None = None) -> bf.Arm:
    return bf.Arm(name, {b: None if b == failed_at else factor * _s(b) for b in BATCHES[:4]})


def test_measured_batch_is_decided_by_the_measurement() -> None:
    arms = [_arm("linear/scaled", 1.0), _arm("none/fixed", 1.5), _arm("sqrt/fixed", 0.9, 256.0)]
    rec = bf.recommend(arms, 256.0)
    assert (rec.arm, rec.updates, rec.measured) == ("linear/scaled", _s(256), True)
    rec = bf.recommend(arms, 128.0)
    assert (rec.arm, rec.measured) == ("sqrt/fixed", True)
    nobody = bf.recommend([_arm("a", 1.0, 256.0)], 256.0)
    assert nobody.arm is None and "no arm measured at global batch 256" in nobody.reasons[0]


def test_prediction_uses_only_trustworthy_arms_that_never_failed() -> None:
    arms = [_arm("linear/scaled", 1.0), _arm("none/fixed", 1.5), _arm("sqrt/fixed", 0.9, 256.0)]
    rec = bf.recommend(arms, 1024.0)  # measured up to 512: 2x extrapolation
    assert (rec.arm, rec.measured) == ("linear/scaled", False)
    assert rec.updates == pytest.approx(_s(1024))
    assert any("sqrt/fixed: never reached the target at batch 256" in r for r in rec.reasons)


def test_no_recommendation_when_the_data_cannot_support_one() -> None:
    two = [bf.Arm("linear/scaled", {64.0: _s(64), 256.0: _s(256)})]
    rec = bf.recommend(two, 1024.0)
    assert rec.arm is None and "only 2 batch sizes" in rec.reasons[0]
    rec = bf.recommend([_arm("linear/scaled", 1.0)], 8192.0)  # 16x beyond 512
    assert rec.arm is None and "more than 2x outside" in rec.reasons[0]
    rec = bf.recommend([bf.Arm("x", {64.0: 100.0})], 128.0)
    assert rec.arm is None and "fewer than 2 batch sizes" in rec.reasons[0]
