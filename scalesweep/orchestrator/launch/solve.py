"""`scalesweep solve SWEEP --world-size M`: find the lr and warmup at M that converge as fast
per epoch as the baseline, then prove the answer with seeds (docs/solve.md).

Three passes, in order:

1. **Baseline.** The baseline arm at ``BASELINE_SEEDS`` seeds, under the search's own parent
   run (tag ``scalesweep.solve=search``, in experiment ``<study>-solve``). Each seed's pair gets
   a target cross-fitted from the other seeds (science/stats/targets.py), and the seed's epochs
   to it.
2. **Search.** Optuna's TPE through Ray Tune (launch/solve_search.py), one seed per candidate,
   scored by its epochs ratio to its baseline seed; a child run per candidate.
3. **Verify.** The best ``candidates`` go to a study of their own (``verify.yaml`` in the
   search's directory, its parent tagged ``scalesweep.solve=verify``): adaptive seeds against
   the baseline, decided with the margin and levels as any study is. Its answer is the recipe
   whose decision is best (faster, then equivalent, then the lowest upper end).
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from scalesweep.mlflow_names import (
    ROLE_TAG,
    SOLVE_SEARCH_TAG,
    SOLVE_TAG,
    STATUS_TAG,
    STEP_KEY,
    SWEEP_FILE_TAG,
)
from scalesweep.orchestrator.launch import sweep_lock
from scalesweep.orchestrator.launch.ctrl_c import CtrlC
from scalesweep.orchestrator.launch.run import (
    STATE_FILE,
    Outcome,
    connect_ray,
    ray_address,
    resume_sweep,
    run_sweep,
    storage_root,
)
from scalesweep.orchestrator.launch.solve_answer import answer
from scalesweep.orchestrator.launch.solve_search import (
    JournaledCallback,
    Pairing,
    Spent,
    search,
    start_points,
)
from scalesweep.orchestrator.launch.solve_state import (
    SOLVE_JOURNAL,
    Finished,
    WarmStart,
    candidate_number,
    killed_epochs,
    read_journal,
    read_state,
    warm_start,
    write_state,
)
from scalesweep.orchestrator.launch.sweep_copy import ORIGINALS_KEY, edited_since, keep_copies
from scalesweep.orchestrator.plan.cluster import local_cluster
from scalesweep.orchestrator.plan.rows import Plan, PlanRow, make_plan, place
from scalesweep.orchestrator.plan.solve_plan import (
    SolvePlan,
    StartPoint,
    StudyNoise,
    plan_solve,
    verification_spec,
)
from scalesweep.orchestrator.spec.files import dump_yaml
from scalesweep.orchestrator.spec.load import Sweep, load_sweep, metric_mode
from scalesweep.orchestrator.tracking import atomic_file
from scalesweep.orchestrator.tracking.machine import machine_tags
from scalesweep.orchestrator.tracking.store_check import check_store
from scalesweep.orchestrator.tracking.summary import points
from scalesweep.orchestrator.tracking.sweep_runs import trial_params
from scalesweep.orchestrator.tracking.tracker import SweepTracker, curve_metrics, fail_fast
from scalesweep.science.solve import Score, score, verify_order
from scalesweep.science.stats.convergence import first_crossing
from scalesweep.science.stats.targets import reference_bests, target_of
from scalesweep.trainables import trial_driver


class SolveFailed(RuntimeError):
    """The search cannot score anything: the baseline never reached its own target."""


@dataclass
class Candidate:
    name: str
    lr_factor: float
    warmup: int
    seed: int
    score: Score


@dataclass
class SolveResult:
    world_size: int
    search_parent_run_id: str
    sweep_dir: Path
    candidates: list[Candidate]
    verification: Outcome | None
    answer: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Solve:
    """One solve's settings and handles, shared by a first run and a resume."""

    path: str
    overrides: list[str]
    sweep: Sweep
    sp: SolvePlan
    plan: Plan
    cluster: Any
    tracker: SweepTracker
    parent: str
    sweep_dir: Path
    experiment: str
    address: str | None
    uri: str
    verbose: bool
    #: trial-epochs of the candidates a driver killed before had running: spent, though they
    #: run again
    killed_epochs: float = 0.0


