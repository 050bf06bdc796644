"""``solve``: lr and warmup at a new world size, searched (Optuna's TPE or a grid through Ray
Tune), then verified with seeds against the baseline (docs/solve.md); and the ``resume`` of a
solve whose driver died. The answer is a typed record with the fields of ``solve --json``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scalesweep.mlflow_names import ARM_PARAM
from scalesweep.orchestrator.spec.errors import InputError, Problem

if TYPE_CHECKING:
    import pandas as pd

    from scalesweep.orchestrator.launch.run import Outcome
    from scalesweep.orchestrator.launch.solve import SolveResult
    from scalesweep.orchestrator.plan.solve_plan import StartPoint, StudyNoise
    from scalesweep.orchestrator.usecases.progress import Progress
    from scalesweep.orchestrator.usecases.sweep_source import SweepSource

#: ``Solved.candidates``' columns: one row per candidate the search scored
CANDIDATE_COLUMNS = ("name", "lr_factor", "warmup_steps", "seed", "score", "reached")


@dataclass(frozen=True)
class SolveAnswer:
    """A solve's answer: the verified recipe whose decision against the baseline is best, or
    (``decision`` None) no candidate verified. The fields of ``solve --json`` (docs/solve.md);
    ``json`` is that object as printed, an older solve's without the fields it lacked."""

    world_size: int
    #: faster, equivalent, slower, not resolved; None: nothing verified
    decision: str | None
    arm: str | None
    #: the settings that change from the baseline's, in the recipe's keys: {format, settings}
    recipe: dict[str, Any] | None
    lr_factor: float | None
    lr: float | None
    peak_lr: float | None
    warmup_steps: int | None
    #: the paired epochs ratio against the baseline: estimate (None when only a bound) and interval
    ratio_median: float | None
    ratio_ci: tuple[float | None, float | None] | None
    ratio_by_target: tuple[dict[str, Any], ...]
    #: the edges of the space searched that the pick lies on
    at_edge: tuple[str, ...]
    trials_used: int
    trial_epochs_used: float
    search_trial_epochs_used: float
    grid_trial_epochs: float
    candidates_run: int
    sampler: str
    #: the candidates verified on the same seeds, and the confidence each was read at
    best_of: int
    selection_confidence: float | None
    verification_parent_run_id: str | None
    #: the space searched: lr_factor and warmup ranges, lr_low_reason, noise_scale (None: an
    #: older solve's answer, which lacked it)
    space: dict[str, Any] | None
    json: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SolveAnswer:
        ci = data.get("ratio_ci")
        return cls(
            world_size=int(data["world_size"]), decision=data.get("decision"), arm=data.get(ARM_PARAM),
            recipe=data.get("recipe"), lr_factor=data.get("lr_factor"), lr=data.get("lr"),
            peak_lr=data.get("peak_lr"), warmup_steps=data.get("warmup_steps"),
            ratio_median=data.get("ratio_median"), ratio_ci=None if ci is None else (ci[0], ci[1]),
            ratio_by_target=tuple(data.get("ratio_by_target") or ()),
            at_edge=tuple(data.get("at_edge") or ()), trials_used=int(data.get("trials_used") or 0),
            trial_epochs_used=float(data.get("trial_epochs_used") or 0.0),
            search_trial_epochs_used=float(data.get("search_trial_epochs_used") or 0.0),
            grid_trial_epochs=float(data.get("grid_trial_epochs") or 0.0),
            candidates_run=int(data.get("candidates_run") or 0), sampler=str(data.get("sampler", "tpe")),
            best_of=int(data.get("best_of") or 0), selection_confidence=data.get("selection_confidence"),
            verification_parent_run_id=data.get("verification_parent_run_id"),
            space=data.get("space"), json=dict(data))


@dataclass(frozen=True, eq=False)
class Solved:
    """What a solve found: ``answer``; ``candidates``, one row per candidate the search scored
    (its lr factor, warmup, seed, and its score: the epochs ratio to its baseline seed, or the
    bound it is at least when it never reached the target); where its search is in MLflow and
    on disk; and its verification sweep's outcome (None when nothing was verified)."""

    answer: SolveAnswer
    candidates: pd.DataFrame = field(repr=False)
    search_parent_run_id: str
    sweep_dir: Path
    verification: Outcome | None = field(default=None, repr=False)


