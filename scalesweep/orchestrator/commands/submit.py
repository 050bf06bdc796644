"""``scalesweep submit``: a sweep sent to a Ray cluster as a job (Ray Jobs API)."""

from __future__ import annotations

import argparse
from pathlib import Path

from scalesweep.orchestrator.commands._common import Subparsers, run_args


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("submit", help="submit a sweep to a Ray cluster via the Jobs API")
    run_args(p)
    p.add_argument("--dry-run", action="store_true",
                   help="list the files that would be uploaded and their size; submit nothing")
    p.add_argument("--max-upload", default="100MB", metavar="SIZE",
                   help="refuse an upload larger than this (default 100MB)")


def run(args: argparse.Namespace) -> int:
    from scalesweep.orchestrator.usecases.progress import console
    from scalesweep.orchestrator.usecases.submit import submit

    return submit(args.sweep, overrides=args.set, address=args.address, progress=console(),
                  tracking_uri=args.tracking_uri,
                  summary_json=None if args.summary_json is None else Path(args.summary_json),
                  verbose=args.verbose, dry_run=args.dry_run, max_upload=args.max_upload)
