"""scalesweep.science.stats.convergence on hand-made curves with exact expected numbers."""

from __future__ import annotations

import math
from typing import Any

import pytest

from scalesweep.science.stats.convergence import (
    Crossing,
    EvalPoint,
    best_value,
    first_crossing,
    locate,
    resolve_target,
    scaling_efficiency,
    smooth,
    speedup,
)


def make_curve(values: list[float], every: int = 100, batch: int = 64) -> list[EvalPoint]:
    """Evals every ``every`` updates from update 0; 200 updates per epoch, 0.1 s per update."""
    return [
        EvalPoint(
            update=i * every,
            samples_seen=i * every * batch,
            epoch=i * every / 200,
            wall_s=i * every * 0.1,
            value=v,
        )
        for i, v in enumerate(values)
    ]


LOSS = make_curve([4.0, 3.0, 2.0, 1.0])


# --- invalid arguments first -------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [-0.1, 1.0, 1.5, math.nan])
def test_smooth_rejects_alpha_outside_unit_interval(alpha: float) -> None:
    with pytest.raises(ValueError, match="alpha must be in"):
        smooth([1.0, 2.0], alpha)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target": 1.0, "mode": "mean"}, "mode must be one of"),
        ({"target": math.nan}, "target must be finite"),
        ({"target": math.inf}, "target must be finite"),
        ({"target": 1.0, "smoothing": 1.0}, "alpha must be in"),
    ],
)
def test_first_crossing_rejects_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        first_crossing(LOSS, **kwargs)


def test_first_crossing_rejects_unordered_curve() -> None:
    with pytest.raises(ValueError, match="ordered by update, but got update 0 after 100"):
        first_crossing([LOSS[1], LOSS[0]], 2.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "mean", "value": 1.0}, "mode must be one of"),
        ({"mode": "min"}, "exactly one of value and relative"),
        ({"mode": "min", "value": 1.0, "relative": 0.1}, "exactly one of value and relative"),
        ({"mode": "min", "value": math.nan}, "value must be finite"),
        ({"mode": "min", "relative": -0.1, "baseline_best": 1.0}, "relative must be finite"),
        ({"mode": "min", "relative": math.inf, "baseline_best": 1.0}, "relative must be finite"),
        ({"mode": "min", "relative": 0.1}, "needs a finite baseline_best"),
        ({"mode": "min", "relative": 0.1, "baseline_best": math.nan}, "finite baseline_best"),
    ],
)
def test_resolve_target_rejects_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        resolve_target(**kwargs)


def test_speedup_rejects_unknown_axis() -> None:
    c = Crossing(1.0, 1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="by must be one of"):
        speedup(c, c, by="steps")  # type: ignore[arg-type]


@pytest.mark.parametrize(("b", "b0"), [(0, 64), (64, 0), (-1, 64)])
def test_scaling_efficiency_rejects_non_positive_batches(b: int, b0: int) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        scaling_efficiency(2.0, b, b0)


def test_best_value_rejects_bad_mode() -> None:
    with pytest.raises(ValueError, match="mode must be one of"):
        best_value([1.0], "mean")  # type: ignore[arg-type]


# --- behaviour ----------------------------------------------------------------------------------


def test_smooth_is_ema_seeded_with_first_value() -> None:
    assert smooth([4.0, 3.0, 2.0, 1.0], 0.0) == [4.0, 3.0, 2.0, 1.0]
    assert smooth([4.0, 3.0, 2.0, 1.0], 0.5) == [4.0, 3.5, 2.75, 1.875]
    assert smooth([], 0.5) == []


def test_crossing_is_interpolated_linearly_in_the_metric() -> None:
    # 2.5 lies halfway between the evals at update 100 (3.0) and 200 (2.0).
    assert first_crossing(LOSS, 2.5) == Crossing(
        updates_to_target=150.0,
        samples_to_target=9600.0,
        epochs_to_target=0.75,
        seconds_to_target=15.0,
    )
    # A quarter of the way from 3.0 to 2.0.
    c = first_crossing(LOSS, 2.75)
    assert c is not None
    assert c.updates_to_target == 125.0
    assert c.epochs_to_target == 0.625


def test_crossing_exactly_on_an_eval_is_that_eval() -> None:
    assert first_crossing(LOSS, 2.0) == Crossing(200.0, 12800.0, 1.0, 20.0)


def test_first_eval_already_at_target_gives_its_coordinates() -> None:
    curve = make_curve([4.0, 3.0], every=100)
    late = [EvalPoint(50, 3200, 0.25, 5.0, 4.0), *curve[1:]]
    assert first_crossing(late, 5.0) == Crossing(50.0, 3200.0, 0.25, 5.0)


def test_never_reached_is_none() -> None:
    assert first_crossing(LOSS, 0.5) is None
    assert first_crossing([], 1.0) is None


def test_smoothing_delays_the_crossing() -> None:
    # Smoothed: 4, 3.5, 2.75, 1.875 -> 2.5 lies 0.25/0.875 = 2/7 of the way from update 200.
    c = first_crossing(LOSS, 2.5, smoothing=0.5)
    assert c is not None
    assert c.updates_to_target == pytest.approx(200 + 100 * 2 / 7)
    assert c.epochs_to_target == pytest.approx(1.0 + 0.5 * 2 / 7)
    assert c.samples_to_target == pytest.approx((200 + 100 * 2 / 7) * 64)


