"""What `solve` keeps on disk for `resume` (launch/solve_state.py), without Ray: the journal of
finished trials (a torn last line passed over), the warm start a resumed search is given
(finished candidates told to the sampler, the budget left, the stopper's scores, new names),
and how `resume` tells a solve's state directory from a sweep's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from scalesweep.mlflow_names import STATUS_TAG
from scalesweep.orchestrator.launch.solve_state import (
    SOLVE_JOURNAL,
    Finished,
    append,
    find_solve_dir,
    killed_epochs,
    read_journal,
    warm_start,
    write_state,
)

if TYPE_CHECKING:
    from scalesweep.orchestrator.plan.solve_plan import SolvePlan


def _cand(number: int, factor: float, warmup: int, epoch: float, seed: int = 0) -> Finished:
    return Finished(f"c{number:02d}-ws4-x", seed, factor, warmup, "stopped",
                    [{"epoch": epoch / 2, "dev_loss": 0.5}, {"epoch": epoch, "dev_loss": 0.1}])


def test_the_journal_reads_back_what_was_appended_and_passes_over_a_torn_last_line(tmp_path: Path) -> None:
    base = Finished("ws1-seed0", 0, None, None, "stopped", [{"epoch": 1.0, "dev_loss": 0.2}])
    cand = _cand(0, 2.5, 3, 1.5)
    append(tmp_path, base)
    append(tmp_path, cand)
    with open(tmp_path / SOLVE_JOURNAL, "a") as f:  # a driver killed mid-write
        f.write('{"name": "c01-ws4-x", "seed": 1, "lr_fac')
    rows = read_journal(tmp_path)
    assert rows == [base, cand]
    assert not rows[0].is_candidate and rows[1].is_candidate
    # a line appended after the torn one (the resumed driver's) is read too
    with open(tmp_path / SOLVE_JOURNAL, "a") as f:
        f.write("\n")
    append(tmp_path, _cand(2, 4.0, 2, 2.0))
    assert [r.name for r in read_journal(tmp_path)] == ["ws1-seed0", "c00-ws4-x", "c02-ws4-x"]


def test_no_journal_is_nothing_finished(tmp_path: Path) -> None:
    assert read_journal(tmp_path) == []


def test_the_warm_start_tells_the_finished_candidates_and_keeps_the_budget_spent() -> None:
    finished = [(_cand(0, 2.0, 4, 1.5), 1.2, True), (_cand(1, 8.0, 1, 2.0), 1.6, False),
                (_cand(3, 4.0, 2, 1.0), 0.9, True),
                (Finished("c04-ws4-x", 1, 3.0, 2, "failed", []), float("nan"), False)]
    starts: list[dict[str, float | int]] = [{"lr_factor": 2.0, "warmup": 4}, {"lr_factor": 4.0, "warmup": 3}]
    warm = warm_start(finished, starts, samples=10, used_names=["ws1-seed0", "c05-ws4-x"])
    # the sampler is told each scored one as evaluated, with its score: not run again
    assert warm.points == [{"lr_factor": 2.0, "warmup": 4}, {"lr_factor": 8.0, "warmup": 1},
                           {"lr_factor": 4.0, "warmup": 2}]
    assert warm.rewards == [1.2, 1.6, 0.9]
    # a named rule's point already tried is not tried again; the other still is
    assert warm.starts == [{"lr_factor": 4.0, "warmup": 3}]
    # the failed one counts against the budget; trial-epochs spent before count too
    assert warm.finished == 4 and warm.samples_left == 6
    assert warm.used == 1.5 + 2.0 + 1.0
    assert warm.reached == [0.9, 1.2]  # the stopper starts from the reached scores, in order
    # past every name used before: c05 was running when the driver died (its run is KILLED)
    assert warm.next_number == 6


def test_the_epochs_of_candidates_killed_mid_run_count_as_spent() -> None:
    journal = [Finished("ws1-seed0", 0, None, None, "stopped", []), _cand(0, 2.0, 2, 1.5)]
    # c00 finished (its epochs come from the journal), c01 was cut short at 0.75 epochs, c02
    # had not trained yet; a baseline seed cut short is not the search's
    logged = {"ws1-seed0": 2.0, "c00-ws4-x": 1.5, "c01-ws4-y": 0.75, "c02-ws4-z": 0.0, "ws1-seed1": 1.0}
    assert killed_epochs(logged, journal) == 0.75


def test_a_fresh_search_starts_at_candidate_zero_with_the_whole_budget() -> None:
    starts: list[dict[str, float | int]] = [{"lr_factor": 2.0, "warmup": 4}]
    warm = warm_start([], starts, samples=7)
    assert (warm.points, warm.rewards, warm.starts) == ([], [], starts)
    assert (warm.samples_left, warm.finished, warm.used, warm.next_number) == (7, 0, 0.0, 0)


def test_a_search_spent_before_has_nothing_left() -> None:
    warm = warm_start([(_cand(i, 2.0 + i, 2, 1.0), 1.0, True) for i in range(3)], [], samples=3)
    assert warm.samples_left == 0


class _DefineByRun:
    """Stands in for solve_search._Candidates: a define-by-run space, as the search's is."""

    def __call__(self, trial: Any) -> dict[str, Any]:
        return {}


