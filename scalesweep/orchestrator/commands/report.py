"""``scalesweep report``: a study's tables and figures, from MLflow."""

from __future__ import annotations

import argparse
import os

from scalesweep.orchestrator.commands._common import EXIT_OK, Subparsers, tracking_uri


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("report", help="tables and figures of a study, from MLflow")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--experiment")
    which.add_argument("--run-id")
    p.add_argument("--tracking-uri")
    p.add_argument("--out", default=None,
                   help="directory (default reports/<experiment>, or reports/<run id> with --run-id)")


def run(args: argparse.Namespace) -> int:
    from scalesweep.dashboards.report import build_report

    uri = tracking_uri(args.tracking_uri)
    out = args.out or os.path.join("reports", args.experiment or args.run_id)
    paths = build_report(uri, experiment=args.experiment, parent_run_id=args.run_id, out_dir=out)
    print(f"report: {paths.html}")
    return EXIT_OK