def solve(study: SweepSource, *, world_size: int, progress: Progress, tracking_uri: str,
          budget: float | None = None, candidates: int = 3, lr: tuple[float, float] | None = None,
          warmup: tuple[float, float] | None = None, search_seed: int = 0, sampler: str = "tpe",
          address: str | None = None, verbose: bool = False, record: bool = False,
          start_from_recommendation: bool = False) -> Solved:
    """Search lr and warmup for ``study`` at ``world_size``, then decide the best candidates
    against the baseline with seeds. ``record``: record the verified recipe as a prediction
    (``predict --ledger`` scores it against later runs). ``start_from_recommendation``: the
    search's first candidate is what ``recommend`` gives at ``world_size`` from the study's
    latest run in the store (docs/solve.md, "Starting from a recommendation"). Input problems
    raise ``InputError`` before anything starts."""
    from scalesweep.orchestrator.launch.solve import solve as search_and_verify

    problems = [Problem(name, value, "must be an integer") for name, value in
                (("world_size", world_size), ("candidates", candidates), ("search_seed", search_seed))
                if isinstance(value, bool) or not isinstance(value, int)]
    if problems:
        raise InputError("solve", problems)
    if not isinstance(start_from_recommendation, bool):
        raise InputError("solve", [Problem("start_from_recommendation", start_from_recommendation,
                                           "must be True or False")])
    noise, start = None, None
    if lr is None or start_from_recommendation:  # both read the study in the store
        from scalesweep.orchestrator.launch.solve import checked

        checked(study.sweep, world_size=world_size, budget=budget, candidates=candidates, lr=lr,
                warmup=warmup, search_seed=search_seed, sampler=sampler)  # before the store is read
    if lr is None:  # the default lr range's low end is placed with the study's noise scale
        noise = study_noise(tracking_uri, study.sweep.spec.name)
    if start_from_recommendation:
        start = recommended_start(tracking_uri, study.sweep.spec.name, world_size)
    with progress.capture():
        found = search_and_verify(None if study.path is None else str(study.path),
                                  overrides=list(study.overrides), sweep_text=study.text,
                                  world_size=world_size, budget=budget, candidates=candidates,
                                  lr=lr, warmup=warmup, search_seed=search_seed, address=address,
                                  tracking_uri=tracking_uri, verbose=verbose, record=record,
                                  sampler=sampler, sweep=study.sweep, noise=noise, start=start)
    return solved(found)


def recommended_start(tracking_uri: str, experiment: str, world_size: int) -> StartPoint:
    """Where ``solve --start-from-recommendation`` starts: ``recommend``'s recipe at
    ``world_size`` from the latest study in ``experiment`` (an ``InputError`` where the study
    cannot support one)."""
    import math

    from scalesweep.orchestrator.plan.solve_plan import StartPoint
    from scalesweep.orchestrator.usecases.recommend import study_recommendation

    rec = study_recommendation(tracking_uri, experiment=experiment, run_id=None, world_size=world_size)
    lo, hi = rec.recipe.lr.ci
    return StartPoint(lr_factor=rec.lr_factor, lr_factor_ci=(lo if lo > 0 else None,
                                                             hi if math.isfinite(hi) else None),
                      reference_lr=rec.reference_lr, warmup=rec.warmup_steps,
                      global_batch=rec.batch_m,
                      source=(f"recommended from study {rec.experiment!r} (parent run "
                              f"{rec.parent_run_id}) at N = {rec.world_size_n} workers, "
                              f"{rec.recipe.lr.model} model"))


def study_noise(tracking_uri: str, experiment: str) -> StudyNoise:
    """The noise scale the study measured: the late-training median of the trials of the
    latest study in ``experiment`` (not a verification sweep's), read as `predict` reads it."""
    from scalesweep.dashboards.prediction import study_noise_scale
    from scalesweep.orchestrator.plan.solve_plan import StudyNoise
    from scalesweep.orchestrator.tracking.store_check import check_store

    check_store(tracking_uri, reading=False)
    value, parent = study_noise_scale(tracking_uri, experiment)
    if parent is None:
        return StudyNoise(None, f"none measured (no study {experiment!r} in {tracking_uri})")
    if value is None:
        return StudyNoise(None, f"none measured by the trials of study {experiment!r} (parent run "
                                f"{parent})")
    return StudyNoise(value, f"{value:.4g} samples, the late-training median of the trials of "
                             f"study {experiment!r} (parent run {parent})")


def find_solve(name_or_dir: str) -> Path | None:
    """The solve state directory ``name_or_dir`` names (itself, the solve's experiment
    ``<study>-solve``, or its search's parent run id), None when it names no solve."""
    from scalesweep.orchestrator.launch.run import storage_root
    from scalesweep.orchestrator.launch.solve_state import find_solve_dir

    return find_solve_dir(name_or_dir, storage_root())


def resume_solve(state_dir: Path, *, progress: Progress, address: str | None = None,
                 tracking_uri: str | None = None, verbose: bool = False, record: bool = False) -> Solved:
    """Continue the solve whose state is in ``state_dir``: what it finished is not run again;
    a solve that had finished gives its answer as it was."""
    from scalesweep.orchestrator.launch.solve import resume_solve as resume_search

    with progress.capture():
        found = resume_search(state_dir, address=address, tracking_uri=tracking_uri,
                              verbose=verbose, record=record)
    return solved(found)


def solved(found: SolveResult) -> Solved:
    """The launcher's result as the use case's record."""
    import pandas as pd

    rows = [{"name": c.name, "lr_factor": c.lr_factor, "warmup_steps": c.warmup, "seed": c.seed,
             "score": c.score.value, "reached": c.score.reached} for c in found.candidates]
    return Solved(answer=SolveAnswer.from_json(found.answer),
                  candidates=pd.DataFrame(rows, columns=list(CANDIDATE_COLUMNS)),
                  search_parent_run_id=found.search_parent_run_id, sweep_dir=found.sweep_dir,
                  verification=found.verification)