def test_max_mode_uses_greater_or_equal() -> None:
    acc = make_curve([0.1, 0.4, 0.7, 0.9])
    c = first_crossing(acc, 0.8, mode="max")
    assert c is not None
    assert c.updates_to_target == pytest.approx(250.0)
    assert first_crossing(acc, 0.7, mode="max") == Crossing(200.0, 12800.0, 1.0, 20.0)
    assert first_crossing(acc, 0.95, mode="max") is None
    # The same curve read as a loss meets 0.8 at once.
    assert first_crossing(acc, 0.8, mode="min") == Crossing(0.0, 0.0, 0.0, 0.0)


def test_non_finite_evals_never_count() -> None:
    curve = make_curve([4.0, math.nan, 1.0])
    # Without smoothing the eval after the NaN meets the target at its own coordinates.
    assert first_crossing(curve, 2.0) == Crossing(200.0, 12800.0, 1.0, 20.0)
    # With smoothing the NaN poisons every later value: never reached.
    assert first_crossing(curve, 2.0, smoothing=0.5) is None
    assert first_crossing(make_curve([4.0, math.inf, 1.0]), 2.0) == Crossing(
        200.0, 12800.0, 1.0, 20.0
    )


def test_resolve_target_absolute_and_relative() -> None:
    assert resolve_target("min", value=1.25) == 1.25
    assert resolve_target("min", relative=0.5, baseline_best=2.0) == 3.0
    assert resolve_target("min", relative=0.0, baseline_best=2.0) == 2.0
    assert resolve_target("max", relative=0.5, baseline_best=0.5) == 0.25
    # Slack is a fraction of |best|, so a negative min metric still loosens upwards.
    assert resolve_target("min", relative=0.5, baseline_best=-2.0) == -1.0


def test_relative_target_is_reached_by_the_baseline() -> None:
    best = best_value(smooth([p.value for p in LOSS], 0.5))
    assert best == 1.875
    target = resolve_target("min", relative=0.0, baseline_best=best)
    assert first_crossing(LOSS, target, smoothing=0.5) == Crossing(300.0, 19200.0, 1.5, 30.0)


def test_best_value() -> None:
    assert best_value([3.0, math.nan, 1.0, 2.0]) == 1.0
    assert best_value([0.3, 0.9, math.inf], "max") == 0.9
    assert best_value([math.nan]) is None
    assert best_value([]) is None


def test_speedup_on_each_clock_and_efficiency() -> None:
    # 16 workers: a quarter of the updates, the same samples and epochs, 40% of the time.
    trial = Crossing(
        updates_to_target=50.0,
        samples_to_target=12800.0,
        epochs_to_target=1.0,
        seconds_to_target=8.0,
    )
    base = Crossing(
        updates_to_target=200.0,
        samples_to_target=12800.0,
        epochs_to_target=1.0,
        seconds_to_target=20.0,
    )
    assert speedup(trial, base) == 4.0  # updates by default
    assert speedup(trial, base, by="samples") == 1.0
    assert speedup(trial, base, by="epochs") == 1.0
    assert speedup(trial, base, by="seconds") == 2.5
    assert scaling_efficiency(4.0, 256, 64) == 1.0
    assert scaling_efficiency(2.0, 256, 64) == 0.5
    assert scaling_efficiency(None, 256, 64) is None


def test_speedup_undefined_cases() -> None:
    c = Crossing(100.0, 1.0, 1.0, 1.0)
    assert speedup(None, c) is None
    assert speedup(c, None) is None
    assert speedup(Crossing(0.0, 0.0, 0.0, 0.0), c) is None


# -- brackets: where the evals allow the crossing to be (issue: crossings the evals cannot resolve)


def test_locate_interpolated_keeps_the_evals_around_the_crossing() -> None:
    where = locate(LOSS, 2.5)
    assert where.kind == "interpolated"
    assert where.crossing == first_crossing(LOSS, 2.5)
    assert where.bracket("updates") == (100.0, 200.0)
    assert where.bracket("epochs") == (0.5, 1.0)
    obs = where.observation("epochs")
    assert (obs.lo, obs.est_lo, obs.est_hi, obs.hi) == (0.5, 0.75, 0.75, 1.0)


def test_a_clock_that_went_back_across_the_crossing_gives_no_reading_on_that_clock() -> None:
    """A loop restarted with its own clock: the eval that met the target shows fewer seconds
    than the one before it. The seconds reading is withheld; the other clocks are measured."""
    restarted = [*LOSS[:2], EvalPoint(LOSS[2].update, LOSS[2].samples_seen, LOSS[2].epoch, 1.5,
                                      LOSS[2].value), *LOSS[3:]]
    where = locate(restarted, 2.5)
    assert where.bracket("seconds") == (10.0, 1.5)
    assert where.observation("seconds") is None
    obs = where.observation("epochs")
    assert obs is not None and (obs.lo, obs.est_lo, obs.hi) == (0.5, 0.75, 1.0)
    assert locate(LOSS, 2.5).observation("seconds") is not None


def test_locate_at_first_eval_is_a_bound_not_a_measurement() -> None:
    late = LOSS[1:]  # first eval at update 100, where 3.0 already meets 3.5
    where = locate(late, 3.5)
    assert where.kind == "at_first_eval" and where.crossing is None
    assert where.bracket("updates") == (0.0, 100.0)
    obs = where.observation("updates")
    assert (obs.lo, obs.est_lo, obs.est_hi, obs.hi) == (0.0, 0.0, 100.0, 100.0)


def test_locate_never_is_after_the_last_eval() -> None:
    where = locate(LOSS, 0.5)
    assert where.kind == "never" and where.at is None
    assert where.bracket("epochs") == (LOSS[-1].epoch, math.inf)
    assert locate([], 1.0).bracket("updates") == (0.0, math.inf)
