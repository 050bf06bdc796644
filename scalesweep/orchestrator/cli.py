"""The `scalesweep` command. Exit codes: 0 success, 2 invalid input, 1 anything else."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from scalesweep.mlflow_names import DEFAULT_TRACKING_URI
from scalesweep.orchestrator.spec.errors import InputError, Problem

EXIT_OK, EXIT_ERROR, EXIT_INPUT = 0, 1, 2


class _ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad arguments like every other input problem (exit 2)."""

    def error(self, message: str) -> Any:
        raise _ArgumentError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="scalesweep", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    plan = sub.add_parser("plan", help="validate a sweep file and show one row per trial")
    plan.add_argument("sweep")
    plan.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    plan.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                      help="override a dotted path of the sweep file with a YAML value")
    plan.add_argument("--address", help="plan for this Ray cluster's resources")
    plan.add_argument("--verbose", "-v", action="store_true",
                      help="also list the recipe sections scalesweep ignores")

    lr = sub.add_parser("lr", help="print a scheduler's lr (and momentum) at every update")
    lr.add_argument("schedule", help="WeNet YAML, DeepSpeed JSON, {optimizer, scheduler}, or a "
                    "sweep file (its settings before the axes; plots per epoch at its world sizes)")
    lr.add_argument("--updates", type=int, required=True)
    lr.add_argument("--csv", action="store_true", help="CSV on stdout (the default)")
    lr.add_argument("--plot", metavar="PNG", help="draw lr (and momentum) to this file")
    lr.add_argument("--world-size", type=int, nargs="+", default=[],
                    help="with --dataset-size: also plot lr against epoch at these world sizes")
    lr.add_argument("--dataset-size", type=int, help="training samples per epoch")

    run = sub.add_parser("run", help="run a sweep: Ray Tune trials tracked in MLflow")
    _run_args(run)
    submit = sub.add_parser("submit", help="submit a sweep to a Ray cluster via the Jobs API")
    _run_args(submit)
    submit.add_argument("--dry-run", action="store_true",
                        help="list the files that would be uploaded and their size; submit nothing")
    submit.add_argument("--max-upload", default="100MB", metavar="SIZE",
                        help="refuse an upload larger than this (default 100MB)")
    resume = sub.add_parser("resume", help="finish the unfinished trials of a sweep")
    resume.add_argument("sweep", metavar="SWEEP_NAME_OR_DIR")
    resume.add_argument("--address")
    resume.add_argument("--tracking-uri")
    resume.add_argument("--summary-json")
    resume.add_argument("--retry-failed", action="store_true",
                        help="run the trials that failed again, from their last whole checkpoint")

    report = sub.add_parser("report", help="tables and figures of a study, from MLflow")
    which = report.add_mutually_exclusive_group(required=True)
    which.add_argument("--experiment")
    which.add_argument("--run-id")
    report.add_argument("--tracking-uri")
    report.add_argument("--out", default=None, help="directory (default reports/<study>)")

    advise = sub.add_parser("advise", help="critical batch (fit of updates to target vs batch), "
                            "noise scale, and the lr and warmup rules to use at a world size")
    which = advise.add_mutually_exclusive_group(required=True)
    which.add_argument("--experiment")
    which.add_argument("--run-id")
    advise.add_argument("--world-size", type=int, help="recommend for this world size "
                        "(default: the largest in the study)")
    advise.add_argument("--tracking-uri")

    pred = sub.add_parser("predict", help="epochs to target at a world size the study did not "
                          "run, per lr rule, with an interval; recorded on the study's parent run")
    which = pred.add_mutually_exclusive_group()
    which.add_argument("--experiment")
    which.add_argument("--run-id")
    pred.add_argument("--world-size", type=int, help="predict for this world size")
    pred.add_argument("--json", action="store_true", help="one JSON object per lr rule, a list")
    pred.add_argument("--no-record", action="store_true",
                      help="do not record the prediction (or, with --ledger, the outcomes) in MLflow")
    pred.add_argument("--ledger", action="store_true", help="list every recorded prediction "
                      "(of --experiment, else of all experiments) against what was measured")
    pred.add_argument("--verify", metavar="OUT.yaml",
                      help="also write the smallest sweep that checks the prediction at M")
    pred.add_argument("--tracking-uri")

    ui = sub.add_parser("ui", help="the MLflow UI on the default store, on 127.0.0.1")
    ui.add_argument("--tracking-uri")
    ui.add_argument("--port", type=int, default=5000)
    return p


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep")
    p.add_argument("--address", help="Ray cluster (auto, ray://host:10001, http://head:8265)")
    p.add_argument("--tracking-uri", help=f"MLflow tracking URI (default {DEFAULT_TRACKING_URI})")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--summary-json", metavar="PATH")
    p.add_argument("--verbose", "-v", action="store_true")


