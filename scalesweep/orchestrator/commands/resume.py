"""``scalesweep resume``: finish the unfinished trials of a sweep, or continue a `solve` whose
driver died (its state directory holds ``solve.json``; docs/solve.md, "Resume and Ctrl-C")."""

from __future__ import annotations

import argparse
from pathlib import Path

from scalesweep.orchestrator.commands._common import (
    Subparsers,
    finish,
    no_report_arg,
    summary_json_arg,
    tracking_uri,
    tracking_uri_arg,
)
from scalesweep.orchestrator.spec.errors import InputError, Problem


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("resume", help="finish the unfinished trials of a sweep, or continue a solve")
    p.add_argument("sweep", metavar="SWEEP_NAME_OR_DIR",
                   help="a sweep directory or name; or a solve's state directory, its experiment "
                   "(<study>-solve) or its search's parent run id")
    p.add_argument("--address", help="Ray cluster, as for run (default: a local Ray)")
    tracking_uri_arg(p)
    summary_json_arg(p)
    p.add_argument("--retry-failed", action="store_true",
                   help="run the trials that failed again, from their last whole checkpoint")
    p.add_argument("--json", action="store_true",
                   help="a solve: print its answer as one JSON object, as `solve --json` does")
    p.add_argument("--no-record", action="store_true",
                   help="a solve: do not record the verified recipe as a prediction")
    no_report_arg(p)


def run(args: argparse.Namespace) -> int:
    from scalesweep.orchestrator.usecases.progress import console
    from scalesweep.orchestrator.usecases.run import resume_sweep
    from scalesweep.orchestrator.usecases.solve import find_solve

    uri = tracking_uri(args.tracking_uri) if args.tracking_uri else None
    solve_dir = find_solve(args.sweep)  # a solve's state first
    if solve_dir is not None:
        return _resume_solve(args, solve_dir, uri)
    if args.json or args.no_record:
        flag = "--json" if args.json else "--no-record"
        raise InputError("resume", [Problem(flag, args.sweep, "is for a solve's state directory "
                                            "(one holding solve.json); this names a sweep")])
    outcome = resume_sweep(args.sweep, address=args.address, tracking_uri=uri, progress=console(),
                           summary_json=None if args.summary_json is None else Path(args.summary_json),
                           retry_failed=args.retry_failed)
    return finish(outcome, args.report)


def _resume_solve(args: argparse.Namespace, solve_dir: Path, uri: str | None) -> int:
    from scalesweep.orchestrator.commands.solve import show
    from scalesweep.orchestrator.usecases.solve import resume_solve

    if args.retry_failed or args.summary_json:
        flag = "--retry-failed" if args.retry_failed else "--summary-json"
        raise InputError("resume", [Problem(flag, str(solve_dir), "is for a sweep; a solve's "
                                            "resume takes --json, --no-record, --address, "
                                            "--tracking-uri")])
    return show(lambda progress: resume_solve(solve_dir, address=args.address, tracking_uri=uri,
                                              record=not args.no_record, progress=progress),
                as_json=args.json)