def solve(path: str | None, *, overrides: list[str], world_size: int, budget: float | None,
          candidates: int, lr: tuple[float, float] | None, warmup: tuple[float, float] | None,
          search_seed: int, address: str | None, tracking_uri: str, verbose: bool = False,
          record: bool = True, sampler: str = "tpe", sweep: Sweep | None = None,
          sweep_text: str | None = None, noise: StudyNoise | None = None,
          start: StartPoint | None = None) -> SolveResult:
    """``sweep``: the file at ``path`` with ``overrides``, already loaded (the use case's
    study); else it is loaded here. Its text as loaded is what the state keeps for resume. A
    sweep given as a mapping has no ``path``: its YAML, ``sweep_text``, is its copy. ``noise``:
    the noise scale the study measured, which places the lr factor's low end without ``lr``
    (the use case reads it; the state keeps it for resume). ``start``: the recommendation the
    search starts at (``--start-from-recommendation``)."""
    if sweep is None:
        if path is None:
            raise ValueError("solve needs the sweep file's path or the loaded sweep")
        sweep = load_sweep(path, overrides)
    plan = make_plan(sweep)  # the study itself is valid, before anything starts
    kwargs: dict[str, Any] = {"world_size": world_size, "budget": budget, "candidates": candidates,
                              "lr": lr, "warmup": warmup, "search_seed": search_seed,
                              "sampler": sampler, "start": start}
    sp, lines = planned(sweep, kwargs, noise)
    for line in lines:
        print(line, flush=True)
    check_store(tracking_uri, reading=False)
    connect_ray(address, verbose)
    from scalesweep.orchestrator.plan.cluster import connected_cluster

    cluster = connected_cluster()
    sp = plan_solve(sweep, cluster, **kwargs)
    experiment = f"{sweep.spec.name}-solve"
    tracker = SweepTracker(tracking_uri, experiment)
    parent = tracker.start_parent(
        {"world_size": world_size, "budget": sp.budget, "candidates": candidates,
         "lr_factor_range": f"{sp.space.lr_factor.low:g}..{sp.space.lr_factor.high:g}",
         "lr_low_reason": sp.space.lr_low_reason, "study_noise_scale": sp.noise_scale,
         "warmup_range": f"{sp.space.warmup.low:g}..{sp.space.warmup.high:g}",
         "search_seed": search_seed, "sampler": sampler,
         "start_from_recommendation": "none" if sp.first is None else json.dumps(sp.first.as_json())},
        {ROLE_TAG: "solve", SOLVE_TAG: "search",
         **({SWEEP_FILE_TAG: str(Path(path).resolve())} if path is not None else {}),
         **machine_tags()})
    sweep_dir = storage_root(sweep) / f"{experiment}-{parent[:8]}"
    sweep_dir.mkdir(parents=True, exist_ok=True)
    # what `scalesweep resume` needs to continue this solve should its driver die; the sweep
    # and its recipe are read from copies from here on, as `run` reads them
    kept = keep_copies(path, sweep, overrides, sweep_dir, sweep_text)
    if path is None:  # a mapping's sweep file is its copy
        tracker.client.set_tag(parent, SWEEP_FILE_TAG, str(kept.sweep))
    write_state(sweep_dir, {"sweep": str(kept.sweep), "overrides": kept.overrides,
                            ORIGINALS_KEY: kept.originals, **kwargs,
                            "start": None if start is None else start.as_json(), "address": address,
                            "tracking_uri": tracking_uri, "parent_run_id": parent,
                            "experiment": experiment})
    print(f"solve {sweep.spec.name} at {world_size} workers: MLflow parent run {parent} "
          f"(experiment {experiment}); state in {sweep_dir}", flush=True)
    ctx = _Solve(str(kept.sweep), kept.overrides, sweep, sp, place(plan, cluster), cluster,
                 tracker, parent, sweep_dir, experiment, address, tracking_uri, verbose)
    with sweep_lock.hold(sweep_dir, "solve"):
        return _passes(ctx, [], [], record)


def checked(sweep: Sweep, **kwargs: Any) -> SolvePlan:
    """The solve's plan on this machine from ``plan_solve``'s ``kwargs``: bad input refused
    (the study's own plan, then the solve's) before anything is read, logged or started."""
    make_plan(sweep)
    return plan_solve(sweep, local_cluster(), **kwargs)


def planned(sweep: Sweep, kwargs: dict[str, Any],
            noise: StudyNoise | None) -> tuple[SolvePlan, list[str]]:
    """The solve's plan on this machine, and what it prints before Ray starts: the space (where
    its lr factor's low end comes from), the noise scale that placed it, the budget. Without
    ``kwargs["lr"]``, ``noise`` places the low end, and ``kwargs`` then carries its value (the
    state keeps it for resume); with it, the user's range stands."""
    if kwargs["lr"] is not None:
        noise = None
    kwargs["noise_scale"] = None if noise is None else noise.value
    sp = plan_solve(sweep, local_cluster(), **kwargs)
    said = [] if noise is None else [f"  noise scale: {noise.source}"]
    seeded = [] if sp.first is None else [sp.first.describe()]
    return sp, [*sp.space.describe(), *said, *seeded, _budget_line(sp)]


