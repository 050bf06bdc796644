"""``scalesweep run``: run a sweep, Ray Tune trials tracked in MLflow, here or on a cluster's
head (``--address ray://``)."""

from __future__ import annotations

import argparse

from scalesweep.orchestrator.commands._common import Subparsers, finish, run_args, tracking_uri


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("run", help="run a sweep: Ray Tune trials tracked in MLflow")
    run_args(p)


def run(args: argparse.Namespace) -> int:
    from scalesweep.orchestrator.launch.run import ray_address, run_sweep

    address = ray_address(args.address)
    kwargs = {"overrides": args.set, "address": address, "tracking_uri": tracking_uri(args.tracking_uri),
              "summary_json": args.summary_json, "verbose": args.verbose}
    if address and address.startswith("ray://"):
        # a Ray Client driver cannot host the sweep (Tune's callbacks would run remotely); its
        # driver runs on the head instead
        from scalesweep.orchestrator.cluster.submit import run_via_client

        return finish(run_via_client(args.sweep, **kwargs))
    return finish(run_sweep(args.sweep, **kwargs))
