"""``scalesweep ui``: the MLflow UI on the tracking store, on 127.0.0.1."""

from __future__ import annotations

import argparse

from scalesweep.orchestrator.commands._common import Subparsers, tracking_uri


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("ui", help="the MLflow UI on the default store, on 127.0.0.1")
    p.add_argument("--tracking-uri")
    p.add_argument("--port", type=int, default=5000)


def run(args: argparse.Namespace) -> int:
    from scalesweep.orchestrator.tracking.ui import serve

    return serve(tracking_uri(args.tracking_uri), args.port)
