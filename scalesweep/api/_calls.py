"""The use cases that run or read a study, with the defaults a notebook wants: the tracking
URI and the Ray address as the CLI finds them, progress to the ``scalesweep`` logger, a Ray
this call started shut down when it returns."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from scalesweep.orchestrator.spec.errors import InputError, Problem
from scalesweep.orchestrator.usecases.defaults import optional_str, ray_of_this_call
from scalesweep.orchestrator.usecases.study import Study, load

if TYPE_CHECKING:
    from scalesweep.orchestrator.usecases.progress import Progress
    from scalesweep.orchestrator.usecases.results import Result
    from scalesweep.orchestrator.usecases.solve import Solved


def solve(study: Study | str | Path, *, world_size: int, budget: float | None = None,
          candidates: int = 3, lr: tuple[float, float] | None = None,
          warmup: tuple[float, float] | None = None, search_seed: int = 0, sampler: str = "tpe",
          address: str | None = None, tracking_uri: str | None = None, record: bool = False,
          report: bool | str | Path = True, verbose: bool = False,
          progress: Progress | None = None, start_from_recommendation: bool = False) -> Solved:
    """``scalesweep solve``: search lr and warmup for ``study`` (a :class:`Study`, or the path
    of its sweep file) at ``world_size``, then verify the best ``candidates`` with seeds
    against the baseline. ``Solved.answer`` holds the fields of ``solve --json``,
    ``Solved.candidates`` one row per candidate scored. ``budget`` (trial-epochs), ``lr`` (lr
    factor range), ``warmup`` (updates), ``search_seed``, ``sampler`` (``tpe`` or ``grid``) are
    the command's options; ``record=True`` records the verified recipe for ``predict
    --ledger``, as the CLI does unless ``--no-record``; ``report``: the verification's report
    directory, as ``Study.run``'s; ``start_from_recommendation=True``: the search's first
    candidate is ``scalesweep.recommend``'s recipe at ``world_size`` from the study in the store
    (``--start-from-recommendation``). Nothing is printed (``progress``: the ``scalesweep`` logger).

    >>> solved = scalesweep.solve("sweeps/smoke.yaml", world_size=8)
    >>> solved.answer.decision, solved.answer.ratio_ci
    """
    from scalesweep.orchestrator.usecases import solve as usecase

    resolved = study if isinstance(study, Study) else load(study)
    uri, progress = _defaults(tracking_uri, progress)
    with ray_of_this_call(True):
        solved = usecase.solve(resolved, world_size=world_size, budget=budget, candidates=candidates,
                               lr=lr, warmup=warmup, search_seed=search_seed, sampler=sampler,
                               address=optional_str("address", address), tracking_uri=uri,
                               verbose=verbose, record=_flag("record", record), progress=progress,
                               start_from_recommendation=_flag("start_from_recommendation",
                                                               start_from_recommendation))
        if solved.verification is not None:
            _report(solved.verification.experiment, solved, report, progress)
    return solved


def resume(target: str | Path, *, address: str | None = None, tracking_uri: str | None = None,
           retry_failed: bool = False, record: bool = False, report: bool | str | Path = True,
           summary_json: str | Path | None = None, verbose: bool = False,
           progress: Progress | None = None) -> Result | Solved:
    """``scalesweep resume``: finish the unfinished trials of the sweep ``target`` names (its
    directory, ``Result.sweep_dir``, or its name) and return its :class:`Result`; or continue
    the solve it names (its state directory, its experiment ``<study>-solve``, or its search's
    parent run id) and return its ``Solved``. ``tracking_uri`` None: the one it ran with.

    >>> result = scalesweep.resume(result.sweep_dir)
    """
    from scalesweep.orchestrator.usecases.results import from_outcome
    from scalesweep.orchestrator.usecases.run import report_dir_for, resume_sweep, write_report
    from scalesweep.orchestrator.usecases.solve import find_solve, resume_solve

    if not isinstance(target, str | Path) or not str(target):
        raise InputError("scalesweep.resume", [Problem("target", target, "must be a sweep's "
                                                       "directory or name, or a solve's")])
    uri, progress = _defaults(tracking_uri, progress)
    given = None if tracking_uri is None else uri  # None: the URI the sweep ran with
    address = optional_str("address", address)
    with ray_of_this_call(True):
        solve_dir = find_solve(str(target))
        if solve_dir is not None:
            solved = resume_solve(solve_dir, address=address, tracking_uri=given,
                                  verbose=verbose,
                                  record=_flag("record", record), progress=progress)
            if solved.verification is not None:
                _report(solved.verification.experiment, solved, report, progress)
            return solved
        outcome = resume_sweep(str(target), address=address, tracking_uri=given,
                               progress=progress,
                               summary_json=None if summary_json is None else Path(summary_json),
                               verbose=verbose, retry_failed=_flag("retry_failed", retry_failed))
        out_dir = report_dir_for(outcome.experiment, report)
        made = write_report(outcome, out_dir) if out_dir is not None else None
    if made is not None and made.problem is not None:
        progress.warn(made.problem)
    return from_outcome(outcome, None if made is None else made.out_dir)


def _report(experiment: str, solved: Solved, report: bool | str | Path, progress: Progress) -> None:
    from scalesweep.orchestrator.usecases.run import report_dir_for, write_report

    out_dir = report_dir_for(experiment, report)
    if out_dir is not None and solved.verification is not None:
        made = write_report(solved.verification, out_dir)
        if made.problem is not None:
            progress.warn(made.problem)


def _defaults(tracking_uri: str | None, progress: Progress | None) -> tuple[str, Progress]:
    from scalesweep.orchestrator.usecases.defaults import tracking_uri_of
    from scalesweep.orchestrator.usecases.progress import logged

    return tracking_uri_of(optional_str("tracking_uri", tracking_uri)), progress or logged()


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InputError(name, [Problem(name, value, "must be True or False")])
    return value


def submit(study: Study | str | Path, *, address: str | None = None, tracking_uri: str | None = None,
           summary_json: str | Path | None = None, dry_run: bool = False, max_upload: str = "100MB",
           verbose: bool = False, progress: Progress | None = None) -> int:
    """``scalesweep submit``: the sweep file of ``study`` (a :class:`Study` loaded from a path,
    with its overrides, or the path itself) sent to the Ray cluster whose dashboard is at
    ``address`` (``http://HEAD:8265``, else ``RAY_ADDRESS``) as a job, its logs followed to the
    end; the job's exit code. The logs go to ``progress`` (the ``scalesweep`` logger), not to
    stdout. ``dry_run=True``: nothing is contacted; the files that would be uploaded and the
    job's command go to ``progress``.

    >>> scalesweep.submit("sweeps/smoke.yaml", dry_run=True)
    0
    """
    from scalesweep.orchestrator.usecases import submit as usecase
    from scalesweep.orchestrator.usecases.progress import logged

    if isinstance(study, Study):
        if study.path is None:
            raise InputError("scalesweep.submit", [Problem("study", study.name, "submit uploads a "
                                                           "sweep file: load the study from a path")])
        path, overrides = study.path, study.overrides
    elif isinstance(study, str | Path):
        path, overrides = Path(study), ()
    else:
        raise InputError("scalesweep.submit", [Problem("study", study, "must be a Study or the path "
                                                       "of a sweep file")])
    # the URI as given: submit finds the default and moves credentials into the job's env itself
    uri = optional_str("tracking_uri", tracking_uri)
    return usecase.submit(path, overrides=overrides, address=optional_str("address", address),
                          progress=progress or logged(), tracking_uri=uri,
                          summary_json=None if summary_json is None else Path(summary_json),
                          verbose=_flag("verbose", verbose), dry_run=_flag("dry_run", dry_run),
                          max_upload=max_upload)
