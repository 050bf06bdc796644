"""``scalesweep ui``: the MLflow UI on the tracking store, on 127.0.0.1."""

from __future__ import annotations

import argparse

from scalesweep.orchestrator.commands._common import Subparsers, tracking_uri, tracking_uri_arg


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("ui", help="the MLflow UI on the default store, on 127.0.0.1")
    tracking_uri_arg(p)
    p.add_argument("--port", type=int, default=5000, help="the port the UI listens on")


def run(args: argparse.Namespace) -> int:
    from scalesweep.orchestrator.tracking.ui import serve

    return serve(tracking_uri(args.tracking_uri), args.port)
