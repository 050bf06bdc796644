"""What several commands share: the exit codes, the arguments of ``run`` (and ``submit``), the
tracking URI, and what ``run`` and ``resume`` print when a sweep ends."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from scalesweep.mlflow_names import DEFAULT_TRACKING_URI

if TYPE_CHECKING:
    from scalesweep.orchestrator.launch.run import Outcome

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


def flag(name: str) -> str:
    """A use case's argument as the command line spells it: run_id -> --run-id."""
    return "--" + name.replace("_", "-")


def tracking_uri(arg: str | None) -> str:
    """--tracking-uri, else MLFLOW_TRACKING_URI, else the default; credentials in it move to
    the environment (tracking/credentials.py), so nothing we print or save holds them."""
    from scalesweep.orchestrator.usecases.defaults import tracking_uri_of

    return tracking_uri_of(arg)


def finish(outcome: Outcome, report: bool = True) -> int:
    """Summary table, the report (logged on the parent run) unless ``report`` is False, and
    where to look next; the exit code of the sweep."""
    conclude(outcome, report)
    return outcome.exit_code


def conclude(outcome: Outcome, report: bool = True) -> Path | None:
    """What ``run`` and ``resume`` print at the end of a sweep (summary table, arms, the report
    logged on the parent run, the UI link); the report's directory, None when none was made
    (``report`` False: ``--no-report``)."""
    from scalesweep.dashboards.run_tables import format_arms, format_summary
    from scalesweep.orchestrator.tracking.ui import ui_hint
    from scalesweep.orchestrator.usecases.run import report_dir_for, write_report

    print(format_summary(outcome.summaries, outcome.statuses))
    print("\n" + format_arms(outcome.arms))
    for line in outcome.checks:
        print(line)
    out_dir = report_dir_for(outcome.experiment, report)
    if out_dir is None:
        print(f"report: not made (--no-report); make it with scalesweep report --run-id "
              f"{outcome.parent_run_id}")
        print(ui_hint(outcome.tracking_uri, outcome.experiment))
        return None
    made = write_report(outcome, out_dir)
    if made.html is not None:
        print(f"report: {made.html}")
    if made.problem is not None:
        print(made.problem, file=sys.stderr)
    if not outcome.tracking_closed:  # no UI link: MLflow did not answer
        return None
    print(ui_hint(outcome.tracking_uri, outcome.experiment))
    return made.out_dir
