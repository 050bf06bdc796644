"""The two lr-vs-batch models of scalesweep.science.recommend.lr_models against their papers'
formulas, with values worked by hand: McCandlish et al. (2018, §2.2) for SGD,
ε_opt(B) = ε_max / (1 + B_noise/B); Li et al. (2024, arXiv 2405.14578) for Adam-style
optimizers, ε_opt(B) = ε_max / (½ (sqrt(B_noise/B) + sqrt(B/B_noise))); and the lr factor at a
batch over the reference's, its range and its inverse."""

from __future__ import annotations

import math

import pytest

from scalesweep.science.recommend import lr_models as m


def test_sgd_optimal_lr_is_mccandlish_eq() -> None:
    # B = 100, B_noise = 300: 1 / (1 + 3) = 0.25; with ε_max = 2, 0.5
    assert m.sgd_optimal_lr(100, 300) == pytest.approx(0.25)
    assert m.sgd_optimal_lr(100, 300, lr_max=2.0) == pytest.approx(0.5)
    # at B = B_noise, half of ε_max; far above it, ε_max
    assert m.sgd_optimal_lr(300, 300, lr_max=2.0) == pytest.approx(1.0)
    assert m.sgd_optimal_lr(3e9, 300, lr_max=2.0) == pytest.approx(2.0, rel=1e-6)


def test_surge_optimal_lr_is_li_et_al_formula() -> None:
    # B = 100, B_noise = 400: ½ (sqrt 4 + sqrt ¼) = ½ (2 + 0.5) = 1.25, so 1 / 1.25 = 0.8
    assert m.surge_optimal_lr(100, 400) == pytest.approx(0.8)
    # symmetric in log B about the peak: B = 1600 gives ½ (0.5 + 2) too
    assert m.surge_optimal_lr(1600, 400) == pytest.approx(0.8)
    # B = 25: ½ (sqrt 16 + sqrt 1/16) = ½ (4 + 0.25) = 2.125; ε_max = 3 gives 3 / 2.125
    assert m.surge_optimal_lr(25, 400, lr_max=3.0) == pytest.approx(3.0 / 2.125)
    # the peak: ε_max at B = B_noise, and lower on either side
    assert m.surge_optimal_lr(400, 400, lr_max=3.0) == pytest.approx(3.0)
    assert m.surge_optimal_lr(399, 400) < 1.0 and m.surge_optimal_lr(401, 400) < 1.0


def test_lr_factor_by_hand_and_its_closed_form() -> None:
    # surge, B_ref 256, B 1024, B_noise 600: sqrt(4) (600 + 256) / (600 + 1024) = 1712 / 1624
    assert m.lr_factor("surge", 1024, 256, 600) == pytest.approx(1712 / 1624)
    # SGD: 4 (600 + 256) / (600 + 1024) = 3424 / 1624
    assert m.lr_factor("sgd", 1024, 256, 600) == pytest.approx(3424 / 1624)
    # the ratio of the papers' formulas, computed directly
    direct = m.surge_optimal_lr(1024, 600) / m.surge_optimal_lr(256, 600)
    assert m.lr_factor("surge", 1024, 256, 600) == pytest.approx(direct)


def test_factor_ranges_over_every_b_noise() -> None:
    # k = 4: SGD between none (1) and linear (4); the surge between 1/sqrt(k) and sqrt(k)
    assert m.factor_range("sgd", 1024, 256) == pytest.approx((1.0, 4.0))
    assert m.factor_range("surge", 1024, 256) == pytest.approx((0.5, 2.0))
    # k = 1/4: mirrored
    assert m.factor_range("sgd", 64, 256) == pytest.approx((0.25, 1.0))
    assert m.factor_range("surge", 64, 256) == pytest.approx((0.5, 2.0))
    # the ends are the limits b_noise -> 0 and -> inf
    assert m.lr_factor("surge", 1024, 256, 1e-9) == pytest.approx(0.5, rel=1e-6)
    assert m.lr_factor("surge", 1024, 256, 1e12) == pytest.approx(2.0, rel=1e-6)


@pytest.mark.parametrize("model", m.LR_MODELS)
@pytest.mark.parametrize(("batch", "b_noise"), [(1024, 600.0), (64, 50.0), (4096, 1e5)])
def test_noise_for_factor_inverts_the_factor(model: m.LrModel, batch: float, b_noise: float) -> None:
    f = m.lr_factor(model, batch, 256, b_noise)
    assert m.noise_for_factor(model, batch, 256, f) == pytest.approx(b_noise, rel=1e-9)


def test_noise_for_factor_past_the_range_is_an_end() -> None:
    assert m.noise_for_factor("surge", 1024, 256, 0.4) == 0.0
    assert math.isinf(m.noise_for_factor("surge", 1024, 256, 3.0))
    with pytest.raises(ValueError, match="reference batch"):
        m.noise_for_factor("surge", 256, 256, 1.0)


def test_model_for_optimizer_family() -> None:
    assert m.model_for("AdamW") == "surge" and m.model_for("adam") == "surge"
    assert m.model_for("sgd") == "sgd"