def _budget_line(sp: SolvePlan) -> str:
    how = (f"the grid's {sp.samples} points (every lr factor with every warmup, in an order "
           f"shuffled by the search seed) of {sp.candidate_epochs:g} epochs at most"
           if sp.sampler == "grid" else
           f"up to {sp.samples} candidates of {sp.candidate_epochs:g} epochs (Optuna TPE)")
    return (f"budget: {sp.budget:g} trial-epochs: {sp.baseline_trial_epochs:g} for "
            f"{len(sp.baseline_rows)} baseline seeds, {how}, {sp.verify_reserve:g} for the "
            f"verification's first look; a grid of the same resolution: {sp.grid_trial_epochs:g}")


def resume_solve(state_dir: Path, *, address: str | None, tracking_uri: str | None,
                 verbose: bool = False, record: bool = True) -> SolveResult:
    """Continue the solve whose state is in ``state_dir`` (launch/solve_state.py): the baseline
    seeds and candidates its journal holds are not run again; the search goes on with the
    candidates left, warm-started with the finished ones; then the verification, resumed if it
    had started. Candidates that were running when the driver died run again from scratch,
    under new names; their MLflow runs are ended KILLED."""
    state = read_state(state_dir)
    sweep = load_sweep(state["sweep"], state["overrides"])
    for line in edited_since(state.get(ORIGINALS_KEY) or {}):
        print(line, flush=True)
    plan = make_plan(sweep)
    kwargs = state_plan_kwargs(state)
    uri = tracking_uri or state["tracking_uri"]
    check_store(uri, reading=False)
    address = ray_address(address) or state.get("address")
    connect_ray(address, verbose)
    from scalesweep.orchestrator.plan.cluster import connected_cluster

    cluster = connected_cluster()
    sp = plan_solve(sweep, cluster, **kwargs)
    tracker = SweepTracker(uri, state["experiment"])
    parent = str(state["parent_run_id"])
    ctx = _Solve(state["sweep"], state["overrides"], sweep, sp, place(plan, cluster), cluster,
                 tracker, parent, state_dir, state["experiment"], address, uri, verbose)
    with sweep_lock.hold(state_dir, "resume"):
        journal = read_journal(state_dir)
        existing = tracker.children(parent)
        _settle_children(tracker, existing, journal)
        ctx.killed_epochs = killed_epochs(
            {name: float(run.data.metrics.get("epoch", 0.0)) for name, run in existing.items()}, journal)
        tracker.client.update_run(parent, status="RUNNING")
        base = sum(1 for f in journal if not f.is_candidate)
        print(f"resuming solve {sweep.spec.name} at {sp.world_size} workers (MLflow parent run "
              f"{parent}) from {state_dir}: {base} baseline seed(s) and {len(journal) - base} "
              "candidate(s) finished before; those still running when it stopped run again "
              "from scratch", flush=True)
        return _passes(ctx, journal, list(existing), record)


def state_plan_kwargs(state: dict[str, Any]) -> dict[str, Any]:
    """``plan_solve``'s arguments as a solve's state holds them: its resume plans the space it
    searched."""
    kwargs = {k: state[k] for k in ("world_size", "budget", "candidates", "search_seed")}
    kwargs["sampler"] = state.get("sampler", "tpe")  # a state written before the grid was one
    kwargs.update({k: None if state[k] is None else tuple(state[k]) for k in ("lr", "warmup")})
    # a state written before the lr factor's low end came from the lr models has no noise
    # scale: it searched from the sqrt rule
    kwargs["noise_scale"] = state.get("noise_scale")
    kwargs["lr_low_from"] = "models" if "noise_scale" in state else "sqrt"
    kwargs["start"] = None if state.get("start") is None else StartPoint.from_json(state["start"])
    return kwargs


