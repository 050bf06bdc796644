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

    from scalesweep.orchestrator.usecases.run import report

    uri = tracking_uri(args.tracking_uri)
    out = args.out or os.path.join("reports", args.experiment or args.run_id)
    html = report(uri, experiment=args.experiment, run_id=args.run_id, out_dir=Path(out), spell=flag)
    print(f"report: {html}")
    return EXIT_OK