def tracking_uri(arg: str | None) -> str:
    """--tracking-uri, else MLFLOW_TRACKING_URI, else the default; credentials in it move to
    the environment (tracking/credentials.py), so nothing we print or save holds them."""
    from scalesweep.orchestrator.tracking import credentials

    return credentials.strip(arg or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI)


def cmd_plan(args: argparse.Namespace) -> int:
    from scalesweep.orchestrator.plan.regime import regimes
    from scalesweep.orchestrator.plan.rows import make_plan
    from scalesweep.orchestrator.plan.table import format_plan
    from scalesweep.orchestrator.spec.load import load_sweep

    sweep = load_sweep(args.sweep, args.set)
    cluster = None
    if args.address:
        import ray

        from scalesweep.orchestrator.cluster.ray_auth import enable_token_auth
        from scalesweep.orchestrator.plan.cluster import connected_cluster

        enable_token_auth(args.address)
        ray.init(address=args.address, logging_level=logging.ERROR, log_to_driver=False)
        cluster = connected_cluster()
    plan = make_plan(sweep, cluster)
    regime = regimes(plan)
    if args.json:
        print(json.dumps([{**r.to_json(), "regime": regime[r.name]} for r in plan.rows], indent=1))
    else:
        print(format_plan(plan, verbose=args.verbose))
    return EXIT_OK


def cmd_lr(args: argparse.Namespace) -> int:
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
    write_csv(p)
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from scalesweep.orchestrator.launch.run import ray_address, run_sweep

    address = ray_address(args.address)
    kwargs = {"overrides": args.set, "address": address, "tracking_uri": tracking_uri(args.tracking_uri),
              "summary_json": args.summary_json, "verbose": args.verbose}
    if address and address.startswith("ray://"):
        # a Ray Client driver cannot host the sweep (Tune's callbacks would run remotely); its
        # driver runs on the head instead
        from scalesweep.orchestrator.cluster.submit import run_via_client

        return _finish(run_via_client(args.sweep, **kwargs))
    return _finish(run_sweep(args.sweep, **kwargs))


def cmd_submit(args: argparse.Namespace) -> int:
    from scalesweep.orchestrator.cluster.submit import submit

    return submit(args)


def cmd_resume(args: argparse.Namespace) -> int:
    from scalesweep.orchestrator.launch.run import resume_sweep

    outcome = resume_sweep(args.sweep, address=args.address,
                           tracking_uri=tracking_uri(args.tracking_uri) if args.tracking_uri else None,
                           summary_json=args.summary_json, retry_failed=args.retry_failed)
    return _finish(outcome)


def _finish(outcome: Any) -> int:
    """Summary table, the report (logged on the parent run), and where to look next."""
    from scalesweep.dashboards.report import build_report
    from scalesweep.orchestrator.tracking.summary_table import format_arms, format_summary
    from scalesweep.orchestrator.tracking.ui import ui_hint

    print(format_summary(outcome.summaries, outcome.statuses))
    if any(a.n_seeds > 1 for a in outcome.arms) or len(outcome.arms) < len(outcome.trials):
        print("\n" + format_arms(outcome.arms))
    out_dir = os.path.join("reports", outcome.experiment)
    if not outcome.tracking_closed:  # the report reads MLflow, which did not answer just now
        print(f"report: not made (MLflow did not answer); after `scalesweep resume`, make it "
              f"with scalesweep report --run-id {outcome.parent_run_id}", file=sys.stderr)
        return int(outcome.exit_code)
    try:
        paths = build_report(outcome.tracking_uri, parent_run_id=outcome.parent_run_id,
                             out_dir=out_dir)
        from mlflow.tracking import MlflowClient

        MlflowClient(outcome.tracking_uri).log_artifacts(outcome.parent_run_id, out_dir, "report")
        print(f"report: {paths.html}")
    except Exception as exc:  # the trials are safe in MLflow; a report can be made later
        print(f"warning: report failed ({type(exc).__name__}: {exc}); make it later with "
              f"scalesweep report --run-id {outcome.parent_run_id}", file=sys.stderr)
    print(ui_hint(outcome.tracking_uri, outcome.experiment))
    return int(outcome.exit_code)


