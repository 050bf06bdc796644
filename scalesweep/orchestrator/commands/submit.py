"""``scalesweep submit``: a sweep sent to a Ray cluster as a job (Ray Jobs API)."""

from __future__ import annotations

import argparse

from scalesweep.orchestrator.commands._common import Subparsers, run_args


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("submit", help="submit a sweep to a Ray cluster via the Jobs API")
    run_args(p)
    p.add_argument("--dry-run", action="store_true",
                   help="list the files that would be uploaded and their size; submit nothing")
    p.add_argument("--max-upload", default="100MB", metavar="SIZE",
                   help="refuse an upload larger than this (default 100MB)")


def run(args: argparse.Namespace) -> int:
    from scalesweep.orchestrator.cluster.submit import submit

    return submit(args)
