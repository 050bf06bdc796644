"""The adaptive design's error rate, reproduced by simulation through the real decision code
(scalesweep.science.stats.decisions.decide_pairs at the design's per-look confidence) and
held to the exact figure of scalesweep.science.stats.sequential **from both sides**, tightly
enough that reading every look at the naive 90 % fails the same check (issue #31, item 6).

Point crossings (no eval brackets), no censoring and a margin of ~0 (equivalence never stops
an arm) are the case in which the design's error is attained exactly: brackets, censoring and
equivalence only lower it, which benchmarks/calibration.py measures on realistic curves.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import yaml

from scalesweep.science.stats import replicates
from scalesweep.science.stats import sequential as sq
from scalesweep.science.stats.decisions import decide_pairs
from scalesweep.science.stats.replicates import Observation, observe

ROOT = Path(__file__).resolve().parents[2]
#: enough A/A studies that 3 standard errors around the exact error exclude the naive design's
STUDIES = 8000
#: ~0: the band is empty, so only a direction can stop an arm (the design's worst case)
NO_MARGIN = 1e-9


def shipped_looks() -> tuple[int, ...]:
    """The looks of the shipped study's replicates (sweeps/wenet_4v16.yaml)."""
    rep = yaml.safe_load((ROOT / "sweeps" / "wenet_4v16.yaml").read_text())["replicates"]
    return sq.adaptive_looks(rep["min"], rep["max"], rep.get("step", 1))


def _point(x: float) -> Observation:
    return observe("interpolated", before=x, at=x, estimate=x)


def false_direction_rate(looks: tuple[int, ...], per_look: float, seed: int) -> tuple[float, float]:
    """A/A studies stopped at the first look that decides: the share that ended slower or
    faster, and its standard error. A seed shifts both arms alike (same init and data order),
    each adds its own noise: the paired ratios' median is exactly 1."""
    rng = random.Random(seed)
    wrong = 0
    for _ in range(STUDIES):
        shared = [rng.gauss(0.0, 0.05) for _ in range(looks[-1])]
        arm = {s: _point(4.0 * math.exp(z + rng.gauss(0.0, 0.05))) for s, z in enumerate(shared)}
        base = {s: _point(4.0 * math.exp(z + rng.gauss(0.0, 0.05))) for s, z in enumerate(shared)}
        for n in looks:
            decision, _ = decide_pairs({s: arm[s] for s in range(n)}, {s: base[s] for s in range(n)},
                                       per_look, NO_MARGIN)
            if decision != "not resolved":
                wrong += decision in ("slower", "faster")
                break
    p = wrong / STUDIES
    return p, math.sqrt(p * (1.0 - p) / STUDIES)


@pytest.fixture(autouse=True)
def _no_advice(monkeypatch: pytest.MonkeyPatch) -> None:
    # "seeds needed" is advice printed beside an undecided arm, never part of its decision,
    # and most of compare's time: left out so the test runs in seconds
    monkeypatch.setattr(replicates, "seeds_needed", lambda *args: None)


def test_the_shipped_design_errs_at_its_exact_rate_and_the_naive_one_does_not() -> None:
    looks = shipped_looks()
    d = sq.design(looks)
    assert looks == (5, 6, 7, 8, 9, 10) and d.error == pytest.approx(0.08203125)
    rate, se = false_direction_rate(looks, d.per_look, seed=20261126)
    assert abs(rate - d.error) <= 3 * se, (rate, se, d.error)
    # every look at the fixed-sample 90 %: its own exact error, and outside the design's band
    naive_error = 2 * sq.one_sided_error(looks, 0.90)
    naive, naive_se = false_direction_rate(looks, 0.90, seed=20261126)
    assert abs(naive - naive_error) <= 3 * naive_se, (naive, naive_se, naive_error)
    assert abs(naive - d.error) > 3 * se, (naive, se, d.error)
