"""Seeds as replicates (scalesweep.science.stats.replicates): medians with censoring, order-statistic
intervals off the brackets, paired ratios and their signed-rank (Hodges-Lehmann) intervals,
resolved or not — on hand-made observations whose answers follow from the definitions."""

from __future__ import annotations

import math

import pytest

from scalesweep.science.stats.replicates import (
    INF,
    Estimate,
    Observation,
    binom_cdf,
    compare,
    log_ratio_bounds,
    median_interval,
    observe,
    order_statistic_rank,
    paired_ratios,
    ratio,
    seeds_needed,
)
from scalesweep.science.stats.signed_rank import UNBOUNDED


def value(x: float, spacing: float = 0.5) -> Observation:
    """An interpolated crossing at x between evals spaced ``spacing`` apart."""
    lo = math.floor(x / spacing) * spacing
    return observe("interpolated", before=lo, at=lo + spacing, estimate=x)


NEVER = observe("never", before=20.0, at=INF)


def test_binomial_and_order_statistic_coverage_are_exact() -> None:
    assert binom_cdf(0, 3) == 1 / 8
    assert binom_cdf(1, 5) == 6 / 32
    assert order_statistic_rank(3) == (1, 0.75)  # [min, max] of 3 covers the median 75 %
    assert order_statistic_rank(4) == (1, 0.875)
    assert order_statistic_rank(5) == (1, 1 - 2 / 32)  # 93.75 %
    # 10 seeds: [x_(2), x_(9)] covers 1 - 2 * 11/1024 = 97.9 %, x_(3)..x_(8) only 89.1 %
    k, cover = order_statistic_rank(10)
    assert (k, cover) == (2, 1 - 2 * 11 / 1024)
    assert order_statistic_rank(10, confidence=0.85)[0] == 3


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 1.5])
def test_confidence_outside_the_open_unit_interval_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="confidence must be in"):
        order_statistic_rank(5, bad)


def test_an_observation_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="0 <= lo <= est_lo"):
        Observation(2.0, 1.0, 2.0, 2.0)
    with pytest.raises(ValueError, match="before <= estimate <= at"):
        observe("interpolated", before=1.0, at=2.0, estimate=3.0)


def test_median_of_values_and_its_interval_comes_from_the_brackets() -> None:
    obs = [value(6.6), value(7.67), value(9.45)]
    mi = median_interval(obs)
    assert mi.n == 3
    assert mi.median.kind == "value" and mi.median.value == 7.67
    # 3 seeds: [min, max] with 75 % coverage, ends widened to the evals around each crossing
    assert mi.ci == (6.5, 9.5) and mi.coverage == 0.75
    assert mi.spread == (6.5, 9.5)


def test_a_seed_that_never_reached_is_censored_not_dropped() -> None:
    mi = median_interval([value(8.0), NEVER, value(10.0)])
    assert mi.median.value == 10.0  # the mean of the reached two (9.0) would drop a seed
    assert mi.ci == (8.0, INF)  # the upper end is "never"
    mi = median_interval([value(8.0), NEVER, NEVER])
    assert mi.median.kind == "never" and mi.median.text() == "never"
    mi = median_interval([value(8.0), NEVER])  # even n: half never is a never median
    assert mi.median.kind == "never"


def test_one_seed_has_no_interval() -> None:
    mi = median_interval([value(8.2)])
    assert mi.median.value == 8.2
    assert mi.ci is None and mi.coverage is None  # never invented
    assert median_interval([]).n == 0


def test_ties_are_kept() -> None:
    mi = median_interval([value(7.0), value(7.0), value(7.0), value(9.0)])
    assert mi.median.value == 7.0
    assert mi.ci == (7.0, 9.5) and mi.coverage == 0.875


def test_at_first_eval_makes_the_median_a_bound() -> None:
    first = observe("at_first_eval", before=0.0, at=1.0)
    mi = median_interval([first, first, value(3.2)])
    assert mi.median.kind == "at_most" and mi.median.text() == "≤ 1"
    assert mi.ci == (0.0, 3.5)