def _settle_children(tracker: SweepTracker, existing: dict[str, Any], journal: list[Finished]) -> None:
    """The search's child runs as the journal has them: a trial journaled but not yet closed
    in MLflow gets the evals its run lacks from the journal (the driver died between the
    journal's line and the flush of its metrics) and is closed with its journaled status; one
    still open and not journaled (it was running when the driver died) is ended KILLED, and
    its trial runs again under a new name (a candidate) or a new run of the same name (a
    baseline seed)."""
    from scalesweep.orchestrator.tracking.callback import run_status

    finished = {f.name: f for f in journal}
    for name, run in existing.items():
        if run.info.status != "RUNNING":
            continue
        run_id = str(run.info.run_id)
        if name in finished:
            tracker.adopt(run_id)  # the steps MLflow has are not sent twice
            for e in finished[name].evals:
                tracker.add_result(run_id, int(e[STEP_KEY]), curve_metrics(e))
            tracker.flush(raise_on_error=True)
            tracker.set_tags(run_id, {STATUS_TAG: finished[name].status})
            tracker.end_run(run_id, run_status(finished[name].status))
        else:
            tracker.set_tags(run_id, {STATUS_TAG: "killed"})
            tracker.end_run(run_id, "KILLED")


def _passes(ctx: _Solve, journal: list[Finished], used_names: list[str], record: bool) -> SolveResult:
    """Baseline, search, verification and answer; ``journal``: what a run killed before
    finished (empty on a first run), ``used_names``: every child run name it made."""
    sp = ctx.sp
    rows: dict[str, PlanRow] = {r.name: r for r in sp.baseline_rows}
    base_arm = sp.baseline_rows[0].arm

    def child_for(name: str) -> str:
        return ctx.tracker.child(ctx.parent, name, trial_params(rows[name], ctx.sweep, base_arm))

    curves: dict[str, list[dict[str, Any]]] = {f.name: list(f.evals) for f in journal}
    callback = JournaledCallback(ctx.sweep_dir, rows, ctx.tracker, child_for, curves, total=0)
    prior = _prior_verification(ctx) if journal else None
    status = "FAILED"
    try:
        with CtrlC(partial(setattr, callback, "interrupted", True)) as ctrl_c:
            pairings, spent = _baseline_and_search(ctx, callback, rows, journal, used_names,
                                                   prior is not None, ctrl_c)
        found = _scored(sp, rows, curves, pairings)
        status = "FINISHED"
    except KeyboardInterrupt:  # Ctrl-C: what finished is in the journal and in MLflow
        status = "KILLED"
        print(f"interrupted: the finished baseline seeds and candidates are kept; `scalesweep "
              f"resume {ctx.sweep_dir}` continues the solve (the candidates still running start "
              "again)", file=sys.stderr)
        raise
    except Exception:
        if callback.stopped_by is not None:  # a full disk, a loop every trial breaks: for resume
            status = "KILLED"
        raise
    finally:
        ctx.tracker.flush_with_retry()
        with contextlib.suppress(Exception), fail_fast():
            ctx.tracker.end_run(ctx.parent, status)
    picks = _picks(found, sp.candidates)
    verification, finished_before = _verification(ctx, picks, prior)
    result = SolveResult(sp.world_size, ctx.parent, ctx.sweep_dir, found, verification)
    result.answer = answer(ctx.sweep, sp, picks, verification, spent, curves, ctx.cluster)
    if finished_before:
        print("this solve had already finished: its answer, as it was (recorded then)")
    elif record and verification is not None:  # a claim `predict --ledger` checks on later runs
        _record(ctx.uri, result.answer, verification, [r.seed for r in sp.baseline_rows])
    return result


def _baseline_and_search(ctx: _Solve, callback: JournaledCallback, rows: dict[str, PlanRow],
                         journal: list[Finished], used_names: list[str], searched: bool,
                         ctrl_c: CtrlC) -> tuple[dict[int, Pairing], Spent]:
    """The baseline seeds the journal lacks, then the search's candidates left; a Ctrl-C
    (Tune's graceful stop returns from ``fit``) raises KeyboardInterrupt after either."""
    from scalesweep.orchestrator.launch.tune import launch

    sp = ctx.sp
    done = {f.name for f in journal}
    todo = [r for r in sp.baseline_rows if r.name not in done]
    if len(todo) < len(sp.baseline_rows):
        print(f"{len(sp.baseline_rows) - len(todo)} baseline seed(s) finished before (their evals "
              f"from {SOLVE_JOURNAL}); running {len(todo)}", flush=True)
    _from_scratch(ctx.sweep_dir, todo)
    launch(ctx.plan, todo, ctx.sweep_dir, ctx.tracker, callback.child_for, callback.curves,
           callback=callback)
    if ctrl_c.interrupted:
        raise KeyboardInterrupt
    pairings = _pairings(sp, callback.curves)
    warm = _warm(ctx, rows, journal, pairings, used_names)
    if searched:  # the verification had started: the search it verified is whole
        warm.samples_left = 0
    spent = search(sp, ctx.plan, ctx.cluster, ctx.sweep_dir, callback, pairings, rows, warm)
    if ctrl_c.interrupted:
        raise KeyboardInterrupt
    return pairings, spent