def cmd_report(args: argparse.Namespace) -> int:
    from scalesweep.dashboards.report import build_report

    uri = tracking_uri(args.tracking_uri)
    out = args.out or os.path.join("reports", args.experiment or args.run_id)
    paths = build_report(uri, experiment=args.experiment, parent_run_id=args.run_id, out_dir=out)
    print(f"report: {paths.html}")
    return EXIT_OK


def cmd_advise(args: argparse.Namespace) -> int:
    from scalesweep.dashboards.advice import load_advice, render

    if args.world_size is not None and args.world_size < 1:
        raise InputError("--world-size", [Problem("--world-size", args.world_size, "must be at least 1")])
    advice = load_advice(tracking_uri(args.tracking_uri), experiment=args.experiment,
                         parent_run_id=args.run_id, world_size=args.world_size)
    print(render(advice))
    return EXIT_OK


def cmd_predict(args: argparse.Namespace) -> int:
    if args.ledger:
        return _predict_ledger(args)
    from scalesweep.dashboards.mlflow_data import StudyNotFound
    from scalesweep.dashboards.prediction import load_prediction, render
    from scalesweep.science.stats.predict import PredictionRefused

    if not (args.experiment or args.run_id):
        raise InputError("predict", [Problem("--experiment", None, "name the study (or --run-id "
                                             "its parent run), or list predictions with --ledger")])
    if args.world_size is None:
        raise InputError("predict", [Problem("--world-size", None, "is needed to predict")])
    if args.world_size < 1:
        raise InputError("--world-size", [Problem("--world-size", args.world_size, "must be at least 1")])
    uri = tracking_uri(args.tracking_uri)
    try:
        sp = load_prediction(uri, experiment=args.experiment, parent_run_id=args.run_id,
                             world_size=args.world_size)
    except PredictionRefused as e:
        raise InputError("predict", [Problem("--experiment" if args.experiment else "--run-id",
                                             args.experiment or args.run_id, r) for r in e.reasons]) from e
    except StudyNotFound as e:
        raise InputError("predict", [Problem("--experiment", args.experiment, str(e))]) from e
    if all(r.prediction is None for r in sp.rules):
        raise InputError("predict", [Problem(f"lr rule {r.rule}", f"--world-size {args.world_size}", why)
                                     for r in sp.rules for why in r.refused])
    verify_note = _write_verification(args, uri, sp) if args.verify else ""
    recorded = ""
    if not args.no_record:
        from scalesweep.orchestrator.tracking.predictions import record_prediction

        pid = record_prediction(uri, sp)
        recorded = (f"recorded: predictions/{pid}.json on parent run {sp.parent_run_id} "
                    "(scalesweep predict --ledger scores it once the experiment has trials at "
                    f"{args.world_size} workers)")
    if args.json:
        print(json.dumps([r.as_json() | {"best_lr": sp.best_lr_json()} for r in sp.rules], indent=1))
    else:
        print(render(sp))
    for note in (recorded, verify_note):  # stderr under --json: stdout is the JSON
        if note:
            print(note, file=sys.stderr if args.json else sys.stdout)
    return EXIT_OK


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


def cmd_ui(args: argparse.Namespace) -> int:
    from scalesweep.orchestrator.tracking.ui import serve

    return serve(tracking_uri(args.tracking_uri), args.port)


COMMANDS = {"plan": cmd_plan, "lr": cmd_lr, "run": cmd_run, "submit": cmd_submit,
            "resume": cmd_resume, "report": cmd_report, "advise": cmd_advise, "predict": cmd_predict,
            "ui": cmd_ui}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        try:
            args = build_parser().parse_args(argv)
        except _ArgumentError as exc:
            raise InputError("scalesweep", [Problem("arguments", " ".join(argv), str(exc))]) from None
        return COMMANDS[args.command](args)
    except InputError as exc:
        print(f"error: {exc.message()}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:
        if os.environ.get("SCALESWEEP_DEBUG"):
            raise
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        print("(set SCALESWEEP_DEBUG=1 for the traceback)", file=sys.stderr)
        return EXIT_ERROR
