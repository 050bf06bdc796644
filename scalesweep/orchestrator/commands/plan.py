"""``scalesweep plan``: validate a sweep file and show one row per trial."""

from __future__ import annotations

import argparse
import json

from scalesweep.orchestrator.commands._common import EXIT_OK, Subparsers, set_arg, sweep_arg


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("plan", help="validate a sweep file and show one row per trial")
    sweep_arg(p)
    p.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    set_arg(p)
    p.add_argument("--address", help="plan for this Ray cluster's resources (default: this "
                   "machine's)")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="also list the recipe sections scalesweep ignores")


def run(args: argparse.Namespace) -> int:
    from scalesweep.orchestrator.plan.table import format_plan
    from scalesweep.orchestrator.usecases.study import load_file, plan, plan_records

    planned = plan(load_file(args.sweep, args.set).sweep, args.address)
    if args.json:
        print(json.dumps(plan_records(planned), indent=1))
    else:
        print(format_plan(planned, verbose=args.verbose))
    return EXIT_OK
