"""``run`` and ``resume``: a study's trials under Ray Tune, tracked in MLflow, to an
``Outcome``; and its report, written where the caller says."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from scalesweep.mlflow_names import store_uri_for_mlflow
from scalesweep.orchestrator.spec.errors import InputError, Problem
from scalesweep.orchestrator.usecases.defaults import keyword

if TYPE_CHECKING:
    from scalesweep.dashboards.report import ReportPaths
    from scalesweep.orchestrator.launch.run import Outcome
    from scalesweep.orchestrator.usecases.progress import Progress
    from scalesweep.orchestrator.usecases.sweep_source import SweepSource


def run_study(study: SweepSource, *, address: str | None, tracking_uri: str, progress: Progress,
              summary_json: Path | None = None, verbose: bool = False) -> Outcome:
    """The validated sweep of ``study``, run: here, or (``ray://``) with its driver on the
    cluster's head; ``address`` else ``RAY_ADDRESS``. ``summary_json``: also write the summary
    JSON there. What the run loop says goes to ``progress``."""
    from scalesweep.orchestrator.launch.run import ray_address, run_loaded

    address = ray_address(address)
    summary = None if summary_json is None else str(summary_json)
    with progress.capture():
        if address and address.startswith("ray://"):
            return _on_the_head(study, address, tracking_uri, summary, verbose)
        return run_loaded(study.sweep, sweep_file=study.path, sweep_text=study.text,
                          overrides=list(study.overrides), address=address,
                          tracking_uri=tracking_uri, summary_json=summary, verbose=verbose)


def _on_the_head(study: SweepSource, address: str, tracking_uri: str, summary_json: str | None,
                 verbose: bool) -> Outcome:
    # a Ray Client driver cannot host the sweep (Tune's callbacks would run remotely); its
    # driver runs on the head instead, from the sweep file shipped there
    from scalesweep.orchestrator.launch.client_run import run_via_client

    if study.path is None:
        raise InputError("run", [Problem("address", address, "a sweep given as a mapping runs "
                                         "here or at a Ray address (auto, host:port); for Ray "
                                         "Client, write it to a sweep file first")])
    outcome: Outcome = run_via_client(str(study.path), overrides=list(study.overrides),
                                      address=address, tracking_uri=tracking_uri,
                                      summary_json=summary_json, verbose=verbose)
    return outcome


def resume_sweep(name_or_dir: str, *, address: str | None, tracking_uri: str | None,
                 progress: Progress, summary_json: Path | None = None, verbose: bool = False,
                 retry_failed: bool = False) -> Outcome:
    """Finish the unfinished trials of the sweep whose directory (or name) is ``name_or_dir``;
    ``tracking_uri`` None: the one it ran with."""
    from scalesweep.orchestrator.launch import run as launch

    with progress.capture():
        return launch.resume_sweep(name_or_dir, address=address, tracking_uri=tracking_uri,
                                   summary_json=None if summary_json is None else str(summary_json),
                                   verbose=verbose, retry_failed=retry_failed)


@dataclass(frozen=True)
class ReportMade:
    """What :func:`write_report` did: the report's directory and page, or why there is none."""

    out_dir: Path | None
    html: Path | None
    #: why no report was made (MLflow did not answer, the report failed), with how to make it later
    problem: str | None = None


def report_dir_for(experiment: str, report: bool | str | Path) -> Path | None:
    """Where a run's report goes: ``reports/<study>`` for True (the CLI's), the path given, or
    nowhere (False)."""
    if report is True:
        return Path("reports") / experiment
    if report is False:
        return None
    if isinstance(report, str | Path) and str(report):
        return Path(report)
    raise InputError("report", [Problem("report", report, "must be True, False or a directory")])


def write_report(outcome: Outcome, out_dir: Path) -> ReportMade:
    """The report of a finished sweep (read back from MLflow, as ``scalesweep report`` makes it)
    written to ``out_dir`` and logged on its parent run as artifacts ``report/``. A report
    that cannot be made is no error (the trials are safe in MLflow): ``problem`` says why; but
    one the disk cannot take raises ``ReportUnwritable`` (the file, and how to write it again)."""
    later = f"scalesweep report --run-id {outcome.parent_run_id}"
    if not outcome.tracking_closed:  # the report reads MLflow, which did not answer just now
        return ReportMade(None, None, f"report: not made (MLflow did not answer); after "
                                      f"`scalesweep resume`, make it with {later}")
    from mlflow.tracking import MlflowClient

    from scalesweep.dashboards.report import (  # matplotlib, pandas: only for a report
        ReportUnwritable,
        build_report,
    )

    def failed(exc: Exception) -> str:
        return f"warning: report failed ({type(exc).__name__}: {exc}); make it later with {later}"

    try:
        paths = build_report(outcome.tracking_uri, parent_run_id=outcome.parent_run_id,
                             out_dir=str(out_dir))
    except ReportUnwritable:  # a full disk: the command's error (exit 1), not a warning
        raise
    except Exception as exc:
        return ReportMade(None, None, failed(exc))
    try:
        client = MlflowClient(store_uri_for_mlflow(outcome.tracking_uri))
        client.log_artifacts(outcome.parent_run_id, str(out_dir), "report")
    except Exception as exc:  # written, but not on the parent run
        return ReportMade(paths.out_dir, None, failed(exc))
    return ReportMade(paths.out_dir, paths.html)


def report(tracking_uri: str, *, experiment: str | None = None, run_id: str | None = None,
           out_dir: Path, spell: Callable[[str], str] = keyword) -> ReportPaths:
    """The report of a study in MLflow (its latest sweep, or parent run ``run_id``), written to
    ``out_dir``: tables, figures, ``report.html``; its paths, and the trials and arms its
    tables were made of. A store that is not there, or holds no such study, is an
    ``InputError`` naming the argument as ``spell`` writes it; nothing is created."""
    from scalesweep.orchestrator.usecases.stores import check_readable

    check_readable(tracking_uri)  # before the report's imports: a wrong URI costs little
    from scalesweep.dashboards.report import build_report
    from scalesweep.orchestrator.usecases.results import study_lookup

    with study_lookup("report", tracking_uri, experiment=experiment, run_id=run_id, spell=spell):
        return build_report(tracking_uri, experiment=experiment, parent_run_id=run_id,
                            out_dir=out_dir)
    raise AssertionError("unreachable")  # mypy: the with block returns or raises
