"""``scalesweep recommend``: the lr factor and warmup at a world size M from a finished study at
N alone, each with its interval and the model it came from, and the epochs ratio M over N they
are predicted to reach; recorded on the study's parent run for ``predict --ledger``
(docs/beyond.md, "recommend")."""

from __future__ import annotations

import argparse
import json
import sys

from scalesweep.orchestrator.commands._common import (
    EXIT_OK,
    Subparsers,
    flag,
    study_args,
    tracking_uri,
    tracking_uri_arg,
)


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("recommend", help="the lr factor and warmup at a world size M from a "
                       "finished study at N, with the epochs ratio M/N they are predicted to "
                       "reach; recorded on the study's parent run")
    study_args(p, required=True)
    p.add_argument("--world-size", type=int, required=True, metavar="M",
                   help="recommend for this world size")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.add_argument("--no-record", action="store_true",
                   help="do not record the recommendation in MLflow (for predict --ledger)")
    tracking_uri_arg(p)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from scalesweep.orchestrator.usecases.recommend import record_on_parent, study_recommendation

    uri = tracking_uri(args.tracking_uri)
    rec = study_recommendation(uri, experiment=args.experiment, run_id=args.run_id,
                               world_size=args.world_size, spell=flag)
    recorded = ""
    if not args.no_record:
        rec = replace(rec, prediction_id=record_on_parent(uri, rec))
        recorded = (f"recorded: predictions/{rec.prediction_id}.json on parent run "
                    f"{rec.parent_run_id} (scalesweep predict --ledger scores it once the "
                    f"experiment has trials at {args.world_size} workers)")
    if args.json:
        print(json.dumps(rec.as_json(), indent=1))
    else:
        from scalesweep.dashboards.recommend.text import render

        print(render(rec))
    if recorded:  # stderr under --json: stdout is the JSON
        print(recorded, file=sys.stderr if args.json else sys.stdout)
    return EXIT_OK
