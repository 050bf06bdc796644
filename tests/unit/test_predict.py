"""Epochs to target at an unmeasured batch (scalesweep.science.prediction.epochs): the law's exact
values, the refusals by name, and the interval's coverage on synthetic studies whose truth is
known (seeded, so the counts are exact and the test is fast)."""

from __future__ import annotations

import math
import random

import pytest

from scalesweep.science.prediction.epochs import (
    EXTRAPOLATION_SLOPE,
    MAX_FACTOR,
    NOISE_SCALE_RANGE,
    TWO_POINT_FIT_ERROR,
    BatchPoint,
    PredictionRefused,
    fit_line,
    predict,
    student_t,
    widening,
)


def law(batch: float, e_min: float = 5.0, b_crit: float = 500.0) -> float:
    return e_min * (1 + batch / b_crit)


def exact(batches: tuple[float, ...], seeds: int = 5) -> list[BatchPoint]:
    return [BatchPoint(b, (law(b),) * seeds) for b in batches]


def test_the_line_recovers_e_min_and_b_crit_from_the_law() -> None:
    line = fit_line([64, 128, 256, 512], [law(b) for b in (64, 128, 256, 512)])
    assert line.e_min == pytest.approx(5.0) and line.b_crit == pytest.approx(500.0)
    assert line.scale == pytest.approx(0.0, abs=1e-12)


def test_seeds_that_agree_predict_the_law_exactly_with_only_the_two_point_floor() -> None:
    p = predict(exact((64, 256)), 128)
    assert p.median == pytest.approx(law(128))
    assert p.seeds == 0.0 and p.fit == TWO_POINT_FIT_ERROR
    assert p.ci == pytest.approx((law(128) * math.exp(-0.12), law(128) * math.exp(0.12)))
    three = predict(exact((64, 128, 256)), 512)
    assert three.median == pytest.approx(law(512)) and three.ci == pytest.approx((law(512),) * 2)


@pytest.mark.parametrize(("batch", "step"), [(1024.0, math.log(4)), (32.0, math.log(2))])
def test_an_extrapolated_interval_is_widened_by_the_calibrated_factor_of_its_step(
        batch: float, step: float) -> None:
    p = predict(exact((64, 256)), batch)  # above the largest, below the smallest
    half = TWO_POINT_FIT_ERROR * widening(step)
    assert EXTRAPOLATION_SLOPE > 0.0 and p.widened == pytest.approx(1.0 + EXTRAPOLATION_SLOPE * step)
    assert p.median == pytest.approx(law(batch))
    assert p.ci == pytest.approx((law(batch) * math.exp(-half), law(batch) * math.exp(half)))
    bare = predict(exact((64, 256)), batch, extrapolation_factor=1.0)
    assert bare.widened == 1.0 and bare.ci == pytest.approx(
        (law(batch) * math.exp(-TWO_POINT_FIT_ERROR), law(batch) * math.exp(TWO_POINT_FIT_ERROR)))


def test_the_factor_grows_with_the_step_from_one_at_the_measured_edge() -> None:
    steps = [0.0, math.log(1.2), math.log(2), math.log(4)]
    factors = [widening(s) for s in steps]
    assert factors[0] == 1.0 and factors == sorted(factors) and len(set(factors)) == 4
    for bad in (-0.1, math.inf, math.nan):
        with pytest.raises(ValueError, match="step must be finite and at least 0"):
            widening(bad)


def _relative_half_width(batch: float) -> float:
    p = predict(exact((64, 256)), batch)
    return math.log(p.ci[1] / p.median)


def test_a_prediction_two_times_out_is_wider_than_one_a_fifth_out() -> None:
    # the bare two-point interval is the same 12 % at every step: only the factor tells them apart
    near, far = _relative_half_width(256 * 1.2), _relative_half_width(512)
    assert near == pytest.approx(TWO_POINT_FIT_ERROR * widening(math.log(1.2)))
    assert far == pytest.approx(TWO_POINT_FIT_ERROR * widening(math.log(2))) and far > near * 1.3
    # and below the smallest, measured from it (the nearest), not from the largest
    assert _relative_half_width(32) == pytest.approx(far)
    # just outside the measured batches is hardly wider than at their edge: no jump
    assert _relative_half_width(256 * 1.001) == pytest.approx(TWO_POINT_FIT_ERROR, rel=1e-2)


def test_a_constant_factor_given_is_applied_whatever_the_step() -> None:
    for batch in (256 * 1.2, 512.0):
        assert predict(exact((64, 256)), batch, extrapolation_factor=1.5).widened == 1.5