def _from_scratch(sweep_dir: Path, rows: list[PlanRow]) -> None:
    """A baseline seed the driver's death cut short runs again from its first update: its
    earlier evals are not in the journal, so a checkpoint's later ones alone would be a curve
    without its start."""
    for row in rows:
        for d in [*sweep_dir.glob(f"tune*/{row.name}"),
                  sweep_dir / "train" / trial_driver.run_name(row.trial, "")]:
            if d.is_dir():
                shutil.rmtree(d, ignore_errors=True)


def _warm(ctx: _Solve, rows: dict[str, PlanRow], journal: list[Finished],
          pairings: dict[int, Pairing], used_names: list[str]) -> WarmStart:
    """The journaled candidates' rows (back in ``rows``) and scores, as the search's warm start."""
    sp = ctx.sp
    target = sp.sweep.spec.target
    mode = metric_mode(sp.sweep)
    scored: list[tuple[Finished, float, bool]] = []
    for f in journal:
        number = candidate_number(f.name)
        pair = pairings.get(f.seed)
        if f.point is None or number is None or pair is None:
            continue
        rows[f.name] = sp.candidate_row(number, *f.point, f.seed, pair.target,
                                        pair.baseline_epochs, ctx.cluster)
        s = score(points(f.evals, target.metric), pair.target, mode, pair.baseline_epochs,
                  target.smoothing) if f.evals else Score(math.nan, False)
        scored.append((f, s.value, s.reached))
    warm = warm_start(scored, start_points(sp), sp.samples, used_names)
    warm.used += ctx.killed_epochs
    if warm.finished:
        starts = ("grid point(s)" if sp.sampler == "grid" else "named-rule start point(s)"
                  if sp.first is None else "start point(s) (the recommendation's, the named rules')")
        print(f"search: {warm.finished} candidate(s) finished before, told to the TPE sampler as "
              f"evaluated (not run again); {warm.samples_left} left, {len(warm.starts)} {starts} "
              "still to try", flush=True)
    return warm


def _prior_verification(ctx: _Solve) -> Any | None:
    """The verification's parent run, if this search's verification had started."""
    runs = ctx.tracker.client.search_runs(
        [ctx.tracker.experiment_id],
        filter_string=f"tags.`{SOLVE_SEARCH_TAG}` = '{ctx.parent}' and tags.`{SOLVE_TAG}` = 'verify'",
        max_results=10)
    return runs[0] if runs else None


def _verification(ctx: _Solve, picks: list[tuple[float, int]], prior: Any | None
                  ) -> tuple[Outcome | None, bool]:
    """``_verify_or_resume``; on Ctrl-C, after run's line (which names the verification's own
    sweep directory, whose resume would not answer the solve), the one that does."""
    try:
        return _verify_or_resume(ctx, picks, prior)
    except KeyboardInterrupt:
        print(f"this was the solve's verification: `scalesweep resume {ctx.sweep_dir}` continues "
              "it and prints the solve's answer", file=sys.stderr)
        raise


def _verify_or_resume(ctx: _Solve, picks: list[tuple[float, int]], prior: Any | None
                      ) -> tuple[Outcome | None, bool]:
    """The verification, resumed through `resume`'s machinery when it had started (its sweep
    directory holds its state); whether it had finished before."""
    verify_file = ctx.sweep_dir / "verify.yaml"
    if prior is not None and verify_file.is_file():
        vsweep = load_sweep(str(verify_file), [])
        vdir = storage_root(vsweep) / f"{vsweep.spec.name}-{str(prior.info.run_id)[:8]}"
        if (vdir / STATE_FILE).is_file():
            print(f"the verification had started (parent run {prior.info.run_id}): resuming it "
                  f"from {vdir}", flush=True)
            outcome = resume_sweep(str(vdir), address=ctx.address, tracking_uri=ctx.uri,
                                   verbose=ctx.verbose)
            return outcome, prior.info.status == "FINISHED"
    if prior is not None:  # started, but died before its sweep directory held its state
        with contextlib.suppress(Exception), fail_fast():
            ctx.tracker.end_run(str(prior.info.run_id), "KILLED")
    return _verify(Path(ctx.path), ctx.overrides, ctx.sp, picks, ctx.experiment, ctx.sweep_dir,
                   ctx.parent, ctx.address, ctx.uri, ctx.verbose), False


