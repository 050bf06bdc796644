"""Curtailment's rule (scalesweep/science/stats/curtail.py): a trial stops once every level is
reached or settled, and then no decision differs from its full run's; the naive rules (stop
past the baseline's crossing, or past (1 + margin) times it alone) change decisions."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pytest

from scalesweep.science.stats import curtail
from scalesweep.science.stats.convergence import EvalPoint, locate
from scalesweep.science.stats.decisions import Decision, decide_pairs
from scalesweep.science.stats.replicates import Observation, observe

MARGIN = 0.1
SEEDS = range(5)  # 5 seeds that agree decide at 93.75 %


def curve(pairs: Sequence[tuple[float, float]]) -> list[EvalPoint]:
    """(epoch, value) evals."""
    return [EvalPoint(update=100 * e, samples_seen=0.0, epoch=e, wall_s=0.0, value=v) for e, v in pairs]


def falling(cross: float, step: float, end: float) -> list[EvalPoint]:
    """A curve on an eval grid of ``step`` epochs that crosses 1.0 between ``cross`` and
    ``cross`` + ``step`` (2.0 before, 0.5 from then on)."""
    n = round(end / step)
    return curve([(round((i + 1) * step, 9), 2.0 if (i + 1) * step <= cross + 1e-9 else 0.5)
                  for i in range(n)])


def decision(arm: dict[int, list[EvalPoint]], base: dict[int, list[EvalPoint]]) -> Decision:
    def obs(c: list[EvalPoint]) -> Observation:
        found = locate(c, 1.0, "min").observation("epochs")
        assert found is not None
        return found
    return decide_pairs({s: obs(c) for s, c in arm.items()}, {s: obs(c) for s, c in base.items()},
                        0.9, MARGIN)[0]


def curtailed(arm: dict[int, list[EvalPoint]], base: dict[int, list[EvalPoint]],
              settled: Callable[[curtail.Gate, float], bool] | None = None) -> dict[int, list[EvalPoint]]:
    out = {}
    for s, c in arm.items():
        gates = curtail.gates(base[s], best=1.0 / 1.1, levels=[0.1], mode="min", smoothing=0.0, margin=MARGIN)
        assert gates[0].target == pytest.approx(1.0)
        if settled is None:
            i = curtail.stop_index(c, gates, "min")
        else:  # a naive rule in place of Gate.settled_at
            g = gates[0]
            i = next((j for j in range(len(c) - 1)
                      if locate(c[: j + 1], g.target, "min").kind != "never" or settled(g, c[j].epoch)), None)
        out[s] = c if i is None else c[: i + 1]
    return out


def test_a_level_settles_where_a_crossing_at_the_eval_is_above_1_and_the_band() -> None:
    g = curtail.Gate(0.1, 1.0, observe("interpolated", before=1.0, at=1.02, estimate=1.01), MARGIN)
    # above 1 needs epoch > 1.02 (the baseline's bracket end); above the band epoch / 1.0 > 1.1
    assert not g.settled_at(1.05)
    assert not g.settled_at(1.1)  # exactly 1 + d: a crossing there could still be equivalent
    assert g.settled_at(1.1000001)
    wide = curtail.Gate(0.1, 1.0, observe("interpolated", before=1.0, at=1.2, estimate=1.1), MARGIN)
    assert not wide.settled_at(1.15) and not wide.settled_at(1.2) and wide.settled_at(1.2000001)
    never = curtail.Gate(0.1, 1.0, observe("never", before=3.0, at=3.0), MARGIN)
    assert not never.settled_at(100.0)  # a baseline seed that never reached: never settled
    assert not curtail.Gate(0.1, 1.0, None, MARGIN).settled_at(100.0)
    first = curtail.Gate(0.1, 1.0, observe("at_first_eval", before=0.0, at=0.5), MARGIN)
    assert not first.settled_at(0.5) and first.settled_at(0.5000001)


def test_an_equivalent_arm_stays_equivalent_where_stopping_past_the_baseline_makes_it_slower() -> None:
    # baseline crosses in [1.00, 1.02]; the arm in [1.04, 1.06]: every pair's ratio lies in
    # [1.04/1.02, 1.06/1.00] = [1.0196, 1.06], inside [1/1.1, 1.1]: equivalent
    base = {s: falling(1.00, 0.02, 2.0) for s in SEEDS}
    arm = {s: falling(1.04, 0.02, 2.0) for s in SEEDS}
    assert decision(arm, base) == "equivalent"
    mine = curtailed(arm, base)
    assert decision(mine, base) == "equivalent"
    assert all(mine[s][-1].epoch == pytest.approx(1.06) for s in SEEDS)  # it stops once it reached
    # naive: "past the baseline's crossing (e > its bracket end) and not reached" stops at 1.04
    naive = curtailed(arm, base, lambda g, e: g.baseline is not None and e > g.baseline.hi)
    assert all(naive[s][-1].epoch == pytest.approx(1.04) for s in SEEDS)
    assert decision(naive, base) == "slower"


def test_a_slower_arm_stays_slower_where_stopping_at_1_plus_margin_alone_leaves_it_open() -> None:
    # the baseline is evaluated coarsely: it crosses in [1.0, 1.2]; the arm crosses in
    # [1.25, 1.30]: ratio bracket [1.25/1.2, 1.3/1.0] = [1.042, 1.3], above 1: slower
    base = {s: falling(1.0, 0.2, 3.0) for s in SEEDS}
    arm = {s: falling(1.25, 0.05, 3.0) for s in SEEDS}
    assert decision(arm, base) == "slower"
    assert decision(curtailed(arm, base), base) == "slower"
    # naive: "past (1 + d) x the baseline's last miss" stops at 1.1, ratio [1.1/1.2, inf): open
    naive = curtailed(arm, base, lambda g, e: g.baseline is not None and e >= 1.1 * g.baseline.lo)
    assert all(naive[s][-1].epoch == pytest.approx(1.1) for s in SEEDS)
    assert decision(naive, base) == "not resolved"


def test_an_arm_that_never_reaches_stops_once_settled_and_stays_slower() -> None:
    base = {s: falling(1.0, 0.1, 4.0) for s in SEEDS}  # crosses in [1.0, 1.1]
    never = {s: curve([(0.1 * (i + 1), 2.0) for i in range(40)]) for s in SEEDS}
    mine = curtailed(never, base)
    # settled past 1.1 (the bracket end) and past 1.1 x 1.0: the first eval after both is 1.2
    assert all(mine[s][-1].epoch == pytest.approx(1.2) for s in SEEDS)
    assert decision(mine, base) == decision(never, base) == "slower"


def test_a_trial_whose_baseline_never_reached_runs_to_its_end() -> None:
    flat = curve([(0.5 * (i + 1), 2.0) for i in range(8)])
    gates = curtail.gates(flat, best=1.0 / 1.1, levels=[0.1], mode="min", smoothing=0.0, margin=MARGIN)
    assert curtail.stop_index(flat, gates, "min") is None
    assert not curtail.may_stop(flat, gates, "min")


def test_every_level_must_be_settled_and_may_stop_agrees_with_stop_index() -> None:
    # baseline: below 3 at 0.5, below 1.1 at 1.0, below 1.02 at 2.0 (best 1.0)
    base = curve([(0.25, 5.0), (0.5, 2.9), (0.75, 2.0), (1.0, 1.09), (1.5, 1.05), (2.0, 1.01), (3.0, 1.0)])
    gates = curtail.gates(base, best=1.0, levels=[0.02, 0.1, 2.0], mode="min", smoothing=0.0, margin=MARGIN)
    assert [g.level for g in gates] == [0.02, 0.1, 2.0]
    brackets = [(g.baseline.lo, g.baseline.hi) for g in gates if g.baseline]
    assert brackets == [(1.5, 2.0), (0.75, 1.0), (0.25, 0.5)]
    slow = curve([(0.25 * (i + 1), 4.0 if i < 3 else 1.5) for i in range(12)])  # reaches level 2 only
    # level 0.02 settles past 2.0 and 1.1 x 1.5 = 1.65: at 2.25, the first eval beyond both
    i = curtail.stop_index(slow, gates, "min")
    assert i is not None and slow[i].epoch == 2.25
    assert [curtail.may_stop(slow[: j + 1], gates, "min") for j in range(len(slow))] == \
        [j >= i for j in range(len(slow))]


def test_smoothing_is_read_as_the_decisions_read_it() -> None:
    # raw values reach 1.0 at 0.3 but the EMA (alpha 0.5) only at 0.5
    c = curve([(0.1, 2.0), (0.2, 2.0), (0.3, 0.9), (0.4, 0.9), (0.5, 0.5), (0.6, 0.5)])
    g = (curtail.Gate(0.1, 1.0, observe("interpolated", before=10.0, at=10.5, estimate=10.2), MARGIN),)
    assert curtail.may_stop(c[:3], g, "min", 0.0) and not curtail.may_stop(c[:3], g, "min", 0.5)
    assert curtail.stop_index(c, g, "min", 0.5) == 4


def test_the_saving_counts_trial_epochs() -> None:
    s = curtail.saving([(2.0, 4.0), (4.0, 4.0), (3.0, 3.0), (1.25, 4.0)])
    assert (s.full, s.curtailed, s.saved, s.n_trials, s.n_curtailed) == (15.0, 10.25, 4.75, 4, 2)
    assert s.share == pytest.approx(4.75 / 15)
    assert s.text() == ("curtailment: 2 of 4 trials stopped once no later eval could change a decision; "
                        "10.25 trial-epochs trained against 15 run to the end (4.75 saved, 32%)")
    assert curtail.saving([]).share == 0.0 and math.isfinite(curtail.saving([]).share)
