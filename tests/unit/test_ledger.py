"""Scoring predictions (scalesweep.science.prediction.ledger): a hit is a finite observed median
inside the closed interval; the running hit rate counts verified predictions only."""

from __future__ import annotations

import math

import pytest

from scalesweep.science.prediction.ledger import Scored, is_hit, observed_median, running_hit_rate


@pytest.mark.parametrize(("observed", "hit"), [
    (10.0, True), (8.0, True), (12.0, True), (7.99, False), (12.01, False),
])
def test_a_hit_is_inside_the_closed_interval(observed: float, hit: bool) -> None:
    assert is_hit(observed, (8.0, 12.0)) is hit
    assert is_hit(observed, (8.0, 12.0), horizon=20.0) is hit  # a finite median needs none


@pytest.mark.parametrize(("horizon", "hit", "result"), [
    (12.5, False, "miss"),  # never within 12.5 epochs: beyond an interval that ends at 12
    (12.0, None, "censored"),  # the interval reaches the horizon: could lie at 12
    (10.0, None, "censored"),  # trained only to 10: anywhere in (10, 12] would be a hit
    (None, None, "censored"),
])
def test_a_median_that_never_reached_is_censored_at_its_horizon(
        horizon: float | None, hit: bool | None, result: str) -> None:
    assert is_hit(math.inf, (8.0, 12.0), horizon) is hit
    assert Scored(0.9, math.inf, hit).result == result


def test_results_read_pending_hit_and_miss() -> None:
    assert [Scored(0.9, None, None).result, Scored(0.9, 9.0, True).result,
            Scored(0.9, 13.0, False).result] == ["pending", "hit", "miss"]


def test_a_seed_that_never_reached_stays_in_the_observed_median() -> None:
    assert observed_median([4.0, 5.0, math.inf]) == 5.0
    assert observed_median([4.0, math.inf, math.inf]) == math.inf
    with pytest.raises(ValueError, match="epochs must be one or more positive"):
        observed_median([])


def test_the_running_hit_rate_skips_pending_and_tracks_the_nominal_coverage() -> None:
    entries = [Scored(0.9, 5.0, True), Scored(0.9, None, None), Scored(0.8, 9.0, False),
               Scored(0.9, math.inf, None), Scored(0.9, 4.0, True)]  # the 4th censored
    rates = running_hit_rate(entries)
    assert [(r.hits, r.verified) for r in rates] == [(1, 1), (1, 1), (1, 2), (1, 2), (2, 3)]
    assert [r.rate for r in rates] == [1.0, 1.0, 0.5, 0.5, pytest.approx(2 / 3)]
    assert rates[-1].nominal == pytest.approx((0.9 + 0.8 + 0.9) / 3)
    assert running_hit_rate([Scored(0.9, None, None)])[0].rate is None
