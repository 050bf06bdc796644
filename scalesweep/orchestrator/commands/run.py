"""``scalesweep run``: run a sweep, Ray Tune trials tracked in MLflow, here or on a cluster's
head (``--address ray://``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from scalesweep.orchestrator.commands._common import Subparsers, finish, run_args, tracking_uri

if TYPE_CHECKING:
    from scalesweep.orchestrator.launch.run import Outcome


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("run", help="run a sweep: Ray Tune trials tracked in MLflow")
    run_args(p)


def run(args: argparse.Namespace) -> int:
    return finish(run_study(args.sweep, overrides=args.set, address=args.address,
                            tracking_uri=tracking_uri(args.tracking_uri),
                            summary_json=args.summary_json, verbose=args.verbose), args.report)


def run_study(sweep: str, *, overrides: list[str], address: str | None, tracking_uri: str,
              summary_json: str | None = None, verbose: bool = False) -> Outcome:
    """The sweep run as ``scalesweep run`` runs it (``scalesweep.Study.run`` too): here, or
    (``ray://``) with its driver on the cluster's head; ``address`` else ``RAY_ADDRESS``."""
    from scalesweep.orchestrator.launch.run import ray_address, run_sweep

    address = ray_address(address)
    kwargs: dict[str, Any] = {"overrides": overrides, "address": address, "tracking_uri": tracking_uri,
              "summary_json": summary_json, "verbose": verbose}
    if address and address.startswith("ray://"):
        # a Ray Client driver cannot host the sweep (Tune's callbacks would run remotely); its
        # driver runs on the head instead
        from scalesweep.orchestrator.cluster.submit import run_via_client

        outcome: Outcome = run_via_client(sweep, **kwargs)
        return outcome
    return run_sweep(sweep, **kwargs)
