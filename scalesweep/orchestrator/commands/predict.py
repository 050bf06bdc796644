"""``scalesweep predict``: epochs to target at a world size the study did not run, per lr
rule, with an interval, recorded on the study's parent run (``--verify`` also writes the sweep
that checks it); ``--ledger`` lists every recorded prediction against what was measured since
(docs/beyond.md, "Predict, then verify")."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from scalesweep.orchestrator.commands._common import (
    EXIT_OK,
    Subparsers,
    flag,
    study_args,
    tracking_uri,
    tracking_uri_arg,
)
from scalesweep.orchestrator.spec.errors import InputError, Problem

if TYPE_CHECKING:
    from scalesweep.science.prediction.record import StudyPrediction


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("predict", help="epochs to target at a world size the study did not "
                       "run, per lr rule, with an interval; recorded on the study's parent run")
    study_args(p, required=False)  # --ledger lists every experiment's without one
    p.add_argument("--world-size", type=int, help="predict for this world size (needed but "
                   "with --ledger)")
    p.add_argument("--json", action="store_true", help="one JSON object per lr rule, a list")
    p.add_argument("--no-record", action="store_true",
                   help="do not record the prediction (or, with --ledger, the outcomes) in MLflow")
    p.add_argument("--ledger", action="store_true", help="list every recorded prediction "
                   "(of --experiment, else of all experiments) against what was measured")
    p.add_argument("--verify", metavar="OUT.yaml",
                   help="also write the smallest sweep that checks the prediction at M")
    tracking_uri_arg(p)


def run(args: argparse.Namespace) -> int:
    if args.ledger:
        return _predict_ledger(args)
    from scalesweep.orchestrator.usecases.predict import (
        prediction_records,
        record_on_parent,
        study_prediction,
    )

    uri = tracking_uri(args.tracking_uri)
    sp = study_prediction(uri, experiment=args.experiment, run_id=args.run_id,
                          world_size=args.world_size, spell=flag)
    from scalesweep.dashboards.prediction import render  # after the store check: imports MLflow
    verify_note = _write_verification(args, uri, sp) if args.verify else ""
    recorded = ""
    if not args.no_record:
        pid = record_on_parent(uri, sp)
        recorded = (f"recorded: predictions/{pid}.json on parent run {sp.parent_run_id} "
                    "(scalesweep predict --ledger scores it once the experiment has trials at "
                    f"{args.world_size} workers)")
    if args.json:
        print(json.dumps(prediction_records(sp), indent=1))
    else:
        print(render(sp))
    for note in (recorded, verify_note):  # stderr under --json: stdout is the JSON
        if note:
            print(note, file=sys.stderr if args.json else sys.stdout)
    return EXIT_OK


def _write_verification(args: argparse.Namespace, uri: str, sp: StudyPrediction) -> str:
    """Write --verify's sweep (exit 2 and no file if it does not plan); how to run it."""
    from pathlib import Path

    from scalesweep.orchestrator.usecases.predict import write_verification

    made = write_verification(uri, sp, Path(args.verify))
    uri_arg = f" --tracking-uri {args.tracking_uri}" if args.tracking_uri else ""
    return (f"verification: {made.path} ({made.trials} trials of {made.epochs} epochs at world sizes "
            f"{', '.join(map(str, made.world_sizes))}, lr rules "
            f"{', '.join(made.rules)}; from the study's sweep file via "
            f"{made.found_via}). Run it with\n  scalesweep run {made.path}{uri_arg}\nIts trials log to "
            f"experiment {sp.experiment}, the study's own, so that\n  scalesweep predict --ledger "
            f"--experiment {sp.experiment}{uri_arg}\nthen scores this prediction.")


def _predict_ledger(args: argparse.Namespace) -> int:
    from scalesweep.orchestrator.usecases.predict import ledger

    extra = [Problem(flag, value, "does not go with --ledger") for flag, value in
             (("--run-id", args.run_id), ("--world-size", args.world_size), ("--verify", args.verify))
             if value is not None]
    if extra:
        raise InputError("predict --ledger", extra)
    lines = ledger(tracking_uri(args.tracking_uri), args.experiment, record=not args.no_record)
    from scalesweep.dashboards.prediction_ledger import render_ledger  # after the store check
    from scalesweep.science.prediction.ledger import running_hit_rate
    if args.json:
        rates = running_hit_rate([x.scored for x in lines])
        print(json.dumps([x.as_json(r) for x, r in zip(lines, rates, strict=True)], indent=1))
    else:
        print(render_ledger(lines))
    return EXIT_OK
