"""Adaptive seeds in the sweep file and the planner (scalesweep.orchestrator.plan.adaptive):
which trials each round adds, the design's per-look confidence, and bad input (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalesweep.orchestrator.plan import adaptive
from scalesweep.orchestrator.plan.rows import Plan, make_plan
from scalesweep.orchestrator.plan.table import format_plan
from scalesweep.orchestrator.spec.errors import InputError
from scalesweep.orchestrator.spec.load import load_sweep
from scalesweep.science.stats import sequential
from tests.support.helpers import scalesweep

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "sweeps" / "smoke.yaml"
ADAPTIVE = ["replicates={min: 3, max: 6}"]


def _unseeded(tmp: Path) -> Path:
    """sweeps/smoke.yaml without its seed axis: adaptive replicates number the seeds."""
    text = SMOKE.read_text(encoding="utf-8")
    assert "  seed: [0]\n" in text
    path = tmp / "smoke.yaml"
    path.write_text(text.replace("  seed: [0]\n", ""), encoding="utf-8")
    return path


@pytest.fixture
def unseeded(tmp_path: Path) -> Path:
    return _unseeded(tmp_path)


def _plan(*sets: str, path: Path | None = None) -> Plan:
    return make_plan(load_sweep(str(path or SMOKE), [*sets]))


def test_the_plan_holds_every_seed_up_to_max_and_the_first_round_those_below_min(unseeded: Path) -> None:
    plan = _plan(*ADAPTIVE, path=unseeded)
    arms = sorted({r.arm for r in plan.rows})
    assert len(arms) == 4 and len(plan.rows) == 4 * 6
    first = adaptive.first_round(plan)
    assert sorted({r.seed for r in first}) == [0, 1, 2] and len(first) == 12
    d = adaptive.design(plan)
    assert d.looks == (3, 4, 5, 6) and d == sequential.design((3, 4, 5, 6))
    assert "adaptive seeds: every arm runs seeds 0-2 first" in format_plan(plan)
    # no interval of 3-5 pairs reaches the interim confidence (>= 96.7 %): those looks only spend seeds
    assert "warning: the looks at 3, 4, 5 seeds can never decide an arm" in format_plan(plan)


def test_the_shipped_design_decides_at_both_looks() -> None:
    plan = make_plan(load_sweep(ROOT / "sweeps" / "wenet_4v16.yaml", []))
    text = format_plan(plan)
    assert "looks [6, 10]" in text
    assert "read at 0.9667 confidence before the last look and at 0.9 at it" in text
    assert "can never decide" not in text
    assert "expected power per arm, at most 10% error: 10 % slower: called slower in " in text
    assert "(32 evals per trial, the baseline crossing its target at 70% of the run)" in text


def test_one_seed_per_arm_is_warned_never_to_decide() -> None:
    text = format_plan(_plan())  # sweeps/smoke.yaml: one seed
    assert "warning: one seed per arm can never be decided against its baseline" in text
    assert "expected power" not in text


@pytest.mark.parametrize(("seeds", "warned"), [(2, True), (4, True), (5, False)])
def test_a_fixed_design_too_small_to_decide_anything_is_warned(seeds: int, warned: bool) -> None:
    # the widest signed-rank interval of n pairs has confidence 1 - 2/2^n: 0.875 at 4, 0.9375 at 5
    text = format_plan(_plan(f"axes.seed={list(range(seeds))}"))
    said = (f"warning: no arm can be decided against its baseline with {seeds} seeds per arm: no "
            f"interval of {seeds} pairs reaches 90% confidence, however large the difference, so "
            "every arm will read 'not resolved'; give the seed axis 5 seeds or more")
    assert (said in text) is warned, text
    assert ("expected power" in text) is not warned


def test_next_round_adds_seeds_to_undecided_arms_and_their_baseline_only(unseeded: Path) -> None:
    plan = _plan(*ADAPTIVE, path=unseeded)
    first = adaptive.first_round(plan)
    arms = {r.arm for r in first}
    base = next(r.arm for r in first if plan.baseline_for(r) is r)
    undecided = next(a for a in sorted(arms) if a != base)
    decisions = {a: ("not resolved" if a == undecided else "slower") for a in arms}
    decisions[base] = "baseline"
    more = adaptive.next_round(plan, first, decisions)
    assert sorted((r.arm, r.seed) for r in more) == sorted([(undecided, 3), (base, 3)])
    # one more look, then max: nothing beyond 6 seeds, and nothing once all are decided
    in_play = first + more
    more = adaptive.next_round(plan, in_play, decisions)
    assert {r.seed for r in more} == {4}
    in_play += more + adaptive.next_round(plan, in_play + more, decisions)
    assert adaptive.next_round(plan, in_play, decisions) == []
    assert max(r.seed for r in in_play) == 5
    assert adaptive.next_round(plan, first, dict.fromkeys(arms, "equivalent")) == []


def test_first_seed_moves_the_whole_block_of_seeds(unseeded: Path) -> None:
    # another block of seeds, another independent draw of the study: the rounds count seeds
    # from first_seed on, exactly as from 0
    plan = _plan(*ADAPTIVE, "replicates.first_seed=10", path=unseeded)
    assert sorted({r.seed for r in plan.rows}) == list(range(10, 16))
    first = adaptive.first_round(plan)
    assert sorted({r.seed for r in first}) == [10, 11, 12]
    arms = {r.arm for r in first}
    base = next(r.arm for r in first if plan.baseline_for(r) is r)
    decisions = {a: ("baseline" if a == base else "not resolved") for a in arms}
    assert {r.seed for r in adaptive.next_round(plan, first, decisions)} == {13}
    assert "adaptive seeds: every arm runs seeds 10-12 first" in format_plan(plan)


def test_a_fixed_sweep_is_one_round_at_the_nominal_confidence() -> None:
    plan = _plan("axes.seed=[0,1,2,3,4]")
    assert adaptive.first_round(plan) == plan.rows
    assert adaptive.next_round(plan, plan.rows, {}) == []
    assert adaptive.design(plan).per_look == 0.9 and adaptive.describe(plan) is None
    # its one look's exact error, not 0: 5 seeds all on one side of the truth, either side
    assert adaptive.design(plan).error == pytest.approx(2 / 32)


def test_a_fixed_design_reads_every_level_at_its_own_confidence() -> None:
    plan = _plan("axes.seed=[0,1,2,3,4,5,6,7,8,9]")
    # one look of 10 seeds: 90 % throughout, and the headline's level (0.1) named
    assert (plan.rules.confidence, plan.rules.last_confidence, plan.rules.headline_level) == (0.9, None, 0.1)


@pytest.mark.parametrize(("sets", "field", "rule"), [
    (["replicates={min: 3, max: 6}", "axes.seed=[0, 1]"], "axes.seed",
     "give seeds by hand or adaptive replicates"),
    (["replicates={min: 5, max: 3}"], "replicates", "min (5) must be at most max (3)"),
    (["replicates={min: 1, max: 3}"], "replicates.min", "greater than or equal to 2"),
    ([*ADAPTIVE, "search.trial_scheduler=asha"], "search.trial_scheduler",
     "adaptive replicates decide from whole"),
    ([*ADAPTIVE, "target={metric: dev_loss, value: 0.5}", "baseline={world_size: 8}"], "replicates",
     "adaptive seeds decide each arm against its baseline arm, but these arms have none"),
])
def test_bad_replicates_are_refused_by_name(sets: list[str], field: str, rule: str, unseeded: Path) -> None:
    with pytest.raises(InputError) as err:
        _plan(*sets, path=unseeded)
    assert any(p.path == field and rule in p.rule for p in err.value.problems), err.value.message()


def test_the_cli_refuses_bad_replicates_with_exit_2_before_anything_starts(tmp_path: Path) -> None:
    done = scalesweep("run", str(SMOKE), "--set", "replicates={min: 3, max: 6}", cwd=tmp_path)
    # the file lists seed: [0] by hand: with replicates that is two answers to one question
    assert done.returncode == 2 and "axes.seed = [0]: give seeds by hand" in done.stderr
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "scalesweep_runs").exists()