def _solve_plan(tmp_path: Path, sampler: str = "tpe", noise_scale: float | None = None) -> SolvePlan:
    from scalesweep.orchestrator.plan.cluster import local_cluster
    from scalesweep.orchestrator.plan.solve_plan import plan_solve
    from scalesweep.orchestrator.spec.load import load_sweep
    from tests.unit.test_solve import QUADRATIC

    (tmp_path / "q.yaml").write_text(QUADRATIC)
    return plan_solve(load_sweep(str(tmp_path / "q.yaml"), []), local_cluster(), world_size=4,
                      budget=None, candidates=1, lr=None, warmup=None, sampler=sampler,
                      noise_scale=noise_scale)


def _trials(searcher: Any, state: str) -> list[Any]:
    import optuna

    return [t for t in searcher._ot_study.get_trials() if t.state == optuna.trial.TrialState[state]]


def test_the_searcher_is_given_the_finished_candidates_as_completed_trials(tmp_path: Path) -> None:
    from scalesweep.orchestrator.launch.solve_search import _searcher

    sp = _solve_plan(tmp_path)  # lr factor 0.707..8 (SGD, no noise scale), warmup 1..4
    warm = warm_start([(_cand(0, 8.0, 4, 1.0), 1.3, True), (_cand(1, 3.0, 2, 1.0), 0.8, True),
                       (_cand(2, 5.0, 1, 4.0), 1.1, False)],
                      [{"lr_factor": 4.0, "warmup": 3}], samples=8)
    searcher = _searcher(sp, _DefineByRun(), warm)
    assert [(t.params, t.value) for t in _trials(searcher, "COMPLETE")] == [
        ({"lr_factor": 8.0, "warmup": 4}, 1.3), ({"lr_factor": 3.0, "warmup": 2}, 0.8)]
    # one that never reached is told as a live one is (_CensoredOptunaSearch): pruned at its
    # bound, the step its number of evals
    assert [(t.params, t.value, t.intermediate_values) for t in _trials(searcher, "PRUNED")] == [
        ({"lr_factor": 5.0, "warmup": 1}, 1.1, {2: 1.1})]
    # the named rule's point not yet tried is still enqueued for the first draw
    waiting = _trials(searcher, "WAITING")
    assert [t.system_attrs.get("fixed_params") for t in waiting] == [{"lr_factor": 4.0, "warmup": 3}]


def test_a_candidate_that_never_reached_is_told_to_optuna_as_pruned_at_its_bound(tmp_path: Path) -> None:
    """TPE must not rank a bound (a floor) with the scores of candidates that reached: told as
    a completed trial's value, 1.146 (never reached, slow baseline seed) would rank above 1.16."""
    from scalesweep.mlflow_names import STATUS_TAG
    from scalesweep.orchestrator.launch.solve_search import _searcher
    from scalesweep.science.solve import OBJECTIVE_METRIC

    searcher = _searcher(_solve_plan(tmp_path), _DefineByRun(), warm_start([], [], samples=8))
    for trial_id, status, ratio in (("a", "stopped", 1.16), ("b", "completed", 1.146), ("c", "running", 1.3)):
        assert searcher.suggest(trial_id) is not None
        last = {OBJECTIVE_METRIC: ratio, STATUS_TAG: status, "training_iteration": 30}
        searcher.on_trial_result(trial_id, last)
        searcher.on_trial_complete(trial_id, last)  # "c": stopped by the stopper, out of reach
    # (Optuna keeps a pruned trial's last intermediate value as its value too; TPE still ranks
    # every pruned trial after every completed one)
    assert [(t.value, t.state.name) for t in searcher._ot_study.get_trials()] == [
        (1.16, "COMPLETE"), (1.146, "PRUNED"), (1.3, "PRUNED")]
    pruned = _trials(searcher, "PRUNED")
    assert [t.intermediate_values for t in pruned] == [{30: 1.146}, {30: 1.3}]


