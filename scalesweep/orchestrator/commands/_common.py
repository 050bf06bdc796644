"""What several commands share: the exit codes, the arguments of ``run`` (and ``submit``), the
tracking URI, and what ``run`` and ``resume`` print when a sweep ends."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, TypeAlias

from scalesweep.mlflow_names import DEFAULT_TRACKING_URI

EXIT_OK, EXIT_ERROR, EXIT_INPUT = 0, 1, 2

#: what each command's ``add_parser`` receives: the CLI's sub-command parsers
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def run_args(p: argparse.ArgumentParser) -> None:
    sweep_arg(p)
    p.add_argument("--address", help="Ray cluster (auto, ray://host:10001, http://head:8265); "
                   "default: a local Ray started for this sweep")
    tracking_uri_arg(p)
    set_arg(p)
    summary_json_arg(p)
    verbose_arg(p)
    no_report_arg(p)


# --- arguments several commands take, with one help text each ------------------------------------


def sweep_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep", metavar="SWEEP.yaml",
                   help="the sweep file (docs/sweep-file.md), e.g. sweeps/smoke.yaml")


def set_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a dotted path of the sweep file with a YAML value, e.g. "
                   "--set optimizer.lr=1e-3 --set axes.world_size=[4]; repeatable")


def tracking_uri_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tracking-uri", metavar="URI",
                   help=f"MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else "
                   f"{DEFAULT_TRACKING_URI} in the current directory)")


def summary_json_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--summary-json", metavar="PATH",
                   help="also write one JSON object per trial here (docs/design.md §4.4); "
                   "default: none")


def verbose_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--verbose", "-v", action="store_true",
                   help="also show Ray's own logs from the trials' processes")


def study_args(p: argparse.ArgumentParser, *, required: bool) -> None:
    """``--experiment NAME | --run-id ID``: which study to read from MLflow."""
    which = p.add_mutually_exclusive_group(required=required)
    which.add_argument("--experiment", metavar="NAME",
                       help="the study's MLflow experiment (its `name`); its latest sweep")
    which.add_argument("--run-id", metavar="PARENT_ID",
                       help="one sweep of a study: its parent run's id (printed by run)")


def no_report_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-report", dest="report", action="store_false",
                   help="print the tables but make no report (later: scalesweep report --run-id)")


def tracking_uri(arg: str | None) -> str:
    """--tracking-uri, else MLFLOW_TRACKING_URI, else the default; credentials in it move to
    the environment (tracking/credentials.py), so nothing we print or save holds them."""
    from scalesweep.orchestrator.tracking import credentials

    return credentials.strip(arg or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI)


def finish(outcome: Any, report: bool = True) -> int:
    """Summary table, the report (logged on the parent run) unless ``report`` is False, and
    where to look next; the exit code of the sweep."""
    conclude(outcome, report)
    return int(outcome.exit_code)


def conclude(outcome: Any, report: bool = True) -> Path | None:
    """What ``run`` and ``resume`` print at the end of a sweep (summary table, arms, the report
    logged on the parent run, the UI link); the report's directory, None when none was made
    (``report`` False: ``--no-report``)."""
    from scalesweep.orchestrator.tracking.summary_table import format_arms, format_summary
    from scalesweep.orchestrator.tracking.ui import ui_hint

    print(format_summary(outcome.summaries, outcome.statuses))
    if any(a.n_seeds > 1 for a in outcome.arms) or len(outcome.arms) < len(outcome.trials):
        print("\n" + format_arms(outcome.arms))
    for line in outcome.checks:
        print(line)
    out_dir = os.path.join("reports", outcome.experiment)
    if not report:
        print(f"report: not made (--no-report); make it with scalesweep report --run-id "
              f"{outcome.parent_run_id}")
        print(ui_hint(outcome.tracking_uri, outcome.experiment))
        return None
    if not outcome.tracking_closed:  # the report reads MLflow, which did not answer just now
        print(f"report: not made (MLflow did not answer); after `scalesweep resume`, make it "
              f"with scalesweep report --run-id {outcome.parent_run_id}", file=sys.stderr)
        return None
    from scalesweep.dashboards.report import build_report  # matplotlib, pandas: only for a report

    report_dir: Path | None = None
    try:
        paths = build_report(outcome.tracking_uri, parent_run_id=outcome.parent_run_id,
                             out_dir=out_dir)
        report_dir = paths.out_dir
        from mlflow.tracking import MlflowClient

        MlflowClient(outcome.tracking_uri).log_artifacts(outcome.parent_run_id, out_dir, "report")
        print(f"report: {paths.html}")
    except Exception as exc:  # the trials are safe in MLflow; a report can be made later
        print(f"warning: report failed ({type(exc).__name__}: {exc}); make it later with "
              f"scalesweep report --run-id {outcome.parent_run_id}", file=sys.stderr)
    print(ui_hint(outcome.tracking_uri, outcome.experiment))
    return report_dir
