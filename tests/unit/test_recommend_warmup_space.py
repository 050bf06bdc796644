"""The warmup at M (scalesweep.science.recommend.warmup: held in samples, Goyal et al. 2017,
unless the arms at N show another rule winning on every seed) and the low end of solve's lr
factor range from the measured noise scale (scalesweep.science.recommend.space), by hand."""

from __future__ import annotations

import math

import pytest

from scalesweep.science.recommend.space import lr_low
from scalesweep.science.recommend.warmup import updates_at, warmup_at
from scalesweep.science.solve import default_space


def test_warmup_held_in_samples() -> None:
    # 1000 updates of 256 samples = 256 000 samples = 250 updates of 1024
    got = warmup_at(1000, 256, 1024)
    assert got.updates == pytest.approx(250.0) and got.rule == "scaled" and "Goyal" in got.source
    assert updates_at("fixed", 1000, 256, 1024) == 1000.0


def test_arms_overrule_samples_only_when_every_shared_seed_agrees() -> None:
    scaled = {0: 1.10, 1: 1.05, 2: 1.20}
    won = warmup_at(1000, 256, 1024, {"scaled": scaled, "fixed": {0: 1.0, 1: 1.0, 2: 1.1}})
    assert won.rule == "fixed" and won.updates == 1000.0 and "3 of 3" in won.source
    split = warmup_at(1000, 256, 1024, {"scaled": scaled, "fixed": {0: 1.0, 1: 1.2, 2: 1.1}})
    assert split.rule == "scaled" and split.updates == pytest.approx(250.0)
    assert any("2 of 3" in n for n in split.notes)
    two = warmup_at(1000, 256, 1024, {"scaled": {0: 1.1, 1: 1.1}, "fixed": {0: 1.0, 1: 1.0}})
    assert two.rule == "scaled"  # two seeds: too few to overrule


def test_lr_low_from_the_noise_scale_surge() -> None:
    # k = 4, B_noise 300 (the band's low end): sqrt(4) (300 + 256) / (300 + 1024) = 1112 / 1324,
    # one grid step (sqrt 2) lower
    got = lr_low("surge", 1024, 256, 300.0)
    assert got.low == pytest.approx(1112 / 1324 / math.sqrt(2))
    assert got.low < default_space(4, 4.0, 1e-3, 100).lr_factor.low  # below solve's sqrt(k)
    assert "300" in got.reason and "surge" in got.reason


def test_lr_low_without_a_noise_scale_goes_below_1x() -> None:
    got = lr_low("surge", 1024, 256, None)
    assert got.low == pytest.approx(1 / math.sqrt(2)) and got.low <= 1.0
    assert "no noise scale" in got.reason
    assert lr_low("sgd", 1024, 256, math.nan).low <= 1.0


def test_lr_low_never_above_solve_default() -> None:
    # SGD with a large noise scale puts the best near linear: the default sqrt(k) = 2 stays
    got = lr_low("sgd", 1024, 256, 3000.0)
    assert got.low == pytest.approx(2.0) and "already" in got.reason
