"""``scalesweep predict``: epochs to target at a world size the study did not run, per lr
rule, with an interval, recorded on the study's parent run (``--verify`` also writes the sweep
that checks it); ``--ledger`` lists every recorded prediction against what was measured since
(docs/beyond.md, "Predict, then verify")."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scalesweep.orchestrator.commands._common import (
    EXIT_OK,
    Subparsers,
    study_args,
    tracking_uri,
    tracking_uri_arg,
)
from scalesweep.orchestrator.spec.errors import InputError, Problem

if TYPE_CHECKING:
    from scalesweep.science.prediction_record import StudyPrediction


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

    uri = tracking_uri(args.tracking_uri)
    sp = study_prediction(uri, experiment=args.experiment, run_id=args.run_id,
                          world_size=args.world_size)
    verify_note = _write_verification(args, uri, sp) if args.verify else ""
    recorded = ""
    if not args.no_record:
        pid = record(uri, sp)
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


def study_prediction(uri: str, *, experiment: str | None, run_id: str | None, world_size: int | None,
                     spell: Callable[[str], str] = _flag) -> StudyPrediction:
    """What ``predict`` predicts (``scalesweep.predict`` too): epochs to target at
    ``world_size`` per lr rule, for the study of ``experiment`` or of its parent ``run_id``.
    Every refusal is an ``InputError`` naming the argument, as ``spell`` writes it (the CLI's
    flags by default), its value and the rule."""
    from scalesweep.dashboards.mlflow_data import StudyNotFound
    from scalesweep.dashboards.prediction import load_prediction
    from scalesweep.science.stats.predict import PredictionRefused

    if not (experiment or run_id):
        raise InputError("predict", [Problem(spell("experiment"), None, "name the study (or "
                                             f"{spell('run_id')} its parent run), or list "
                                             "predictions with --ledger")])
    if world_size is None:
        raise InputError("predict", [Problem(spell("world_size"), None, "is needed to predict")])
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise InputError(spell("world_size"), [Problem(spell("world_size"), world_size,
                                                       "must be an integer")])
    if world_size < 1:
        raise InputError(spell("world_size"), [Problem(spell("world_size"), world_size,
                                                       "must be at least 1")])
    which = spell("experiment") if experiment else spell("run_id")
    try:
        sp = load_prediction(uri, experiment=experiment, parent_run_id=run_id, world_size=world_size)
    except PredictionRefused as e:
        raise InputError("predict", [Problem(which, experiment or run_id, r) for r in e.reasons]) from e
    except StudyNotFound as e:
        raise InputError("predict", [Problem(spell("experiment"), experiment, str(e))]) from e
    if all(r.prediction is None for r in sp.rules):
        raise InputError("predict", [Problem(f"lr rule {r.rule}", f"{spell('world_size')} {world_size}", why)
                                     for r in sp.rules for why in r.refused])
    return sp


def prediction_records(sp: StudyPrediction) -> list[dict[str, Any]]:
    """``predict --json``'s objects: one per lr rule, each with the best lr at the world size."""
    return [r.as_json() | {"best_lr": sp.best_lr_json()} for r in sp.rules]


def record(uri: str, sp: StudyPrediction) -> str:
    """The prediction recorded on the study's parent run, for the ledger; its id."""
    from scalesweep.orchestrator.tracking.predictions import record_prediction

    return record_prediction(uri, sp)


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
