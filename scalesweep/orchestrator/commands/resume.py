"""``scalesweep resume``: finish the unfinished trials of a sweep."""

from __future__ import annotations

import argparse

from scalesweep.orchestrator.commands._common import Subparsers, finish, no_report_arg, tracking_uri


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("resume", help="finish the unfinished trials of a sweep")
    p.add_argument("sweep", metavar="SWEEP_NAME_OR_DIR")
    p.add_argument("--address")
    p.add_argument("--tracking-uri")
    p.add_argument("--summary-json")
    p.add_argument("--retry-failed", action="store_true",
                   help="run the trials that failed again, from their last whole checkpoint")
    no_report_arg(p)


def run(args: argparse.Namespace) -> int:
    from scalesweep.orchestrator.launch.run import resume_sweep

    outcome = resume_sweep(args.sweep, address=args.address,
                           tracking_uri=tracking_uri(args.tracking_uri) if args.tracking_uri else None,
                           summary_json=args.summary_json, retry_failed=args.retry_failed)
    return finish(outcome, args.report)
