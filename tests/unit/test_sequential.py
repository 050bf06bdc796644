"""The adaptive-seeds rule (scalesweep.science.stats.sequential): its exact error over the
looks, and simulated studies (seeded, 1000 each): A/A keeps the nominal rate of false
directions, planted ratios of 1.2 and 1.05 at CV 5 % give their decision rates and seeds."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from scalesweep.science.stats import sequential as sq
from scalesweep.science.stats.decisions import Decision, decide_pairs
from scalesweep.science.stats.replicates import binom_cdf, observe

STUDIES = 1000
#: Monte Carlo slack for a rate of 10 % over STUDIES studies: three standard errors
SLACK = 3 * math.sqrt(0.1 * 0.9 / STUDIES)


def test_one_look_is_the_fixed_design() -> None:
    d = sq.design((5,))
    assert d.per_look == 0.9 and not d.adaptive
    assert d.error == pytest.approx(2 / 32)  # 5 of 5 on one side: 2 * (1/2)^5
    assert sq.boundary(5, 0.9) == 5 and sq.boundary(4, 0.9) is None


def test_one_sided_error_by_hand() -> None:
    # looks at 2 and 4 seeds; at 0.375 the intervals are [x(1), x(2)] (coverage 0.5) and
    # [x(2), x(3)] (coverage 1 - 2 * 5/16 = 0.375), so the boundaries are 2 of 2 and 3 of 4:
    # P(2 of 2) + P(1 of 2, then 2 of the next 2)
    per_look = 0.375
    assert sq.boundary(2, per_look) == 2 and sq.boundary(4, per_look) == 3
    assert sq.one_sided_error((2, 4), per_look) == pytest.approx(1 / 4 + 1 / 2 * 1 / 4)


def test_the_adaptive_design_keeps_its_error_and_the_naive_one_does_not() -> None:
    looks = sq.adaptive_looks(3, 12)
    d = sq.design(looks)
    assert d.adaptive and d.error <= 0.10 and d.per_look > 0.9
    # every look at the fixed-sample 90 % interval would exceed the nominal rate
    assert 2 * sq.one_sided_error(looks, 0.9) > 0.10
    # and it is the lowest per-look confidence that keeps it: the next lower candidate fails
    lower = max(c for n in looks for k in range(1, (n + 1) // 2 + 1)
                if (c := 1 - 2 * binom_cdf(k - 1, n)) < d.per_look)
    assert 2 * sq.one_sided_error(looks, lower) > 0.10


@pytest.mark.parametrize(("lo", "hi", "step"), [(2, 5, 1), (3, 10, 1), (5, 12, 1), (4, 12, 2), (3, 20, 3)])
def test_every_design_keeps_the_nominal_error(lo: int, hi: int, step: int) -> None:
    d = sq.design(sq.adaptive_looks(lo, hi, step))
    assert d.error <= 0.10 and d.looks[-1] == hi


def test_looks_and_bad_designs() -> None:
    assert sq.adaptive_looks(3, 10, 3) == (3, 6, 9, 10)
    with pytest.raises(ValueError, match="need 2 <= min <= max"):
        sq.adaptive_looks(5, 3)
    with pytest.raises(ValueError, match="need 2 <= min <= max"):
        sq.adaptive_looks(1, 3)
    with pytest.raises(ValueError, match="looks must rise"):
        sq.design((5, 5))


def _study(rng: random.Random, ratio: float, cv: float, looks: tuple[int, ...], per_look: float,
           margin: float) -> tuple[Decision, int]:
    """One simulated study: the seed shifts both arms alike (same init, same data order), each
    arm adds its own noise of ``cv``; the arm stops at the first look that decides it."""
    n_max = looks[-1]
    shared = [rng.gauss(0.0, 0.05) for _ in range(n_max)]
    base = [4.0 * math.exp(s + rng.gauss(0.0, cv)) for s in shared]
    arm = [4.0 * ratio * math.exp(s + rng.gauss(0.0, cv)) for s in shared]
    decision: Decision = "not resolved"
    for n in looks:
        def obs(xs: list[float], n: int = n) -> dict[int, object]:
            return {i: observe("interpolated", before=x, at=x, estimate=x) for i, x in enumerate(xs[:n])}
        decision, _ = decide_pairs(obs(arm), obs(base), per_look, margin)  # type: ignore[arg-type]
        if decision != "not resolved":
            return decision, n
    return decision, n_max


def _simulate(ratio: float, margin: float, looks: tuple[int, ...], per_look: float | None = None
              ) -> tuple[Counter[str], float]:
    rng = random.Random(20261125)
    d = sq.design(looks)
    runs = [_study(rng, ratio, 0.05, looks, per_look or d.per_look, margin) for _ in range(STUDIES)]
    return Counter(r[0] for r in runs), sum(r[1] for r in runs) / STUDIES


LOOKS = sq.adaptive_looks(3, 12)


def test_aa_false_directions_stay_at_the_nominal_rate() -> None:
    # margin ~0: equivalence never stops an arm, the worst case for false directions
    counts, _ = _simulate(1.0, 1e-9, LOOKS)
    false = (counts["faster"] + counts["slower"]) / STUDIES
    assert false <= 0.10 + SLACK, counts
    # with the default margin, most A/A arms are called equivalent and stop early
    counts, seeds = _simulate(1.0, 0.10, LOOKS)
    assert (counts["faster"] + counts["slower"]) / STUDIES <= 0.10 + SLACK
    assert counts["equivalent"] / STUDIES > 0.6 and seeds < 10


def test_planted_ratio_of_1_2_is_called_slower_with_about_five_seeds() -> None:
    counts, seeds = _simulate(1.2, 0.10, LOOKS)
    assert counts["slower"] / STUDIES >= 0.95 and counts["faster"] == counts["equivalent"] == 0
    assert seeds < 6


def test_planted_ratio_of_1_05_is_never_called_faster() -> None:
    counts, seeds = _simulate(1.05, 0.10, LOOKS)
    assert counts["faster"] == 0
    # inside the margin: equivalent or slower, each a real share; the rest run to max
    assert counts["equivalent"] / STUDIES > 0.2 and counts["slower"] / STUDIES > 0.2
    assert 6 < seeds < 12


def test_a_ratio_at_the_margin_is_rarely_called_equivalent() -> None:
    counts, _ = _simulate(1.10, 0.10, LOOKS)
    # equivalence at the band's edge is a one-sided error: at most half the nominal rate
    assert counts["equivalent"] / STUDIES <= 0.05 + SLACK
