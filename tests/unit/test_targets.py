"""The target each pair of seeds is measured against (scalesweep.science.stats.targets): cross-
fitted, frozen at the first look, read within horizon / (1 + margin), short and diverged
baseline curves left out by name; and, by simulation through the real code, symmetric between
the arms under A/A where the baseline-only mean-curve target was not."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from scalesweep.orchestrator.plan.rows import make_plan
from scalesweep.orchestrator.plan.table import format_plan
from scalesweep.orchestrator.spec.load import load_sweep
from scalesweep.orchestrator.tracking import summary
from scalesweep.science.stats.convergence import EvalPoint, locate
from scalesweep.science.stats.levels import baseline_best
from scalesweep.science.stats.targets import reference_bests, target_of

EPOCHS = [0.25 * i for i in range(1, 17)]  # 4 epochs, an eval every quarter
SMOKE = Path(__file__).resolve().parents[2] / "sweeps" / "smoke.yaml"


def _curve(plateau: float, scale: float = 1.0, start: float = 4.0, epochs: list[float] = EPOCHS
           ) -> list[EvalPoint]:
    return [EvalPoint(update=100 * e, samples_seen=1000 * e, epoch=e, wall_s=e,
                      value=plateau + (start - plateau) * 2 ** (-e / scale)) for e in epochs]


def _best_within(curves: list[list[EvalPoint]], end: float) -> float:
    best = baseline_best([[p for p in c if p.epoch <= end] for c in curves], "min")
    assert best is not None
    return best


def test_a_seed_never_sets_its_own_pairs_target() -> None:
    curves = {0: _curve(0.5), 1: _curve(0.52), 2: _curve(0.9)}  # seed 2: a high plateau
    refs = reference_bests(curves, mode="min", margin=0.1)
    end = 4.0 / 1.1
    assert refs.used == (0, 1, 2) and refs.window_end == pytest.approx(end)
    assert refs.best(2) == pytest.approx(_best_within([curves[0], curves[1]], end))
    assert refs.best(0) == pytest.approx(_best_within([curves[1], curves[2]], end))
    # a seed that did not set it (a later look) is measured against all of them
    assert refs.best(7) == refs.pooled == pytest.approx(_best_within(list(curves.values()), end))


def test_the_best_is_read_within_horizon_over_one_plus_margin() -> None:
    # a curve still falling at the end: its best within 4 / 1.25 = 3.2 epochs is the eval at 3.0
    curves = {0: _curve(0.5, scale=2.0), 1: _curve(0.5, scale=2.0)}
    refs = reference_bests(curves, mode="min", margin=0.25)
    at_3 = next(p.value for p in curves[0] if p.epoch == 3.0)
    assert refs.pooled == pytest.approx(at_3)
    assert refs.best(0) == pytest.approx(at_3)
    # so the baseline's curve meets its 10 % target well before the horizon
    target = target_of(refs.pooled, 0.1, "min")
    assert target is not None
    crossing = locate(curves[0], target, "min").crossing
    assert crossing is not None and crossing.epochs_to_target < 3.2


def test_the_targets_are_frozen_at_the_first_look() -> None:
    first = {0: _curve(0.5), 1: _curve(0.55), 2: _curve(0.45)}
    before = reference_bests(first, mode="min", first_look={0, 1, 2})
    later = {**first, 3: _curve(2.0), 4: _curve(0.1)}  # seeds added at a later look
    after = reference_bests(later, mode="min", first_look={0, 1, 2})
    assert after == before
    assert after.best(3) == after.best(4) == before.pooled


def test_a_short_or_diverged_baseline_curve_is_left_out_by_name() -> None:
    short = _curve(0.5, epochs=EPOCHS[:4])  # a failed trial: stopped at epoch 1
    diverged = _curve(0.5)
    diverged[6] = EvalPoint(diverged[6].update, diverged[6].samples_seen, diverged[6].epoch,
                            diverged[6].wall_s, math.nan)
    curves = {0: _curve(0.5), 1: _curve(0.53), 2: short, 3: diverged}
    refs = reference_bests(curves, mode="min", margin=0.1)
    whole = reference_bests({0: curves[0], 1: curves[1]}, mode="min", margin=0.1)
    # the short curve would cut the mean curve to its first epoch (the old rule's target 2x)
    assert refs.pooled == pytest.approx(whole.pooled)
    assert refs.used == (0, 1) and set(refs.left_out) == {2, 3}
    text = "\n".join(refs.warnings())
    assert "baseline seed 2 left out of the target: it stopped at epoch 1" in text
    assert "baseline seed 3 left out of the target: it diverged" in text
    # the left-out seeds' own pairs are measured against the used seeds' best
    assert refs.best(2) == refs.best(3) == refs.pooled


def test_a_first_look_seed_without_evals_is_named() -> None:
    refs = reference_bests({0: _curve(0.5), 1: _curve(0.5)}, mode="min", first_look={0, 1, 2})
    assert refs.left_out == {2: "it has no evaluations"} and refs.used == (0, 1)


def test_one_usable_seed_warns_that_it_is_not_cross_fitted() -> None:
    refs = reference_bests({0: _curve(0.5)}, mode="min")
    assert refs.best(0) == refs.pooled
    assert "not cross-fitted" in "\n".join(refs.warnings())
    assert reference_bests({}, mode="min").best(0) is None


def _never_rates(studies: int, naive: bool) -> tuple[float, float, float]:
    """A/A: baseline and arm seeds from one distribution (plateau SD 5 %, near the plateau at
    the end). Each seed is located against its pair's target; returns the share of arm seeds
    and of baseline seeds that never reach it, and the standard error of their difference."""
    rng = random.Random(7)
    never = {"arm": 0, "base": 0}
    n = 0
    for _ in range(studies):
        seeds = range(5)

        def draw() -> list[EvalPoint]:
            return _curve(rng.gauss(0.5, 0.025), scale=0.35)

        base = {s: draw() for s in seeds}
        arm = {s: draw() for s in seeds}
        refs = reference_bests(base, mode="min", margin=0.1)
        naive_best = baseline_best(list(base.values()), "min")  # the old rule: every seed, no window
        for s in seeds:
            target = target_of(naive_best if naive else refs.best(s), 0.02, "min")
            assert target is not None
            never["arm"] += locate(arm[s], target, "min").kind == "never"
            never["base"] += locate(base[s], target, "min").kind == "never"
            n += 1
    pa, pb = never["arm"] / n, never["base"] / n
    return pa, pb, math.sqrt((pa * (1 - pa) + pb * (1 - pb)) / n)


def test_under_a_a_never_reached_is_as_likely_for_either_arm() -> None:
    arm, base, se = _never_rates(1500, naive=False)
    assert arm > 0.02 and base > 0.02  # the target sits where "never" happens
    assert abs(arm - base) <= 3 * se, (arm, base, se)


def test_the_baseline_only_target_favoured_the_baseline() -> None:
    # the rule this module replaced, on the same studies: the arm's seeds miss far more often
    arm, base, se = _never_rates(1500, naive=True)
    assert arm - base > 3 * se, (arm, base, se)


def _driver_curve(plateau: float) -> list[dict[str, float]]:
    return [{"update": p.update, "samples_seen": p.samples_seen, "epoch": p.epoch, "wall_s": p.wall_s,
             "dev_loss": p.value} for p in _curve(plateau)]


def test_the_driver_freezes_each_pairs_target_at_the_first_look(tmp_path: Path) -> None:
    # sweeps/smoke.yaml with adaptive seeds 3..6: the targets the first round gives stay put
    # when later rounds' baseline seeds arrive, whatever those seeds do
    text = SMOKE.read_text(encoding="utf-8").replace("  seed: [0]\n", "")
    path = tmp_path / "smoke.yaml"
    path.write_text(text, encoding="utf-8")
    plan = make_plan(load_sweep(str(path), ["replicates={min: 3, max: 6}"]))
    base = next(r for r in plan.rows if plan.baseline_for(r) is r)
    rows = [r for r in plan.rows if r.arm == base.arm]
    plateaus = {0: 0.5, 1: 0.55, 2: 0.45, 3: 3.0, 4: 0.01, 5: 0.4}
    first = {r.name: _driver_curve(plateaus[r.seed]) for r in rows if r.seed < 3}
    every = {r.name: _driver_curve(plateaus[r.seed]) for r in rows}
    before, after = summary.targets(plan, first), summary.targets(plan, every)
    assert {n: (t.value, t.reference_best) for n, t in before.items()} == \
        {n: (t.value, t.reference_best) for n, t in after.items()}
    by_seed = {r.seed: after[r.name] for r in rows}
    assert by_seed[0].reference_best == pytest.approx(
        _best_within([_curve(0.55), _curve(0.45)], 4.0 / 1.1))  # seeds 1 and 2 only
    assert by_seed[4].reference_best == by_seed[5].reference_best  # later seeds: the pooled best
    assert summary.headline_target(plan, every) == pytest.approx(by_seed[5].value)


def test_the_plan_says_where_the_target_is_read() -> None:
    plan = make_plan(load_sweep(str(SMOKE.parent / "wenet_4v16.yaml"), []))
    head = format_plan(plan).splitlines()[0]
    assert "within its first 3.64 of 4 epochs (horizon / (1 + margin 0.1)" in head
    assert "cross-fitted, frozen at the first look" in head
