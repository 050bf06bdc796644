"""``scalesweep advise``: the critical batch, the noise scale, and the lr and warmup rules to
use at a world size, from a study in MLflow."""

from __future__ import annotations

import argparse

from scalesweep.orchestrator.commands._common import (
    EXIT_OK,
    Subparsers,
    flag,
    study_args,
    tracking_uri,
    tracking_uri_arg,
)


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("advise", help="critical batch (fit of updates to target vs batch), "
                       "noise scale, and the lr and warmup rules to use at a world size")
    study_args(p, required=True)
    p.add_argument("--world-size", type=int, help="recommend for this world size "
                   "(default: the largest in the study)")
    tracking_uri_arg(p)


def run(args: argparse.Namespace) -> int:
    from scalesweep.orchestrator.usecases.advise import advise

    advice = advise(args.experiment, run_id=args.run_id, world_size=args.world_size,
                    tracking_uri=tracking_uri(args.tracking_uri),
                    spell=flag)
    from scalesweep.dashboards.advice import render  # after the store check: imports MLflow
    print(render(advice))
    return EXIT_OK
