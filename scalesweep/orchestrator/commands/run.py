"""``scalesweep run``: run a sweep, Ray Tune trials tracked in MLflow, here or on a cluster's
head (``--address ray://``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from scalesweep.orchestrator.commands._common import Subparsers, finish, run_args, tracking_uri


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("run", help="run a sweep: Ray Tune trials tracked in MLflow")
    run_args(p)


def run(args: argparse.Namespace) -> int:
    from scalesweep.orchestrator.usecases.progress import console
    from scalesweep.orchestrator.usecases.run import run_study
    from scalesweep.orchestrator.usecases.study import load_file

    uri = tracking_uri(args.tracking_uri)
    outcome = run_study(load_file(args.sweep, args.set), address=args.address, tracking_uri=uri,
                        summary_json=None if args.summary_json is None else Path(args.summary_json),
                        verbose=args.verbose, progress=console())
    return finish(outcome, args.report)
