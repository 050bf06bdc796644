"""``scalesweep lr``: a scheduler's lr (and momentum) at every update, as CSV on stdout and,
with ``--plot``, a plot."""

from __future__ import annotations

import argparse
import sys

from scalesweep.orchestrator.commands._common import EXIT_OK, Subparsers
from scalesweep.orchestrator.spec.errors import InputError, Problem


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("lr", help="print a scheduler's lr (and momentum) at every update")
    p.add_argument("schedule", help="WeNet YAML, DeepSpeed JSON, {optimizer, scheduler}, or a "
                   "sweep file (its settings before the axes; plots per epoch at its world sizes)")
    p.add_argument("--updates", type=int, required=True, metavar="N",
                   help="print updates 1..N, one CSV row each, on stdout")
    p.add_argument("--plot", metavar="PNG", help="draw lr (and momentum) to this file")
    p.add_argument("--world-size", type=int, nargs="+", default=[],
                   help="with --dataset-size: also plot lr against epoch at these world sizes")
    p.add_argument("--dataset-size", type=int, help="training samples per epoch")


def run(args: argparse.Namespace) -> int:
    from scalesweep.orchestrator.plan.lr_preview import plot, preview, write_csv

    if args.world_size and not args.dataset_size:
        raise InputError("--world-size", [Problem("--dataset-size", None,
                                                  "is needed to plot against epoch")])
    for ws in args.world_size:
        if ws < 1:
            raise InputError("--world-size", [Problem("--world-size", ws, "must be at least 1")])
    if args.dataset_size is not None and args.dataset_size < 1:
        raise InputError("--dataset-size", [Problem("--dataset-size", args.dataset_size,
                                                     "must be at least 1")])
    p = preview(args.schedule, args.updates)
    if args.plot:
        plot(p, args.plot, args.world_size, args.dataset_size)
        if p.arms:  # stderr: stdout is the CSV
            print(f"{args.plot}: the last panel shows the lr per epoch of each of the "
                  f"{len(p.arms)} arms with its batch ramp's stages", file=sys.stderr)
    for note in p.rule_notes:  # stderr: stdout is the CSV
        print(f"rule: {note}", file=sys.stderr)
    write_csv(p)
    return EXIT_OK
