"""``scalesweep predict``: epochs to target at a world size the study did not run, per lr
rule, with an interval, recorded on the study's parent run (``--verify`` also writes the sweep
that checks it); ``--ledger`` lists every recorded prediction against what was measured since
(docs/beyond.md, "Predict, then verify")."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from scalesweep.orchestrator.commands._common import (
    EXIT_OK,
    Subparsers,
    study_args,
    tracking_uri,
    tracking_uri_arg,
)
from scalesweep.orchestrator.spec.errors import InputError, Problem


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
    from scalesweep.dashboards.prediction import render
    from scalesweep.orchestrator.usecases.predict import (
        prediction_records,
        record_on_parent,
        study_prediction,
    )

    uri = tracking_uri(args.tracking_uri)
    sp = study_prediction(uri, experiment=args.experiment, run_id=args.run_id,
                          world_size=args.world_size, spell=_flag)
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


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _write_verification(args: argparse.Namespace, uri: str, sp: Any) -> str:
    """Write --verify's sweep, check it plans (exit 2 and no file if not), say how to run it."""
    from pathlib import Path

    from mlflow.tracking import MlflowClient

    from scalesweep.orchestrator.launch.run import storage_root
    from scalesweep.orchestrator.launch.study_source import find_study_spec
    from scalesweep.orchestrator.plan.rows import make_plan
    from scalesweep.orchestrator.plan.verify_sweep import verification_spec, write_spec
    from scalesweep.orchestrator.spec.load import load_sweep

    tags = dict(MlflowClient(uri).get_run(sp.parent_run_id).data.tags)
    source = find_study_spec(sp.parent_run_id, sp.experiment, tags, [storage_root()])
    rules = [r.rule for r in sp.rules if r.prediction is not None]
    ends = [r.prediction.ci[1] for r in sp.rules if r.prediction is not None]
    data = verification_spec(source, experiment=sp.experiment, world_size=sp.world_size,
                             rules=rules, target_value=sp.target,
                             interval_end=max(ends) if ends else None,
                             verifies=sp.parent_run_id)
    out = Path(args.verify)
    write_spec(data, out)
    try:
        plan = make_plan(load_sweep(out))
    except InputError:
        out.unlink()
        raise
    uri_arg = f" --tracking-uri {args.tracking_uri}" if args.tracking_uri else ""
    epochs = (data.get("training") or {}).get("epochs")
    return (f"verification: {out} ({len(plan.rows)} trials of {epochs} epochs at world sizes "
            f"{', '.join(map(str, data['axes']['world_size']))}, lr rules "
            f"{', '.join(data['axes']['scaling_rule'])}; from the study's sweep file via "
            f"{source.how}). Run it with\n  scalesweep run {out}{uri_arg}\nIts trials log to "
            f"experiment {sp.experiment}, the study's own, so that\n  scalesweep predict --ledger "
            f"--experiment {sp.experiment}{uri_arg}\nthen scores this prediction.")


def _predict_ledger(args: argparse.Namespace) -> int:
    from scalesweep.dashboards.prediction_ledger import ledger_lines, render_ledger
    from scalesweep.science.stats.ledger import running_hit_rate

    extra = [Problem(flag, value, "does not go with --ledger") for flag, value in
             (("--run-id", args.run_id), ("--world-size", args.world_size), ("--verify", args.verify))
             if value is not None]
    if extra:
        raise InputError("predict --ledger", extra)
    uri = tracking_uri(args.tracking_uri)
    try:
        lines = ledger_lines(uri, args.experiment)
    except ValueError as e:
        raise InputError("predict --ledger", [Problem("--experiment", args.experiment, str(e))]) from e
    if not args.no_record:
        from scalesweep.orchestrator.tracking.predictions import write_outcomes

        write_outcomes(uri, lines)
    if args.json:
        rates = running_hit_rate([x.scored for x in lines])
        print(json.dumps([x.as_json(r) for x, r in zip(lines, rates, strict=True)], indent=1))
    else:
        print(render_ledger(lines))
    return EXIT_OK
