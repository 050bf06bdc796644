"""Decisions against the baseline (scalesweep.science.stats.decisions) on hand-made paired data:
faster, slower, equivalent and not resolved, the band's edges, censored seeds, bad margins."""

from __future__ import annotations

import math

import pytest

from scalesweep.science.stats.decisions import band, check_margin, decide, decide_pairs
from scalesweep.science.stats.replicates import INF, Observation, observe


def _exact(values: dict[int, float]) -> dict[int, Observation]:
    return {s: observe("interpolated", before=v, at=v, estimate=v) for s, v in values.items()}


def test_band_is_symmetric_on_a_log_scale() -> None:
    lo, hi = band(0.10)
    assert hi == pytest.approx(1.1) and lo == pytest.approx(1 / 1.1)
    assert math.log(hi) == pytest.approx(-math.log(lo))


@pytest.mark.parametrize(("ci", "expected"), [
    ((1.02, 1.3), "slower"),
    ((0.7, 0.95), "faster"),
    ((0.95, 1.05), "equivalent"),
    ((1.01, 1.08), "equivalent"),        # resolved slower, but by less than the margin
    ((1 / 1.1, 1.1), "equivalent"),      # the band's own edges are inside
    ((1 / 1.1 - 1e-9, 1.05), "not resolved"),
    ((0.95, 1.1 + 1e-9), "not resolved"),
    ((0.9, 1.2), "not resolved"),
    ((1.05, INF), "slower"),             # a seed that never reached: slower, never equivalent
    ((0.95, INF), "not resolved"),
])
def test_decide_reads_the_interval_against_one_and_the_band(ci: tuple[float, float], expected: str) -> None:
    assert decide(ci, True, 0.10) == expected


def test_too_few_seeds_decide_nothing() -> None:
    assert decide((1.2, 1.3), False, 0.10) == "not resolved"
    assert decide(None, True, 0.10) == "not resolved"


@pytest.mark.parametrize("margin", [0, -0.1, 1, 1.5, math.nan, math.inf, True, "0.1"])
def test_a_margin_must_be_a_positive_number_below_one(margin: object) -> None:
    with pytest.raises(ValueError, match=r"equivalence_margin must be a number with 0 < margin < 1, but got"):
        check_margin(margin)  # type: ignore[arg-type]


def test_pairs_five_seeds_slower_faster_equivalent() -> None:
    base = _exact({s: 4.0 for s in range(5)})
    slower = _exact({0: 4.6, 1: 4.8, 2: 5.0, 3: 4.5, 4: 4.9})
    faster = _exact({0: 3.0, 1: 3.2, 2: 3.4, 3: 3.1, 4: 3.3})
    same = _exact({0: 3.9, 1: 4.1, 2: 4.0, 3: 4.05, 4: 3.95})
    assert decide_pairs(slower, base, 0.9, 0.1)[0] == "slower"
    assert decide_pairs(faster, base, 0.9, 0.1)[0] == "faster"
    decision, comparison = decide_pairs(same, base, 0.9, 0.1)
    assert decision == "equivalent" and comparison.ratios.ci == pytest.approx((3.9 / 4, 4.1 / 4))


def test_pairs_with_one_seed_the_other_way_are_not_resolved_at_five_seeds() -> None:
    base = _exact({s: 4.0 for s in range(5)})
    mixed = _exact({0: 4.6, 1: 4.8, 2: 5.0, 3: 4.5, 4: 3.9})
    assert decide_pairs(mixed, base, 0.9, 0.1)[0] == "not resolved"


def test_a_seed_that_never_reached_keeps_the_arm_from_equivalence() -> None:
    base = _exact({s: 4.0 for s in range(5)})
    trial = _exact({0: 4.0, 1: 4.1, 2: 3.9, 3: 4.0})
    trial[4] = observe("never", before=6.0, at=0.0)
    decision, comparison = decide_pairs(trial, base, 0.9, 0.1)
    assert comparison.ratios.ci is not None and comparison.ratios.ci[1] == INF
    assert decision == "not resolved"


def test_seeds_only_one_arm_has_are_not_paired() -> None:
    base = _exact({s: 4.0 for s in range(8)})
    trial = _exact({s: 5.0 for s in range(5)})
    decision, comparison = decide_pairs(trial, base, 0.9, 0.1)
    assert comparison.ratios.n == 5 and decision == "slower"