def _record(tracking_uri: str, ans: dict[str, Any], verification: Outcome, search_seeds: list[int]) -> None:
    from scalesweep.orchestrator.tracking.predictions import record_solve

    pid = record_solve(tracking_uri, ans, verification, search_seeds=search_seeds)
    if pid is not None:
        print(f"recorded: predictions/{pid}.json on the verification's parent run "
              f"{verification.parent_run_id}; `scalesweep predict --ledger --experiment "
              f"{verification.experiment}` scores it once that experiment holds another run of "
              "the recipe (docs/solve.md, \"Checking the recipe later\")")


def _pairings(sp: SolvePlan, curves: dict[str, list[dict[str, Any]]]) -> dict[int, Pairing]:
    """Each baseline seed's target (cross-fitted, or the study's absolute one) and its epochs
    to it; a seed that never reached is left out of the search's pairings, with a warning."""
    target = sp.sweep.spec.target
    mode = metric_mode(sp.sweep)
    by_seed = {r.seed: points(curves.get(r.name, []), target.metric) for r in sp.baseline_rows}
    bests = reference_bests(by_seed, mode=mode, smoothing=target.smoothing,
                            margin=target.equivalence_margin)
    for line in bests.warnings():
        print(line)
    out: dict[int, Pairing] = {}
    for seed, curve in by_seed.items():
        value = target.value if target.value is not None else target_of(
            bests.best(seed), target.relative_to_baseline or 0.0, mode)
        crossing = None if value is None or not curve else first_crossing(
            curve, value, mode, target.smoothing)
        if value is None or crossing is None or crossing.epochs_to_target <= 0:
            print(f"warning: baseline seed {seed} never reached its target "
                  f"({'none' if value is None else f'{value:.4g}'}): no candidate is paired with it")
            continue
        out[seed] = Pairing(value, crossing.epochs_to_target)
        print(f"baseline seed {seed}: target {target.metric} {value:.4g} reached at "
              f"{crossing.epochs_to_target:.3g} epochs")
    if not out:
        raise SolveFailed("no baseline seed reached its target, so no candidate can be scored: "
                          "train longer (training.epochs) or loosen the target")
    return out


def _scored(sp: SolvePlan, rows: dict[str, PlanRow], curves: dict[str, list[dict[str, Any]]],
            pairings: dict[int, Pairing]) -> list[Candidate]:
    """Every candidate that reported, scored from its evals (a bound where not reached)."""
    target = sp.sweep.spec.target
    mode = metric_mode(sp.sweep)
    out = []
    for name, row in rows.items():
        if row.trial.objective is None or not curves.get(name):
            continue
        pair = pairings[row.seed]
        s = score(points(curves[name], target.metric), pair.target, mode, pair.baseline_epochs,
                  target.smoothing)
        out.append(Candidate(name, float(row.axes["scaling_rule"]), int(row.axes["warmup_rule"]),
                             row.seed, s))
    return sorted(out, key=lambda c: verify_order(c.score))


def _picks(found: list[Candidate], n: int) -> list[tuple[float, int]]:
    picks: list[tuple[float, int]] = []
    for c in found:
        if (c.lr_factor, c.warmup) not in picks:
            picks.append((c.lr_factor, c.warmup))
        if len(picks) == n:
            break
    return picks


def _verify(path: Path, overrides: list[str], sp: SolvePlan, picks: list[tuple[float, int]],
            experiment: str, sweep_dir: Path, parent: str, address: str | None, uri: str,
            verbose: bool) -> Outcome | None:
    if not picks:
        print("no candidate reported a score: nothing to verify")
        return None
    data = verification_spec(path, overrides, sp, picks, experiment, parent)
    verify_file = sweep_dir / "verify.yaml"
    atomic_file.write_text(verify_file, dump_yaml(data, sort_keys=False))
    print(f"verifying {len(picks)} candidate(s) with adaptive seeds: {verify_file}", flush=True)
    # verify.yaml names the search (its parent gets SOLVE_SEARCH_TAG, as a rerun's will); this
    # run is the solve's own verification
    return run_sweep(str(verify_file), overrides=[], address=address, tracking_uri=uri,
                     verbose=verbose, parent_tags={SOLVE_TAG: "verify"})
