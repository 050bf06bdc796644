"""What `solve` keeps on disk for `resume` (launch/solve_state.py), without Ray: the journal of
finished trials (a torn last line passed over), the warm start a resumed search is given
(finished candidates told to the sampler, the budget left, the stopper's scores, new names),
and how `resume` tells a solve's state directory from a sweep's."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from scalesweep.orchestrator.launch.solve_state import (
    SOLVE_JOURNAL,
    Finished,
    append,
    find_solve_dir,
    read_journal,
    warm_start,
    write_state,
)


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

    warmup_bounds = (1, 4)

    def __call__(self, trial: Any) -> dict[str, Any]:
        return {}


def test_the_searcher_is_given_the_finished_candidates_as_completed_trials() -> None:
    import optuna

    from scalesweep.orchestrator.launch.solve_search import _searcher

    sp: Any = SimpleNamespace(search_seed=0, samples=8,
                              space=SimpleNamespace(lr_factor=SimpleNamespace(low=2.0, high=8.0)))
    define: Any = _DefineByRun()
    warm = warm_start([(_cand(0, 8.01, 4, 1.0), 1.3, True), (_cand(1, 3.0, 2, 1.0), 0.8, True)],
                      [{"lr_factor": 4.0, "warmup": 3}], samples=8)
    searcher = _searcher(sp, define, warm)
    trials = searcher._ot_study.get_trials()
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    # 8.01 (rounded to 3 digits) is held at the space's end, where Optuna's distribution lies
    assert [(t.params, t.value) for t in done] == [({"lr_factor": 8.0, "warmup": 4}, 1.3),
                                                   ({"lr_factor": 3.0, "warmup": 2}, 0.8)]
    # the named rule's point not yet tried is still enqueued for the first draw
    waiting = [t for t in trials if t.state == optuna.trial.TrialState.WAITING]
    assert [t.system_attrs.get("fixed_params") for t in waiting] == [{"lr_factor": 4.0, "warmup": 3}]


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