def test_ratio_carries_both_brackets() -> None:
    r = ratio(value(8.0), value(4.0))  # 8 in [8, 8.5], 4 in [4, 4.5]
    assert (r.est_lo, r.est_hi) == (2.0, 2.0)
    assert r.lo == 8.0 / 4.5 and r.hi == 8.5 / 4.0
    # a side that never reached makes the estimate a bound: at least 20 / 4 = 5x slower
    never_over_reached = ratio(NEVER, value(4.0))
    assert (never_over_reached.est_lo, never_over_reached.est_hi) == (5.0, INF)
    assert never_over_reached.lo == 20.0 / 4.5
    assert Estimate(never_over_reached.est_lo, never_over_reached.est_hi).text() == "≥ 5"
    reached_over_never = ratio(value(4.0), NEVER)
    assert (reached_over_never.est_lo, reached_over_never.est_hi) == (0.0, 4.0 / 20.0)
    assert reached_over_never.hi == 4.5 / 20.0
    both_never = ratio(NEVER, NEVER)
    assert (both_never.lo, both_never.hi) == (0.0, INF)
    assert Estimate(both_never.est_lo, both_never.est_hi).kind == "unknown"
    first = observe("at_first_eval", before=0.0, at=1.0)
    assert ratio(first, value(4.0)).lo == 0.0 and ratio(first, value(4.0)).hi == 1.0 / 4.0


def test_pairs_are_by_seed() -> None:
    pairs = paired_ratios({0: value(8.0), 1: value(6.0), 2: value(9.0)},
                          {0: value(4.0), 1: value(6.0)})
    assert sorted(pairs) == [0, 1]
    assert pairs[1].est_lo == 1.0


def test_the_issue_example_with_three_seeds_is_not_resolved() -> None:
    # issue #11: one target for all seeds, paired ratios 1.11, 0.90, 1.04 -> no direction
    base = {0: value(6.6), 1: value(7.67), 2: value(9.45)}
    linear = {0: value(7.33), 1: value(6.89), 2: value(9.84)}
    c = compare(linear, base)
    assert c.direction == "unresolved"
    logs = sorted(math.log(a / b) for a, b in ((7.33, 6.6), (6.89, 7.67), (9.84, 9.45)))
    walsh = sorted((x + y) / 2 for i, x in enumerate(logs) for y in logs[i:])
    # the Hodges-Lehmann estimate: the median of the 6 Walsh averages, on the ratio scale
    assert c.ratios.median.value == pytest.approx(math.exp((walsh[2] + walsh[3]) / 2))
    # 3 pairs: only [W(1), W(6)] = [min, max] exists, covering 1 - 2/8 = 75 %
    assert c.ratios.ci == pytest.approx((math.exp(logs[0]), math.exp(logs[-1])))
    assert c.ratios.coverage == 0.75


def test_three_seeds_that_agree_still_cannot_resolve_at_90_percent() -> None:
    base = {s: value(8.0) for s in range(3)}
    never = {s: NEVER for s in range(3)}
    c = compare(never, base)
    assert c.n_above == 3 and c.direction == "unresolved"  # [min, max] of 3: only 75 %
    # never reached by the last eval: at the horizon, 20 / 8, and unbounded above
    assert c.ratios.median.text() == "≥ 2.5" and c.ratios.ci == (2.5, INF)
    assert c.seeds_needed is None  # a fixed design advises no more seeds
    assert compare(never, base, max_seeds=10).seeds_needed == 5  # 5 that agree: 93.75 %
    assert compare(never, base, confidence=0.7).direction == "above"


def test_five_seeds_that_agree_resolve() -> None:
    base = {s: value(8.0 + s) for s in range(5)}
    slow = {s: NEVER for s in range(5)}
    fast = {s: value(3.0 + s) for s in range(5)}
    assert compare(slow, base).direction == "above"
    assert compare(fast, base).direction == "below"
    assert compare(fast, base, max_seeds=10).seeds_needed is None  # decided


