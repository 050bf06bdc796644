"""`scalesweep solve` without Ray: its space, the score of a candidate, the stop that spares
hopeless candidates, the order of verified answers, and every refusal (exit 2, nothing started)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from scalesweep.orchestrator.launch.solve_search import OutOfReach
from scalesweep.science.solve import (
    GRID_STEP,
    Range,
    Score,
    answer_order,
    at_edge,
    default_space,
    score,
    verify_order,
)
from scalesweep.science.stats.convergence import EvalPoint
from tests.support.helpers import ROOT
from tests.unit.test_bad_input import assert_rejected, run_in_process

QUADRATIC = """\
name: solve-quadratic
workload: {name: "tests.support.quadratic_workload:make", options: {train_size: 64}}
target: {metric: dev_loss, value: 0.001}
baseline: {world_size: 1, warmup_rule: fixed, scaling_rule: none}
reference: {world_size: 1}
optimizer: {type: sgd, lr: 0.0606}
scheduler: {type: ds_warmuplr, warmup_num_steps: 4, warmup_type: linear}
training: {epochs: 4, eval_every_epochs: 0.0625, per_worker_batch: 1}
replicates: {min: 2, max: 3}
resources: {max_concurrent_trials: 1}
axes:
  world_size: [1, 4]
"""


def _curve(*points: tuple[float, float]) -> list[EvalPoint]:
    return [EvalPoint(update=10 * e, samples_seen=100 * e, epoch=e, wall_s=e, value=v) for e, v in points]


def test_the_default_space_runs_from_the_sqrt_rule_to_twice_linear_and_a_quarter_to_4x_scaled() -> None:
    space = default_space(16, k=4.0, reference_lr=0.002, reference_warmup=300)
    assert (space.lr_factor.low, space.lr_factor.high) == (2.0, 8.0)
    assert (space.warmup.low, space.warmup.high) == (18.75, 300.0)
    assert space.lr_factor.centre == 4.0 and space.warmup.centre == 75.0
    assert space.rule_points()["linear, scaled"] == (4.0, 75.0)
    # log2(8/2) = 2 octaves in steps of sqrt(2): 5 points; log2(300/18.75) = 4: 9 points
    assert (space.lr_factor.grid_points(), space.warmup.grid_points()) == (5, 9)
    assert space.grid_size(GRID_STEP) == 45
    assert space.lr_factor.grid() == pytest.approx([2.0, 2 * 2**0.5, 4.0, 4 * 2**0.5, 8.0])
    assert sorted({w for _, w in space.grid()}) == [19, 27, 38, 53, 75, 106, 150, 212, 300]


def test_a_grid_spaces_its_points_evenly_within_a_step_and_merges_warmups_that_round_alike() -> None:
    lr = Range("lr", 1.0, 3.0)  # log2(3) = 1.58 octaves: 5 points, 3^(1/4) = 1.32 apart
    assert lr.grid_points() == 5
    assert lr.grid() == pytest.approx([3 ** (i / 4) for i in range(5)])
    space = default_space(4, k=4.0, reference_lr=0.06, reference_warmup=4)  # warmup 1..4
    assert [w for f, w in space.grid() if f == 2.0] == [1, 2, 3, 4]  # 1 and 1.41 are one point
    assert space.grid_size() == 5 * 4


def test_an_answer_within_a_grid_step_of_a_bound_is_flagged() -> None:
    space = default_space(16, k=4.0, reference_lr=0.002, reference_warmup=300)  # lr 2..8, 18.75..300
    assert at_edge(space, 4.0, 75) == []
    assert at_edge(space, 7.7, 20) == ["lr 7.7 is near the high end 8", "warmup 20 is near the low end 18.75"]
    assert at_edge(space, 5.6, 27) == []  # more than one step (sqrt 2) inside either end


def test_a_bound_that_is_not_positive_is_named_with_its_rule() -> None:
    problems = Range("lr", 0.0, 4.0).problems() + Range("warmup", -1, 5).problems()
    assert [(f, v) for f, v, _ in problems] == [("lr.low", 0.0), ("warmup.low", -1)]
    assert all("must be a number > 0" in why for _, _, why in problems)
    assert Range("lr", 4.0, 2.0).problems() == [("lr", "4..2", "low must be at most high")]


def test_a_candidate_scores_its_crossing_over_the_baseline_and_a_bound_when_not_reached() -> None:
    curve = _curve((0.5, 1.0), (1.0, 0.5), (1.5, 0.2))
    reached = score(curve, target=0.35, mode="min", baseline_epochs=0.5)
    # crossing interpolated halfway between 1.0 (0.5) and 1.5 (0.2): 1.25 epochs
    assert reached.reached and reached.value == pytest.approx(1.25 / 0.5)
    bound = score(curve, target=0.1, mode="min", baseline_epochs=0.5)
    assert not bound.reached and bound.value == 1.5 / 0.5  # at least the epochs it trained
    assert bound.text().startswith(">= 3")
    with pytest.raises(ValueError, match="baseline_epochs"):
        score(curve, 0.35, "min", baseline_epochs=0.0)


def test_a_candidate_is_stopped_only_once_its_bound_passes_the_nth_reached_score() -> None:
    stop = OutOfReach(keep=2)
    running = {"solve_ratio": 1.5, "status": "running"}
    assert not stop("a", running)  # nothing reached yet: no bar to pass
    assert not stop("b", {"solve_ratio": 1.2, "status": "stopped"})  # reached: 1.2
    assert not stop("a", running)  # one reached, two are kept
    assert not stop("c", {"solve_ratio": 1.4, "status": "stopped"})  # reached: 1.2, 1.4
    assert not stop("a", {"solve_ratio": 1.4, "status": "running"})  # could still tie the 2nd
    assert stop("a", running)  # 1.5 > 1.4: it cannot be among the 2 best any more
    assert not stop("d", {"status": "running"})  # no score reported: never stopped for it


def test_the_verification_takes_candidates_that_reached_before_any_bound() -> None:
    # the shipped study's baseline seeds reach at 3.1, 3.19 and 3.49 epochs of 4: a candidate
    # that trains all 4 without reaching, paired with seed 2, is bounded at 4 / 3.49 = 1.146,
    # below one that reached at 3.6 on seed 0 (1.16); ranked by value it would go first
    reached = score(_curve((3.5, 0.7), (3.62, 0.56)), 0.5776, "min", 3.1)
    never = score(_curve((2.0, 1.0), (4.0, 0.83)), 0.6058, "min", 3.49)
    assert never.value < reached.value and reached.reached and not never.reached
    assert sorted([never, reached], key=verify_order) == [reached, never]
    slower_bound = Score(1.5, False)
    assert sorted([slower_bound, never], key=verify_order) == [never, slower_bound]  # bounds by value


def test_answers_rank_faster_then_equivalent_then_by_the_intervals_upper_end() -> None:
    keys = {"eq": answer_order("equivalent", (0.95, 1.05), 1.0),
            "fast": answer_order("faster", (0.7, 0.95), 0.8),
            "open_low": answer_order("not resolved", (0.9, 1.2), 1.0),
            "open_high": answer_order("not resolved", (0.8, 1.6), 0.9),
            "slow": answer_order("slower", (1.1, 1.3), 1.2),
            "none": answer_order(None, None, None)}
    assert sorted(keys, key=lambda k: keys[k]) == ["fast", "eq", "open_low", "open_high", "none", "slow"]
    assert keys["none"][1] == math.inf


def _sweep(where: Path, text: str = QUADRATIC) -> str:
    path = where / "q.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(("edit", "args", "expect"), [
    pytest.param(None, ["--world-size", "100"],
                 ("--world-size", "100", "4 evaluation(s)", "fewer than 10 cannot place"),
                 id="world-size-too-few-evals"),
    pytest.param(None, ["--world-size", "0"], ("--world-size", "= 0", "must be at least 1"),
                 id="world-size-0"),
    pytest.param(None, ["--world-size", "1"], ("--world-size", "= 1", "baseline's world size"),
                 id="world-size-of-the-baseline"),
    pytest.param(("baseline: {world_size: 1, warmup_rule: fixed, scaling_rule: none}\n"
                  "reference: {world_size: 1}\n", "reference: {global_batch: 1}\n",
                  "replicates: {min: 2, max: 3}\n", ""), ["--world-size", "4"],
                 ("baseline", "solve scores every candidate against the baseline arm"),
                 id="no-baseline"),
    pytest.param(None, ["--world-size", "4", "--budget", "20"],
                 ("--budget", "20", "must be at least 52 trial-epochs", "baseline x 2 seeds: 32"),
                 id="budget-too-small"),
    pytest.param(None, ["--world-size", "4", "--sampler", "grid", "--budget", "100"],
                 ("--budget", "100", "does not apply to --sampler grid"), id="budget-with-grid"),
    pytest.param(None, ["--world-size", "4", "--lr", "0,8"],
                 ("--lr", "lr.low", "must be a number > 0"), id="lr-bound-not-positive"),
    pytest.param(None, ["--world-size", "4", "--warmup=-3,10"],
                 ("--warmup", "warmup.low", "must be a number > 0"), id="warmup-bound-not-positive"),
    pytest.param(("{type: ds_warmuplr, warmup_num_steps: 4, warmup_type: linear}", "{type: constant}"),
                 ["--world-size", "4"], ("scheduler.type", "constant", "has no warmup to search"),
                 id="schedule-without-warmup"),
])
def test_solve_refuses_bad_input_before_anything_starts(
        edit: tuple[str, ...] | None, args: list[str], expect: tuple[str, ...], cwd: Path,
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    monkeypatch.syspath_prepend(str(ROOT))  # tests.support.quadratic_workload
    text = QUADRATIC
    for old, new in zip(edit[::2], edit[1::2], strict=True) if edit else ():
        text = text.replace(old, new)
    rc, out, err = run_in_process(["solve", _sweep(tmp_path, text), *args], capsys)
    assert_rejected(rc, out, err, cwd, expect)  # the working directory untouched: no MLflow store
    assert not ray.is_initialized()


def test_the_verification_sweep_names_its_search_so_a_rerun_of_it_is_tagged_too(tmp_path: Path) -> None:
    import yaml

    from scalesweep.mlflow_names import SOLVE_SEARCH_TAG
    from scalesweep.orchestrator.launch.run import sweep_tags
    from scalesweep.orchestrator.plan.cluster import local_cluster
    from scalesweep.orchestrator.plan.solve_plan import plan_solve, verification_spec
    from scalesweep.orchestrator.spec.load import load_sweep

    source = _sweep(tmp_path)
    sp = plan_solve(load_sweep(source, []), local_cluster(), world_size=4, budget=None, candidates=1,
                    lr=None, warmup=None)
    search = "0123456789abcdef0123456789abcdef"
    data = verification_spec(Path(source), [], sp, [(4.0, 2)], "solve-quadratic-solve", search)
    verify = tmp_path / "verify.yaml"
    verify.write_text(yaml.safe_dump(data, sort_keys=False))
    # `scalesweep run verify.yaml --set replicates.first_seed=30` loads it as any sweep
    rerun = load_sweep(str(verify), ["replicates.first_seed=30"])
    assert sweep_tags(rerun)[SOLVE_SEARCH_TAG] == search
    assert rerun.spec.name == "solve-quadratic-solve"


def test_the_verification_runs_seeds_the_search_never_ran(tmp_path: Path) -> None:
    """A candidate is picked on its own seed's trial, paired with that baseline seed's: a
    verification pair at that seed (the same initialisation and data order) would repeat the
    pair that won, luck included. Its seeds start past every seed the search ran."""
    import yaml

    from scalesweep.orchestrator.plan.cluster import local_cluster
    from scalesweep.orchestrator.plan.rows import make_plan
    from scalesweep.orchestrator.plan.solve_plan import plan_solve, verification_spec
    from scalesweep.orchestrator.spec.load import load_sweep

    source = _sweep(tmp_path, QUADRATIC.replace("replicates: {min: 2, max: 3}",
                                                "replicates: {min: 2, max: 3, first_seed: 7}"))
    sp = plan_solve(load_sweep(source, []), local_cluster(), world_size=4, budget=None, candidates=1,
                    lr=None, warmup=None)
    searched = {r.seed for r in sp.baseline_rows}  # the candidates take these in turn
    assert searched == {7, 8, 9}
    data = verification_spec(Path(source), [], sp, [(4.0, 2)], "q-solve", "0" * 32)
    verify = tmp_path / "verify.yaml"
    verify.write_text(yaml.safe_dump(data))
    vsweep = load_sweep(str(verify), [])
    assert vsweep.spec.replicates is not None
    assert (vsweep.spec.replicates.min, vsweep.spec.replicates.max) == (2, 3)  # the study's own
    seeds = {r.seed for r in make_plan(vsweep, local_cluster()).rows}
    assert seeds and not seeds & searched and min(seeds) == 10


def test_a_candidate_and_a_study_trial_stop_where_the_study_reads_the_crossing(tmp_path: Path) -> None:
    # with target.smoothing the crossing is the smoothed metric's: the stop must read it so
    from scalesweep.orchestrator.plan.cluster import local_cluster
    from scalesweep.orchestrator.plan.rows import make_plan
    from scalesweep.orchestrator.plan.solve_plan import plan_solve
    from scalesweep.orchestrator.spec.load import load_sweep

    (tmp_path / "q.yaml").write_text(QUADRATIC)
    sweep = load_sweep(str(tmp_path / "q.yaml"), ["target.smoothing=0.6", "stop_at_target=true"])
    row = plan_solve(sweep, local_cluster(), world_size=4, budget=None, candidates=1, lr=None,
                     warmup=None, sampler="tpe").candidate_row(0, 2.0, 2, 0, 0.01, 1.5, local_cluster())
    assert row.trial.stop_at_target is not None and row.trial.objective is not None
    assert row.trial.stop_at_target.smoothing == row.trial.objective.smoothing == 0.6
    rows = make_plan(sweep, local_cluster()).rows
    assert rows and all(r.trial.stop_at_target is not None and r.trial.stop_at_target.smoothing == 0.6
                        for r in rows)
