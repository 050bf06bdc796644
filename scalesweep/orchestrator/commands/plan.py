"""``scalesweep plan``: validate a sweep file and show one row per trial."""

from __future__ import annotations

import argparse
import json
import logging
from typing import TYPE_CHECKING, Any

from scalesweep.orchestrator.commands._common import EXIT_OK, Subparsers, set_arg, sweep_arg

if TYPE_CHECKING:
    from scalesweep.orchestrator.plan.rows import Plan
    from scalesweep.orchestrator.spec.load import Sweep


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
    from scalesweep.orchestrator.spec.load import load_sweep

    plan = build_plan(load_sweep(args.sweep, args.set), args.address)
    if args.json:
        print(json.dumps(plan_records(plan), indent=1))
    else:
        print(format_plan(plan, verbose=args.verbose))
    return EXIT_OK


def build_plan(sweep: Sweep, address: str | None = None) -> Plan:
    """The sweep's trials, for this machine or (``address``) that Ray cluster's resources: what
    ``plan`` shows and ``scalesweep.Study.plan`` returns."""
    from scalesweep.orchestrator.plan.rows import make_plan

    cluster = None
    if address:
        import ray

        from scalesweep.orchestrator.cluster.ray_auth import enable_token_auth
        from scalesweep.orchestrator.plan.cluster import connected_cluster

        enable_token_auth(address)
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
        cluster = connected_cluster()
    return make_plan(sweep, cluster)


def plan_records(plan: Plan) -> list[dict[str, Any]]:
    """``plan --json``'s objects (docs/design.md §4.3): each row's fields, then its regime."""
    from scalesweep.orchestrator.plan.regime import regimes

    regime = regimes(plan)
    return [{**r.to_json(), "regime": regime[r.name]} for r in plan.rows]
