"""`scalesweep run` and `scalesweep resume`: plan -> Ray Tune -> MLflow -> summary.

parse -> build -> run -> close, in that order: every input problem is found before Ray starts
or MLflow is touched, and an unreachable tracking server fails before any compute.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scalesweep.mlflow_names import (
    DESCRIPTION_TAG,
    ERROR_TAG,
    SOLVE_SEARCH_TAG,
    STATUS_TAG,
    STEP_KEY,
    SWEEP_FILE_TAG,
    VERIFIES_TAG,
)
from scalesweep.orchestrator.launch import sweep_lock
from scalesweep.orchestrator.launch.sweep_copy import ORIGINALS_KEY, edited_since, keep_copies
from scalesweep.orchestrator.plan.rows import Plan, PlanRow, make_plan, place
from scalesweep.orchestrator.spec.errors import InputError, Problem
from scalesweep.orchestrator.spec.load import Sweep, load_sweep
from scalesweep.orchestrator.tracking import atomic_file
from scalesweep.orchestrator.tracking.machine import machine_tags
from scalesweep.orchestrator.tracking.store_check import check_store
from scalesweep.orchestrator.tracking.study_checks import end_lines
from scalesweep.orchestrator.tracking.summary import arm_summaries, headline_target, summarize
from scalesweep.orchestrator.tracking.sweep_runs import (
    close_runs,
    history,
    parent_params,
    parent_run_line,
    spool_unsent,
    tracking_grace_s,
    trial_params,
)
from scalesweep.orchestrator.tracking.tracker import (
    SweepTracker,
    curve_metrics,
    fail_fast,
    is_outage,
)
from scalesweep.science.stats.arms import ArmSummary
from scalesweep.science.stats.trial_summary import TrialSummary

if TYPE_CHECKING:
    from scalesweep.orchestrator.tracking.callback import SweepCallback  # imports Ray Tune

STATE_FILE = "scalesweep.json"
JOURNAL = "metrics.journal.jsonl"
FINAL = ("completed", "diverged", "stopped", "failed")


@dataclass
class Outcome:
    parent_run_id: str
    experiment: str
    sweep_dir: Path
    tracking_uri: str
    #: the summary JSON (docs/design.md §4.4): one object per trial that ran
    trials: list[dict[str, Any]] = field(default_factory=list)
    #: the summaries of those trials, and their arms
    summaries: list[TrialSummary] = field(default_factory=list)
    arms: list[ArmSummary] = field(default_factory=list)
    #: False when MLflow did not answer at the end: the runs are open until `resume`
    tracking_closed: bool = True
    #: has the baseline plateaued, and what curtailment saved (tracking/study_checks.py)
    checks: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 1 if any(t[STATUS_TAG] == "failed" for t in self.trials) else 0

    @property
    def statuses(self) -> dict[str, str]:
        """Trial name -> its final status."""
        return {t["name"]: t[STATUS_TAG] for t in self.trials}



def storage_root(sweep: Sweep | None = None) -> Path:
    """Where sweep state, Tune and Train checkpoints go: the sweep's ``storage_path``, else
    ``SCALESWEEP_STORAGE``, else ./scalesweep_runs (a path every node must see on a cluster)."""
    configured = sweep.spec.storage_path if sweep is not None else None
    return Path(configured or os.environ.get("SCALESWEEP_STORAGE", "scalesweep_runs")).resolve()


def ray_address(arg: str | None) -> str | None:
    """The cluster to use: ``--address``, else ``RAY_ADDRESS``, else None (start a local Ray)."""
    return arg or os.environ.get("RAY_ADDRESS") or None


def _start_local_ray(verbose: bool) -> None:
    """A Ray of our own, whose processes all see ``RAY_ADDRESS=local``.

    Why: Ray Train's placement-group cleaner, a detached actor beside each ddp trial, asks the
    state API whether its controller lives. Without an address it finds "the" cluster through
    this host's ``/tmp/ray/ray_current_cluster``, which names whatever ``ray start`` ran last: a
    dead Ray (every trial's end then waited out a 12 s timeout) or someone else's. ``local``
    makes that lookup fail at once; a Ray of our own has no dashboard, so there is no state API
    to ask. The raylet is started here and its workers inherit its environment, so this costs
    nothing per worker (a job runtime env would start each through Ray's setup_worker)."""
    import ray

    from scalesweep.orchestrator.cluster.ray_auth import own_cluster_auth

    own_cluster_auth()  # Ray's own default for a new local cluster, without its warning
    saved = os.environ.get("RAY_ADDRESS")
    os.environ["RAY_ADDRESS"] = "local"
    try:
        # "local": a Ray of our own even when another one runs on this host (ray.init() would
        # find that one through its current-cluster file and refuse num_cpus)
        ray.init(address="local", include_dashboard=False, logging_level=logging.WARNING,
                 log_to_driver=verbose, num_cpus=os.cpu_count())
    finally:
        if saved is None:
            os.environ.pop("RAY_ADDRESS", None)
        else:
            os.environ["RAY_ADDRESS"] = saved


def connect_ray(address: str | None, verbose: bool) -> None:
    """This process onto Ray: ``address`` (else ``RAY_ADDRESS``), or a local Ray of its own with
    every CPU; nothing when already connected. The benchmarks connect the same way."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Tune's own CSV/JSON/TensorBoard loggers duplicate what MLflow gets, and cost time.
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # Tune's result grid looks for the per-trial JSON/CSV files we just switched off; we read
    # results from our own callback, so its warning about the missing files is noise.
    logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)
    if ray.is_initialized():
        return
    # RAY_ADDRESS counts as --address: ray.init() would connect to it anyway, and then refuse
    # the num_cpus that only a new local Ray accepts
    address = ray_address(address)
    if address and address.startswith("ray://"):
        raise InputError("ray", [Problem("address", address, "a Ray Client address cannot host "
                                         "the sweep driver: `scalesweep run --address ray://...` "
                                         "runs it on the head "
                                         "(scalesweep.orchestrator.launch.client_run.run_via_client)")])
    if address:
        from scalesweep.orchestrator.cluster.ray_auth import enable_token_auth

        # Ray presents its auth token for "auto" by itself, for an explicit address only in
        # token mode: turn that on when the user gave a token (see scalesweep.orchestrator.cluster.ray_auth)
        enable_token_auth(address)
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=verbose)
    else:
        _start_local_ray(verbose)


def _check_feasible(plan: Plan) -> None:
    bad = [r for r in plan.rows if not r.feasible]
    if bad:
        raise InputError(plan.sweep.source, [
            Problem(f"trial {r.name}", f"{r.physical_workers} workers", f"cannot be scheduled: {r.reason}")
            for r in bad])


def run_sweep(path: str, *, overrides: list[str], address: str | None, tracking_uri: str,
              summary_json: str | None = None, verbose: bool = False,
              parent_tags: Mapping[str, str] | None = None) -> Outcome:
    """The sweep file at ``path`` with its overrides, loaded and run (``run_loaded``);
    ``parent_tags``: more tags on the parent run (`solve` marks its verification so)."""
    return run_loaded(load_sweep(path, overrides), sweep_file=Path(path), overrides=overrides,
                      address=address, tracking_uri=tracking_uri, summary_json=summary_json,
                      verbose=verbose, parent_tags=parent_tags)


def run_loaded(sweep: Sweep, *, sweep_file: Path | None, overrides: list[str], address: str | None,
               tracking_uri: str, summary_json: str | None = None, verbose: bool = False,
               parent_tags: Mapping[str, str] | None = None, sweep_text: str | None = None) -> Outcome:
    """Run ``sweep``, already validated: the file it was loaded from (``sweep_file``, with
    ``overrides``), or, for a sweep given as a mapping, ``sweep_text``, its YAML; either is
    copied into the sweep directory for ``resume``."""
    plan = make_plan(sweep)  # every input problem the plan finds, before Ray starts or MLflow is touched
    check_store(tracking_uri, reading=False)
    connect_ray(address, verbose)
    from scalesweep.orchestrator.cluster.storage_check import check_shared_storage
    from scalesweep.orchestrator.plan.cluster import connected_cluster

    place(plan, connected_cluster())  # the same trials, where Ray can run them
    _check_feasible(plan)
    check_shared_storage(storage_root(sweep))  # multi-node: every node must see it (exit 2 if not)
    tracker = SweepTracker(tracking_uri, sweep.spec.name)
    file_tag = {SWEEP_FILE_TAG: str(sweep_file.resolve())} if sweep_file is not None else {}
    parent_id = tracker.start_parent(parent_params(plan), {**file_tag, **machine_tags(),
                                                           **sweep_tags(sweep), **(parent_tags or {})})
    sweep_dir = storage_root(sweep) / f"{sweep.spec.name}-{parent_id[:8]}"
    sweep_dir.mkdir(parents=True, exist_ok=True)
    tracker.journal = sweep_dir / JOURNAL
    # the text validated above, not the file read again: it may have been edited since
    kept = keep_copies(sweep_file, sweep, overrides, sweep_dir, sweep_text)
    if sweep_file is None:  # a mapping's sweep file is its copy
        tracker.client.set_tag(parent_id, SWEEP_FILE_TAG, str(kept.sweep))
    state = {SWEEP_FILE_TAG: str(kept.sweep), "overrides": kept.overrides,
             ORIGINALS_KEY: kept.originals, "tracking_uri": tracking_uri,
             "parent_run_id": parent_id, "experiment": sweep.spec.name, "address": address}
    atomic_file.write_text(sweep_dir / STATE_FILE, json.dumps(state, indent=1))
    print(f"sweep {sweep.spec.name}: {len(plan.rows)} trials, "
          f"{parent_run_line(parent_id, tracking_uri)}; state in {sweep_dir}")
    with sweep_lock.hold(sweep_dir, "run"):
        return _execute(plan, tracker, parent_id, sweep_dir, tracking_uri, summary_json, {})


def find_sweep_dir(name_or_dir: str) -> Path:
    p = Path(name_or_dir)
    if (p / STATE_FILE).is_file():
        return p.resolve()
    root = storage_root()
    candidates = sorted((d for d in root.glob(f"{name_or_dir}-*") if (d / STATE_FILE).is_file()),
                        key=lambda d: (d / STATE_FILE).stat().st_mtime)
    if not candidates:
        raise InputError("resume", [Problem("SWEEP_NAME_OR_DIR", name_or_dir,
                                            f"no sweep directory with {STATE_FILE} here or under {root}")])
    return candidates[-1]


def resume_sweep(name_or_dir: str, *, address: str | None, tracking_uri: str | None,
                 summary_json: str | None = None, verbose: bool = False,
                 retry_failed: bool = False) -> Outcome:
    sweep_dir = find_sweep_dir(name_or_dir)
    with sweep_lock.hold(sweep_dir, "resume"):  # before anything starts: a live driver is exit 2
        return _resume(sweep_dir, address=address, tracking_uri=tracking_uri, summary_json=summary_json,
                       verbose=verbose, retry_failed=retry_failed)


def _resume(sweep_dir: Path, *, address: str | None, tracking_uri: str | None,
            summary_json: str | None, verbose: bool, retry_failed: bool) -> Outcome:
    state = json.loads((sweep_dir / STATE_FILE).read_text())
    uri = tracking_uri or state["tracking_uri"]
    sweep = load_sweep(state[SWEEP_FILE_TAG], state["overrides"])
    for line in edited_since(state.get(ORIGINALS_KEY) or {}):
        print(line)
    plan = make_plan(sweep)  # input problems before Ray starts
    check_store(uri, reading=False)
    address = ray_address(address) or state.get("address")
    if address and address.startswith("ray://"):
        raise InputError("resume", [Problem("--address", address, "resume runs where the sweep's "
                                            "state is: on the head, with --address auto")])
    connect_ray(address, verbose)
    from scalesweep.orchestrator.cluster.storage_check import check_shared_storage
    from scalesweep.orchestrator.plan.cluster import connected_cluster

    place(plan, connected_cluster())
    check_shared_storage(sweep_dir)
    tracker = SweepTracker(uri, sweep.spec.name, journal=sweep_dir / JOURNAL)
    parent_id = state["parent_run_id"]
    existing = tracker.children(parent_id)
    tracker.client.update_run(parent_id, status="RUNNING")
    print(f"resuming sweep {sweep.spec.name} (parent run {parent_id}) from {sweep_dir}")
    if retry_failed:
        existing = _reopen_failed(tracker, existing)
    return _execute(plan, tracker, parent_id, sweep_dir, uri, summary_json, existing)


def sweep_tags(sweep: Sweep) -> dict[str, str]:
    """The parent's tags from the sweep file: its description (MLflow's UI shows it), the
    study a verification sweep checks, and the solve search whose candidates it verifies."""
    spec = sweep.spec
    tags = {DESCRIPTION_TAG: spec.description} if spec.description else {}
    if spec.verifies:
        tags[VERIFIES_TAG] = spec.verifies
    if spec.solve_search:
        tags[SOLVE_SEARCH_TAG] = spec.solve_search
    return tags


def _reopen_failed(tracker: SweepTracker, existing: dict[str, Any]) -> dict[str, Any]:
    """``resume --retry-failed``: the failed trials' runs are marked running again, so the
    sweep runs those trials once more (from their last whole checkpoint; a step already in
    MLflow is not logged twice). Each is named with the error it failed with."""
    failed = {name: run for name, run in existing.items() if run.data.tags.get(STATUS_TAG) == "failed"}
    if not failed:
        print("--retry-failed: no failed trial to retry")
        return existing
    print(f"--retry-failed: retrying {len(failed)} failed trial(s):")
    for name, run in sorted(failed.items()):
        print(f"  {name}: {run.data.tags.get(ERROR_TAG) or 'no error recorded'}")
        tracker.client.set_tag(run.info.run_id, STATUS_TAG, "pending")
        tracker.client.update_run(run.info.run_id, status="RUNNING")
    return {**existing, **{name: tracker.client.get_run(run.info.run_id) for name, run in failed.items()}}


def _execute(plan: Plan, tracker: SweepTracker, parent_id: str, sweep_dir: Path, uri: str,
             summary_json: str | None, existing: dict[str, Any]) -> Outcome:
    """The sweep's passes, in order: what MLflow already has (a resumed sweep), what the killed
    driver left unsent, the trials still to run, then their results, closed in MLflow and
    written to the sweep directory."""
    rows = {r.name: r for r in plan.rows}
    curves, done, logged = _logged_state(tracker, rows, existing)
    _replay_journal(tracker, rows, existing, curves)
    todo = [r for r in plan.rows if r.name not in done]
    _log_checkpoint_reports(tracker, sweep_dir, todo, existing, curves)
    if done:
        print(f"{len(done)} trials already finished (left as they are); running {len(todo)}")
    callback, in_play = _run_trials(plan, done, sweep_dir, tracker, parent_id, curves, existing)
    summaries = summarize(plan, curves)
    run_ids = {**{n: str(r.info.run_id) for n, r in existing.items()}, **callback.run_ids}
    trials = _trial_results(in_play, summaries, {**done, **callback.status}, callback.errors,
                            run_ids, callback.run_for)
    outcome = Outcome(parent_run_id=parent_id, experiment=plan.sweep.spec.name,
                      sweep_dir=sweep_dir, tracking_uri=uri, trials=trials,
                      summaries=[summaries[row.name] for row in in_play],
                      arms=arm_summaries(plan, curves, in_play),
                      checks=end_lines(plan, curves, in_play, {**done, **callback.status}))
    try:
        close_runs(tracker, parent_id, trials, summaries, logged, done, callback.run_for,
                   headline_target(plan, curves),
                   notes=[n for a in outcome.arms if a.is_baseline for n in a.notes])
    except Exception as exc:
        if not is_outage(exc):
            raise
        _tracking_left_open(outcome, tracker, exc)
    finally:  # the sweep's results stand whatever MLflow did
        _write_results(outcome, summary_json, tracker)
    return outcome


def _logged_state(tracker: SweepTracker, rows: dict[str, PlanRow], existing: dict[str, Any]
                  ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str], dict[str, set[str]]]:
    """From the runs MLflow has of this plan's trials: their evals, the trials that finished
    (name -> final status) and the metric names each run has."""
    curves: dict[str, list[dict[str, Any]]] = {}
    done: dict[str, str] = {}
    logged: dict[str, set[str]] = {}
    for name, run in existing.items():
        if name not in rows:
            continue
        logged[name] = set(run.data.metrics)
        status = run.data.tags.get(STATUS_TAG)
        curves[name] = history(tracker, run.info.run_id)
        if run.info.status in ("FINISHED", "FAILED") and status in FINAL:
            done[name] = status
    return curves, done, logged


def _replay_journal(tracker: SweepTracker, rows: dict[str, PlanRow], existing: dict[str, Any],
                    curves: dict[str, list[dict[str, Any]]]) -> None:
    """Evals the killed driver had accepted but not yet sent: MLflow gets them now, and the
    resumed trials (from checkpoints possibly past them) will not report them again."""
    run_ids_existing = {str(r.info.run_id): n for n, r in existing.items()}
    for name, run in existing.items():
        if name in rows:
            tracker.adopt(str(run.info.run_id))
    for entry in tracker.replay_journal():
        trial = run_ids_existing.get(entry["run_id"])
        if trial is not None:
            curves.setdefault(trial, []).append({STEP_KEY: entry["step"], **entry["metrics"]})


def _log_checkpoint_reports(tracker: SweepTracker, sweep_dir: Path, todo: list[PlanRow],
                            existing: dict[str, Any], curves: dict[str, list[dict[str, Any]]]
                            ) -> None:
    """The eval a trial's checkpoint was taken with may have died with the driver before it
    was logged; the resumed trial starts after it, so log it from the checkpoint itself."""
    from scalesweep.orchestrator.launch.tune import resume_report
    from scalesweep.orchestrator.tracking.callback import kept

    for row in todo:
        run = existing.get(row.name)
        report = resume_report(sweep_dir, row) if run is not None else None
        if run is not None and report and tracker.add_result(
                str(run.info.run_id), int(report[STEP_KEY]), curve_metrics(report)):
            curves.setdefault(row.name, []).append(kept(report))


def _run_trials(plan: Plan, done: dict[str, str], sweep_dir: Path, tracker: SweepTracker,
                parent_id: str, curves: dict[str, list[dict[str, Any]]], existing: dict[str, Any]
                ) -> tuple[SweepCallback, list[PlanRow]]:
    """Run the trials left under Tune, round after round (launch/rounds.py); the callback and
    the trials in play (an adaptive sweep runs part of its plan). On Ctrl-C (launch/ctrl_c.py):
    spool what MLflow lacks, mark the parent KILLED and raise KeyboardInterrupt again."""
    from scalesweep.orchestrator.launch.ctrl_c import CtrlC
    from scalesweep.orchestrator.launch.rounds import Rounds

    rows = {r.name: r for r in plan.rows}

    def child_for(name: str) -> str:
        base = plan.baseline_for(rows[name])
        params = trial_params(rows[name], plan.sweep, base.arm if base else None)
        return tracker.child(parent_id, name, params, existing)

    rounds = Rounds(plan, sweep_dir, tracker, child_for, curves, done)
    interrupted = False
    stopped: Exception | None = None
    try:
        with CtrlC(rounds.interrupt) as ctrl_c:
            rounds.run()
        interrupted = ctrl_c.interrupted
    except KeyboardInterrupt:
        interrupted = True
    except Exception as exc:
        if rounds.callback is None or rounds.callback.stopped_by is None:
            raise
        stopped = exc  # the callback stopped the sweep: a full disk, a loop every trial breaks
    finally:
        if rounds.callback is not None:  # runs of trials that started while MLflow was down
            rounds.callback.settle(deadline_s=tracking_grace_s())
        tracker.flush_with_retry(deadline_s=tracking_grace_s())
    if stopped is not None:  # its error goes on to the command; the sweep waits for resume
        _left_for_resume(tracker, parent_id, sweep_dir)
        raise stopped
    if interrupted:  # the trials that did not finish stay open in MLflow, for resume
        _left_for_resume(tracker, parent_id, sweep_dir)
        print(f"interrupted: the finished trials are kept; `scalesweep resume {sweep_dir}` runs "
              "the rest, each from its last checkpoint", file=sys.stderr)
        raise KeyboardInterrupt
    callback = rounds.callback
    assert callback is not None
    return callback, rounds.in_play


def _left_for_resume(tracker: SweepTracker, parent_id: str, sweep_dir: Path) -> None:
    """What MLflow lacks spooled to the sweep directory, and the parent ended KILLED where
    the store answers: the sweep stopped before its end, for ``resume``."""
    try:
        spool_unsent(tracker, sweep_dir)
    except OSError as exc:  # the disk that stopped the sweep, full: say what is lost
        print(f"warning: {tracker.pending()} metric values MLflow lacks could not be kept in "
              f"{sweep_dir} ({exc.strerror or exc})", file=sys.stderr)
    with contextlib.suppress(Exception), fail_fast():
        tracker.end_run(parent_id, "KILLED")


def _trial_results(in_play: list[PlanRow], summaries: dict[str, TrialSummary], statuses: dict[str, str],
                   errors: dict[str, str], run_ids: dict[str, str],
                   run_for: Callable[[str], str | None]) -> list[dict[str, Any]]:
    """One dict per trial that ran: its row, final status, run and summary (summary.json)."""
    trials = []
    for row in in_play:  # an adaptive sweep leaves the seeds it did not need unplanned
        status = statuses.get(row.name, "failed")
        if status == "running":
            status = "failed"
        trials.append({**row.to_json(), STATUS_TAG: status,
                       # a run still waiting for MLflow is made now, its evals with it; None
                       # while the server does not answer
                       "mlflow_run_id": run_ids.get(row.name) or run_for(row.name),
                       **summaries[row.name].as_json(),
                       ERROR_TAG: errors.get(row.name)})
    return trials


def _tracking_left_open(outcome: Outcome, tracker: SweepTracker, exc: Exception) -> None:
    outcome.tracking_closed = False
    spool_unsent(tracker, outcome.sweep_dir)
    sweep_dir = outcome.sweep_dir
    print(f"warning: MLflow ({outcome.tracking_uri}) did not answer at the end of the sweep "
          f"({type(exc).__name__}): the results are in {sweep_dir / 'summary.json'}, every "
          f"eval in {sweep_dir / JOURNAL}; once it answers, `scalesweep resume {sweep_dir}` "
          "logs what MLflow lacks and closes the runs", file=sys.stderr)


def _write_results(outcome: Outcome, summary_json: str | None, tracker: SweepTracker) -> None:
    """summary.json and arms.json in the sweep directory (and ``--summary-json``), each whole
    or left as it was. One the disk cannot take stops the command (exit 1) with the file, the
    OS's error and the resume command, the parent run KILLED: a sweep whose results are not on
    disk is not finished."""
    summary = json.dumps(outcome.trials, indent=1, default=str)
    arms = json.dumps([a.as_json() for a in outcome.arms], indent=1, default=str)
    files = [(outcome.sweep_dir / "summary.json", summary), (outcome.sweep_dir / "arms.json", arms)]
    if summary_json:
        files.insert(0, (Path(summary_json), summary))
    for path, text in files:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_file.write_text(path, text)
        except OSError as exc:
            with contextlib.suppress(Exception), fail_fast():
                tracker.end_run(outcome.parent_run_id, "KILLED")
            raise atomic_file.ResultsUnwritable(path, exc, outcome.sweep_dir) from exc