@pytest.mark.parametrize("batch", [64.0, 100.0, 256.0])
def test_an_interpolated_interval_is_left_alone(batch: float) -> None:
    p = predict(exact((64, 256)), batch)  # the measured ends count as inside
    assert p.widened == 1.0
    assert p.ci == pytest.approx((law(batch) * math.exp(-TWO_POINT_FIT_ERROR),
                                  law(batch) * math.exp(TWO_POINT_FIT_ERROR)))


def test_the_noise_scale_alone_is_not_widened() -> None:
    # one batch size: the noise scale's own range is the interval, not the line's
    seeds = [BatchPoint(64, (4.0, 4.5, 5.0, 5.5, 6.0))]
    p = predict(seeds, 256, noise_scale=100.0)
    assert p.seeds > 0 and p.widened == 1.0
    assert p.ci == predict(seeds, 256, noise_scale=100.0, extrapolation_factor=1.0).ci


@pytest.mark.parametrize("factor", [0.5, math.inf, math.nan])
def test_an_extrapolation_factor_that_would_narrow_or_is_not_finite_is_refused(factor: float) -> None:
    with pytest.raises(ValueError, match="extrapolation_factor must be finite and at least 1"):
        predict(exact((64, 256)), 1024, extrapolation_factor=factor)


def test_the_noise_scale_alone_spans_its_range_of_critical_batches() -> None:
    p = predict(exact((64,)), 256, noise_scale=100.0)
    lo_bc, hi_bc = (100.0 * f for f in NOISE_SCALE_RANGE)
    through = [law(64) * (1 + 256 / bc) / (1 + 64 / bc) for bc in (hi_bc, lo_bc)]
    assert p.ci == pytest.approx(tuple(through))
    assert p.noise_scale_epochs == pytest.approx(tuple(through))


def test_a_noise_scale_that_disagrees_with_the_fit_widens_the_interval_to_both() -> None:
    alone = predict(exact((64, 128, 256)), 512)
    both = predict(exact((64, 128, 256)), 512, noise_scale=50.0)
    assert both.median == alone.median
    assert both.noise_scale_epochs is not None
    assert both.ci[1] == pytest.approx(both.noise_scale_epochs[1]) and both.ci[1] > alone.ci[1] * 1.3


@pytest.mark.parametrize(("points", "batch", "noise", "says"), [
    (exact((64,)), 256, None, "one batch size (64) and no noise scale"),
    (exact((64, 128)), 128 * MAX_FACTOR * 1.01, None, "more than 4x outside the measured 64..128"),
    (exact((64, 128)), 64 / MAX_FACTOR / 1.01, None, "more than 4x outside"),
    ([BatchPoint(64, (4.0, math.inf, math.inf)), *exact((128,))], 256, None,
     "at batch 64 the median seed never reached the target"),
    (exact((64,)), 256, -1.0, "the noise scale must be finite and positive, but is -1.0"),
])
def test_data_that_cannot_support_a_prediction_is_refused_by_name(
        points: list[BatchPoint], batch: float, noise: float | None, says: str) -> None:
    with pytest.raises(PredictionRefused) as err:
        predict(points, batch, noise_scale=noise)
    assert any(says in r for r in err.value.reasons), err.value.reasons


def test_a_seed_that_never_reached_stays_in_its_median() -> None:
    # 2 of 5 seeds never reached at 64: the median is the slowest of the three that did
    points = [BatchPoint(64, (4.0, 4.2, 4.4, math.inf, math.inf)), *exact((128, 256))]
    assert points[0].median == 4.4
    assert predict(points, 512).median > 0


def test_student_t_quantiles_match_the_tables() -> None:
    for dof, q95 in ((1, 6.3138), (2, 2.9200), (5, 2.0150), (30, 1.6973)):
        assert student_t(0.95, dof) == pytest.approx(q95, abs=1e-3)


def _coverage(batches: tuple[float, ...], target: float, cv: float, studies: int = 100) -> float:
    rng = random.Random(7)
    hits = 0
    for i in range(studies):
        points = [BatchPoint(b, tuple(law(b) * math.exp(rng.gauss(0, cv)) for _ in range(5)))
                  for b in batches]
        # the bare method: the law holds here, and the widening is for real models that bend
        lo, hi = predict(points, target, draws=300, seed=i, extrapolation_factor=1.0).ci
        hits += lo <= law(target) <= hi
    return hits / studies


@pytest.mark.parametrize(("batches", "target"), [((64, 128, 256, 512), 1024), ((64, 128, 512), 256)])
def test_the_interval_covers_the_truth_at_least_at_its_nominal_rate_when_the_law_holds(
        batches: tuple[float, ...], target: float) -> None:
    # nominal 90 %: seeds (bootstrap) and fit (moments beyond the seeds) together reach it
    # without the 100 % of an interval that counts the seeds twice
    assert 0.88 <= _coverage(batches, target, cv=0.05) <= 0.99