def test_magnitudes_decide_where_signs_alone_cannot() -> None:
    # 7 pairs: 6 clearly slower (x1.3) and one a little faster (x0.98). The sign test's
    # widest interval at 7 pairs needs all 7 on one side for 90 %; the signed rank weighs
    # the stray pair by its small size: its interval [W(4), W(25)] excludes 1
    base = {s: value(8.0 + 0.1 * s) for s in range(7)}
    trial = {s: value((8.0 + 0.1 * s) * (0.98 if s == 3 else 1.3)) for s in range(7)}
    c = compare(trial, base)
    assert c.direction == "above" and c.n_above == 6 and c.n_below == 1
    assert c.ratios.coverage is not None and c.ratios.coverage >= 0.9
    assert c.ratios.ci is not None and 1.0 < c.ratios.ci[0] < 1.3


def test_a_pair_is_read_at_its_interpolated_crossing() -> None:
    # seed 4's crossings lie in the same eval bracket, yet interpolated 8.2 / 8.0 > 1
    base = {s: value(8.0) for s in range(5)}
    trial = {0: value(12.0), 1: value(12.0), 2: value(12.0), 3: value(12.0), 4: value(8.2)}
    c = compare(trial, base)
    assert c.n_above == 5 and c.direction == "above"
    assert c.n_tied == 1  # seed 4: both crossings measured, their eval brackets straddle 1


def test_only_measured_crossings_that_straddle_one_are_grid_ties() -> None:
    base = {0: value(8.0), 1: value(8.0), 2: NEVER, 3: observe("at_first_eval", before=0.0, at=0.5)}
    trial = {0: value(8.2), 1: value(12.0), 2: NEVER, 3: observe("at_first_eval", before=0.0, at=0.5)}
    c = compare(trial, base)
    # 0: tied within the grid; 1: clearly above; 2: both never (no information, not the
    # grid's fault); 3: both at the first eval (a bound, no estimate)
    assert (c.n_above, c.n_below, c.n_tied) == (2, 0, 1)


def test_censored_pairs_enter_clipped_and_an_arm_that_never_reached_is_unbounded_above() -> None:
    first = observe("at_first_eval", before=0.0, at=0.5)
    # the arm never reached: at least the horizon over the baseline's crossing, no upper bound
    assert log_ratio_bounds(NEVER, value(5.0)) == (pytest.approx(math.log(20.0 / 5.0)), UNBOUNDED)
    # the baseline never reached: the arm's crossing over the horizon, for both ends
    assert log_ratio_bounds(value(5.0), NEVER) == pytest.approx((math.log(5.0 / 20.0),) * 2)
    # both never, or both at the first eval: no information at all
    assert log_ratio_bounds(NEVER, NEVER) == (-UNBOUNDED, UNBOUNDED)
    assert log_ratio_bounds(first, first) == (-UNBOUNDED, UNBOUNDED)
    # the baseline met the target at its first eval: at most that eval, unbounded above
    assert log_ratio_bounds(value(5.0), first) == (pytest.approx(math.log(10.0)), UNBOUNDED)
    assert log_ratio_bounds(first, value(5.0)) == pytest.approx((math.log(0.1),) * 2)


def test_an_estimate_between_a_measured_and_a_half_unbounded_walsh_average_reads_never() -> None:
    # one seed never reached, two were a little faster: the estimate's two middle Walsh
    # averages are -0.02 and (U - 0.05) / 2, whose mean lies just under U / 4; it is an
    # unbounded ratio (+inf), not a number too large for exp
    arm = {0: NEVER, 1: value(4.75 * math.exp(-0.05), 0.01), 2: value(4.75 * math.exp(-0.02), 0.01)}
    base = {s: value(4.75, 0.01) for s in range(3)}
    c = compare(arm, base, 0.5)
    assert c.ratios.median.hi == INF and 1.0 < c.ratios.median.lo < 20.0 / 4.75


def test_seeds_needed_projects_the_pairs_within_the_design() -> None:
    lows = [math.log(1.3)] * 3
    # 3 pairs that agree: 5 would reach 93.75 % at 90 %
    assert seeds_needed(lows, lows, 10, lambda n: 0.9) == 5
    # pairs split evenly never decide
    assert seeds_needed([0.1, -0.1], [0.1, -0.1], 10, lambda n: 0.9) is None
    assert seeds_needed([], [], 10, lambda n: 0.9) is None
    # never past the design's most seeds
    assert seeds_needed(lows, lows, 4, lambda n: 0.9) is None