def test_a_grid_enqueues_every_point_once_and_a_resumed_grid_only_those_not_finished(
        tmp_path: Path) -> None:
    from scalesweep.orchestrator.launch.solve_search import _searcher, start_points

    sp = _solve_plan(tmp_path, "grid")
    points = start_points(sp)
    # lr factor 1/sqrt(2)..8 (SGD, no noise scale: one grid step below 1x) at sqrt(2) steps: 8
    # values; warmup 1..4: 1, 1.41, 2, 2.83, 4 round to 4 updates
    assert sp.samples == len(points) == 32
    assert sorted((p["lr_factor"], p["warmup"]) for p in points) == [
        (f, w) for f in (0.707, 1.0, 1.41, 2.0, 2.83, 4.0, 5.66, 8.0) for w in (1, 2, 3, 4)]
    assert points != sorted(points, key=lambda p: (p["lr_factor"], p["warmup"]))  # shuffled...
    assert points == start_points(sp)  # ...by the search seed: the same order every time
    fresh = warm_start([], points, sp.samples)
    searcher = _searcher(sp, _DefineByRun(), fresh)
    queued = [t.system_attrs["fixed_params"] for t in _trials(searcher, "WAITING")]
    assert queued == points and fresh.samples_left == 32
    done = [(_cand(i, float(p["lr_factor"]), int(p["warmup"]), 1.0), 1.0 + i, True)
            for i, p in enumerate(points[:3])]
    resumed = warm_start(done, points, sp.samples)
    searcher = _searcher(sp, _DefineByRun(), resumed)
    assert [t.params for t in _trials(searcher, "COMPLETE")] == points[:3]
    assert [t.system_attrs["fixed_params"] for t in _trials(searcher, "WAITING")] == points[3:]
    assert resumed.samples_left == 29


def test_resume_finds_a_solve_by_its_dir_experiment_or_parent_run_never_a_sweep(tmp_path: Path) -> None:
    solve_dir = tmp_path / "q-solve-0123abcd"
    solve_dir.mkdir()
    write_state(solve_dir, {"parent_run_id": "0123abcd99", "experiment": "q-solve"})
    sweep_dir = tmp_path / "q-solve-89abcdef"  # the verification's sweep directory
    sweep_dir.mkdir()
    (sweep_dir / "scalesweep.json").write_text(json.dumps({}))
    assert find_solve_dir(str(solve_dir), tmp_path) == solve_dir.resolve()
    assert find_solve_dir("q-solve", tmp_path) == solve_dir
    assert find_solve_dir("0123abcd99", tmp_path) == solve_dir
    assert find_solve_dir("q", tmp_path) is None  # the study's own sweeps are q-<8 hex>
    assert find_solve_dir(str(sweep_dir), tmp_path) is None
    assert find_solve_dir("0123abcd00", tmp_path) is None  # another parent run


def test_a_candidate_journaled_before_the_driver_died_gets_its_evals_into_mlflow_on_resume(
        tmp_path: Path) -> None:
    """The driver journals a finished trial, then flushes its metrics and closes its run: a
    kill between the two left a FINISHED-to-be run without its curve. Real SQLite store."""
    from scalesweep.orchestrator.launch.solve import _settle_children
    from scalesweep.orchestrator.tracking.tracker import SweepTracker

    tracker = SweepTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "settle")
    parent = tracker.start_parent({}, {})
    evals: list[dict[str, Any]] = [{"update": 4, "epoch": 0.5, "dev_loss": 0.4, "solve_ratio": 2.0},
             {"update": 8, "epoch": 1.0, "dev_loss": 0.1, "solve_ratio": 1.5, "status": "stopped"}]
    unflushed = tracker.child(parent, "c01-ws4-x", {})
    tracker.add_result(unflushed, 4, {"epoch": 0.5, "dev_loss": 0.4, "solve_ratio": 2.0})
    tracker.flush()  # its first eval reached MLflow, its last died in the buffer
    killed = tracker.child(parent, "c02-ws4-x", {})
    journal = [Finished("c01-ws4-x", 0, 2.0, 3, "stopped", evals)]

    resumed = SweepTracker(tracker.uri, "settle")  # the resumed driver's
    _settle_children(resumed, resumed.children(parent), journal)
    run = resumed.client.get_run(unflushed)
    assert run.info.status == "FINISHED" and run.data.tags[STATUS_TAG] == "stopped"
    assert run.data.metrics["epoch"] == 1.0 and run.data.metrics["solve_ratio"] == 1.5
    # each step once: the one MLflow had is not sent again
    assert [(m.step, m.value) for m in resumed.client.get_metric_history(unflushed, "dev_loss")] == \
        [(4, 0.4), (8, 0.1)]
    assert resumed.client.get_run(killed).info.status == "KILLED"
    assert "epoch" not in resumed.client.get_run(killed).data.metrics


def test_ctrl_c_in_the_verification_names_the_solve_to_resume(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """run's Ctrl-C line names the verification's own sweep directory, whose resume finishes
    the sweep but answers no solve; the solve adds the state directory that does."""
    from types import SimpleNamespace

    from scalesweep.orchestrator.launch import solve

    def stopped(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(solve, "_verify_or_resume", stopped)
    with pytest.raises(KeyboardInterrupt):
        solve._verification(SimpleNamespace(sweep_dir=tmp_path), [(4.0, 75)], None)  # type: ignore[arg-type]
    assert capsys.readouterr().err == (f"this was the solve's verification: `scalesweep resume "
                                       f"{tmp_path}` continues it and prints the solve's answer\n")
