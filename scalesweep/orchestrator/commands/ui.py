"""``scalesweep ui``: the MLflow UI on the tracking store, on 127.0.0.1 unless ``--host`` says
otherwise (with a warning: MLflow's UI has no login)."""

from __future__ import annotations

import argparse
import ipaddress
import re
import sys

from scalesweep.orchestrator.commands._common import Subparsers, tracking_uri, tracking_uri_arg
from scalesweep.orchestrator.spec.errors import InputError, Problem

DEFAULT_HOST = "127.0.0.1"
#: one DNS label (RFC 1123); a host name is such labels joined by dots
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("ui", help="the MLflow UI on the tracking store, on 127.0.0.1 (--host to "
                       "serve it to others)")
    tracking_uri_arg(p)
    p.add_argument("--port", type=int, default=5000, help="the port the UI listens on")
    p.add_argument("--host", default=DEFAULT_HOST,
                   help="the address to bind: 127.0.0.1 serves this machine only; 0.0.0.0 (every "
                   "interface) or another machine's address exposes every run to the network, "
                   "with a warning")


def host_problem(host: str) -> Problem | None:
    """Why ``host`` cannot be bound (an address or a host name, no scheme, port or path)."""
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    labels = host.split(".")
    if len(host) <= 253 and all(_LABEL.fullmatch(label) for label in labels):
        return None
    return Problem("--host", host, "must be an IP address or a host name, e.g. 127.0.0.1 or "
                   "0.0.0.0 (no scheme, port or path: the port is --port)")


def exposure_warning(host: str, port: int) -> str | None:
    """What binding ``host`` exposes, or None for a loopback address (this machine only)."""
    if host == "localhost":
        return None
    try:
        address = ipaddress.ip_address(host)
    except ValueError:  # a host name other than localhost: another machine can reach it
        address = None
    if address is not None and address.is_loopback:
        return None
    where = "every network interface" if address is not None and address.is_unspecified else host
    return (f"warning: --host {host}: the MLflow UI listens on {where}, port {port}; anyone who "
            "reaches it can read, change and delete every run and artifact of the store (MLflow's "
            f"UI has no login). The default, {DEFAULT_HOST}, with an SSH tunnel serves one user.")


def run(args: argparse.Namespace) -> int:
    from scalesweep.orchestrator.tracking import ui as tracking_ui
    from scalesweep.orchestrator.usecases.stores import check_readable

    problem = host_problem(args.host)
    if problem is not None:
        raise InputError("ui", [problem])
    uri = tracking_uri(args.tracking_uri)
    check_readable(uri)  # `mlflow ui` would make an empty store of a path that has none
    warning = exposure_warning(args.host, args.port)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    return tracking_ui.serve(uri, args.port, args.host)
