"""``scalesweep report``: a study's tables and figures, from MLflow."""

from __future__ import annotations

import argparse
import os

from scalesweep.orchestrator.commands._common import (
    EXIT_OK,
    Subparsers,
    flag,
    study_args,
    tracking_uri,
    tracking_uri_arg,
)


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("report", help="tables and figures of a study, from MLflow")
    study_args(p, required=True)
    tracking_uri_arg(p)
    p.add_argument("--out", default=None, metavar="DIR",
                   help="directory (default: reports/<experiment>, or reports/<run id> with --run-id)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from scalesweep.dashboards.run_tables import format_arms, format_summary
    from scalesweep.mlflow_names import STATUS_TAG
    from scalesweep.orchestrator.usecases.run import report

    uri = tracking_uri(args.tracking_uri)
    out = args.out or os.path.join("reports", args.experiment or args.run_id)
    made = report(uri, experiment=args.experiment, run_id=args.run_id, out_dir=Path(out), spell=flag)
    # the tables `run` printed at the end of the sweep, recomputed from MLflow
    statuses = {t.summary.name: str(t.run.get(STATUS_TAG)) for t in made.trials}
    print(format_summary([t.summary for t in made.trials], statuses))
    # the baseline first, as run prints it (the others stay fastest first: MLflow has no plan order)
    print("\n" + format_arms(sorted(made.arms, key=lambda a: not a.is_baseline)))
    print(f"report: {made.html}")
    return EXIT_OK
