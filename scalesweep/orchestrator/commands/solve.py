"""``scalesweep solve SWEEP --world-size M``: search lr and warmup at M with Optuna's TPE
through Ray Tune, then decide the best candidates against the baseline with adaptive seeds;
prints the verified recipe (docs/solve.md)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scalesweep.orchestrator.commands._common import (
    EXIT_ERROR,
    EXIT_OK,
    Subparsers,
    conclude,
    set_arg,
    sweep_arg,
    tracking_uri,
    tracking_uri_arg,
    verbose_arg,
)
from scalesweep.orchestrator.spec.errors import InputError, Problem

if TYPE_CHECKING:
    from scalesweep.orchestrator.usecases.progress import Progress
    from scalesweep.orchestrator.usecases.solve import Solved


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("solve", help="find lr and warmup at a new world size (Optuna TPE through "
                       "Ray Tune), then prove the answer with seeds")
    sweep_arg(p)
    p.add_argument("--world-size", type=int, required=True, help="the world size M to solve for")
    p.add_argument("--budget", type=float, metavar="TRIAL_EPOCHS",
                   help="trial-epochs for the baseline seeds, the search and the verification's "
                   "first look (default 150)")
    p.add_argument("--candidates", type=int, default=3,
                   help="the best candidates of the search that the verification decides on")
    p.add_argument("--lr", metavar="LOW,HIGH", help="lr factor range (x the reference lr); "
                   "default up to twice the linear rule, from a low end the lr models place "
                   "with the study's measured noise scale (docs/solve.md, 'The space')")
    p.add_argument("--warmup", metavar="LOW,HIGH", help="warmup range in updates at M; default "
                   "1/4 to 4x the scaled warmup")
    p.add_argument("--search-seed", type=int, default=0, help="the TPE sampler's seed (a "
                   "grid's: the order of its points)")
    p.add_argument("--sampler", choices=("tpe", "grid"), default="tpe",
                   help="tpe: Optuna's TPE within --budget; grid: every point of a grid over the "
                   "space at sqrt(2) steps, once (the search's yardstick)")
    p.add_argument("--start-from-recommendation", action="store_true",
                   help="the search's first candidate is `recommend`'s lr factor and warmup at M, "
                   "from the study's latest run in the store (docs/solve.md)")
    p.add_argument("--json", action="store_true", help="print the answer as one JSON object")
    p.add_argument("--no-record", action="store_true", help="do not record the verified recipe "
                   "as a prediction in MLflow (predict --ledger scores it against later runs)")
    p.add_argument("--address", help="Ray cluster (auto, http://head:8265); default a local Ray")
    tracking_uri_arg(p)
    set_arg(p)
    verbose_arg(p)


def _range(flag: str, text: str | None) -> tuple[float, float] | None:
    if text is None:
        return None
    parts = text.split(",")
    try:
        low, high = (float(x) for x in parts)
    except ValueError:
        raise InputError("solve", [Problem(flag, text, "must be two numbers, LOW,HIGH")]) from None
    return low, high


def run(args: argparse.Namespace) -> int:
    from scalesweep.orchestrator.usecases.solve import solve
    from scalesweep.orchestrator.usecases.study import load_file

    uri = tracking_uri(args.tracking_uri)
    study = load_file(args.sweep, args.set)
    return show(lambda progress: solve(study, world_size=args.world_size, budget=args.budget,
                                       candidates=args.candidates, lr=_range("--lr", args.lr),
                                       warmup=_range("--warmup", args.warmup),
                                       search_seed=args.search_seed, address=args.address,
                                       tracking_uri=uri, verbose=args.verbose,
                                       record=not args.no_record, sampler=args.sampler,
                                       start_from_recommendation=args.start_from_recommendation,
                                       progress=progress), as_json=args.json)


def show(make: Callable[[Progress], Solved], *, as_json: bool) -> int:
    """Run a solve (or its resume) and print its answer, as one JSON object or in words; the
    exit code: 0 when a candidate was verified, else 1. `resume` of a solve prints through it."""
    from scalesweep.orchestrator.usecases.progress import console

    # under --json, stdout is the answer alone: the progress goes to stderr
    progress = console(out=sys.stderr) if as_json else console()
    with progress.capture():
        result = make(progress)
        if result.verification is not None:  # its tables, and the report with a solve section
            conclude(result.verification)
    if as_json:
        print(json.dumps(result.answer.json, indent=1))
    else:
        print(render(result.answer.json))
    return EXIT_OK if result.answer.decision is not None else EXIT_ERROR


_SAID = {"faster": "faster than the baseline per epoch",
         "equivalent": "as fast as the baseline per epoch, within the margin",
         "slower": "slower than the baseline per epoch",
         "not resolved": "not resolved against the baseline"}


def _selection(answer: dict[str, Any]) -> str:
    k = answer.get("best_of") or 1
    if k <= 1:
        return "the one candidate verified"
    return (f"the best of {k} candidates verified on the same seeds, each read at an error of "
            f"{1 - answer['selection_confidence']:.3g} (10 % / {k}) so that the pick's holds")


def _num(x: float | None) -> str:
    return "inf" if x is None else f"{x:.3g}"


def render(answer: dict[str, Any]) -> str:
    """The answer in words: the recipe, its decision and interval at every level."""
    m = answer["world_size"]
    searched = "the grid" if answer.get("sampler") == "grid" else "search"
    cost = (f"cost: {answer['trials_used']} trials, {answer['trial_epochs_used']:g} trial-epochs "
            f"({searched} {answer['search_trial_epochs_used']:g}; a grid of the same resolution "
            f"would take {answer['grid_trial_epochs']:g} for its one seed per point, none "
            "stopped early)")
    if answer["decision"] is None:
        return f"no candidate at {m} workers could be verified\n{cost}"
    ci = answer["ratio_ci"]
    shown = "no interval" if ci is None else (
        f"{ci[0]:.3g}..{'inf' if ci[1] is None else f'{ci[1]:.3g}'}")
    median = answer["ratio_median"]
    head = (f"at {m} workers: lr x{answer['lr_factor']:g} (lr {answer['lr']:.4g}, peak "
            f"{answer['peak_lr']:.4g}), warmup {answer['warmup_steps']} updates: "
            f"{_SAID[answer['decision']]}: paired epochs ratio "
            f"{'a bound' if median is None else f'estimate {median:.3g}'}, interval {shown} "
            f"(signed-rank interval over seeds; {_selection(answer)})")
    if answer["decision"] not in ("faster", "equivalent"):
        head = ("no recipe in this space was equivalent or faster; the best was:\n  " + head)
    lines = [head]
    for level in answer["ratio_by_target"]:
        lci = level["ratio_ci"]
        interval = "-" if lci is None else f"{_num(lci[0])}..{_num(lci[1])}"
        lines.append(f"  level {level['level']:g}: {level['decision']}, interval {interval}")
    for edge in answer.get("at_edge") or []:
        lines.append(f"note: {edge} of the space searched: the best may lie beyond it (widen "
                     f"--{edge.split()[0]})")
    recipe = answer["recipe"]
    lines.append(f"recipe ({recipe['format']}):")
    lines += [f"  {key}: {value}" for key, value in recipe["settings"].items()]
    lines.append(cost)
    return "\n".join(lines)
