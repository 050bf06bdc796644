"""Adaptive seeds against a fixed number of seeds, on the shipped study: the trials,
trial-epochs and wall time the adaptive design needs to reach the decisions of a fixed
10-seed run (docs/design.md §4, "Adaptive seeds").

1. The study runs once with every arm at seeds 0 .. N-1 (``--seeds``, default 10): the fixed
   design, read at the nominal confidence.
2. The adaptive design (``replicates: {min, max: N, step}``) is replayed on those trials: a seed
   fixes a trial's init and data order, so the adaptive sweep's trials are the fixed run's
   trials of the same seeds, and which of them it runs, round after round, follows from their
   curves by the driver's own code (``scalesweep.orchestrator.plan.adaptive`` and the arm
   summaries, each round seeing only the trials run so far, its target included).
3. With ``--run-adaptive`` (the default) the adaptive sweep also runs for real, for its wall
   clock, and its trials and decisions are checked against the replay.

Costs: trials; trial-epochs (each trial's last logged epoch, summed); trial seconds (each
trial's MLflow run, start to end, summed: what the trials hold of the machine); the sweep's wall
clock. Ratios are adaptive / fixed, from one run of this script.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from benchmarks._common import (
    ROOT,
    Column,
    Report,
    Table,
    parse_args,
    ratio,
    sandbox,
    say,
    sqlite_uri,
    start_ray,
    sweep_run,
    trial_spans,
    write_yaml,
)
from scalesweep.orchestrator.spec.files import load_mapping

NAME = "adaptive_cost"
SWEEP = ROOT / "sweeps" / "wenet_4v16.yaml"
QUICK_SWEEP = ROOT / "sweeps" / "smoke.yaml"


def variant(source: Path, out: Path, name: str, seeds: int | None = None,
            replicates: dict[str, int] | None = None, extra: dict[str, Any] | None = None) -> Path:
    """The study's sweep file with fixed seeds 0 .. seeds-1 or with adaptive ``replicates``
    (never both), under its own experiment name; the recipe made absolute."""
    from scalesweep.orchestrator.spec.load import recipe_candidates

    data = load_mapping(source)
    data["name"] = name
    data.pop("replicates", None)
    data.setdefault("axes", {}).pop("seed", None)
    if seeds is not None:
        data["axes"]["seed"] = list(range(seeds))
    if replicates is not None:
        data["replicates"] = replicates
    if data.get("recipe"):
        found = next(p for p in recipe_candidates(data["recipe"], source) if p.exists())
        data["recipe"] = str(found.resolve())
    for key, value in (extra or {}).items():
        node = data
        *path, last = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return write_yaml(out / f"{name}.yaml", data)


def trial_data(uri: str, outcome: Any) -> dict[str, dict[str, Any]]:
    """Trial name -> its curve (the evals as the driver keeps them), epochs trained, seconds."""
    from mlflow.tracking import MlflowClient

    from scalesweep.orchestrator.tracking.sweep_runs import history

    reader = SimpleNamespace(client=MlflowClient(uri))
    spans = trial_spans(uri, outcome)
    out = {}
    for t in outcome.trials:
        curve = history(reader, t["mlflow_run_id"])  # type: ignore[arg-type]
        out[t["name"]] = {"curve": curve, "epochs": max((e["epoch"] for e in curve), default=0.0),
                          "seconds": spans[t["name"]]}
    return out


def decisions(plan: Any, curves: dict[str, list[dict[str, Any]]], rows: list[Any]) -> dict[str, str]:
    from scalesweep.orchestrator.tracking.summary import arm_summaries

    seen = {r.name for r in rows}
    run = {n: c for n, c in curves.items() if n in seen}  # a round sees only what has run
    return {a.arm: a.answer for a in arm_summaries(plan, run, rows)}


def replay(plan: Any, trials: dict[str, dict[str, Any]]) -> tuple[list[Any], int, dict[str, str]]:
    """The adaptive design on the fixed run's trials: the trials it runs, its rounds, and its
    decisions, each round deciding from the trials run so far (as Rounds does)."""
    from scalesweep.orchestrator.plan import adaptive

    curves = {n: t["curve"] for n, t in trials.items()}
    in_play = adaptive.first_round(plan)
    rounds = 1
    while True:
        missing = [r.name for r in in_play if r.name not in trials]
        if missing:
            raise SystemExit(f"the fixed run has no trial {missing[0]}: run it with --seeds >= max")
        more = adaptive.next_round(plan, in_play, decisions(plan, curves, in_play))
        if not more:
            return in_play, rounds, decisions(plan, curves, in_play)
        in_play = [*in_play, *more]
        rounds += 1


def cost(names: list[str], trials: dict[str, dict[str, Any]]) -> dict[str, float]:
    return {"trials": len(names), "epochs": sum(trials[n]["epochs"] for n in names),
            "seconds": sum(trials[n]["seconds"] for n in names)}


def measure(source: Path, seeds: int, rep: dict[str, int], extra: dict[str, Any],
            run_adaptive: bool) -> dict[str, Any]:
    """Both designs on one local Ray and one MLflow store, in a sandbox."""
    from scalesweep.orchestrator.plan.rows import make_plan
    from scalesweep.orchestrator.spec.load import load_sweep

    with sandbox(NAME) as tmp:
        uri = sqlite_uri(tmp / "mlflow.db")
        start_ray()
        fixed_file = variant(source, tmp, f"{NAME}-fixed", seeds=seeds, extra=extra)
        adaptive_file = variant(source, tmp, f"{NAME}-adaptive", replicates=rep, extra=extra)
        say(f"fixed design: every arm at seeds 0..{seeds - 1}")
        fixed_wall, fixed_out, _ = sweep_run(fixed_file, [], uri, tmp / "fixed.log")
        trials = trial_data(uri, fixed_out)
        fixed_plan = make_plan(load_sweep(fixed_file))
        curves = {n: t["curve"] for n, t in trials.items()}
        # the adaptive plan's trial names are the fixed plan's (same arms, same seeds)
        chosen, rounds, adaptive_decisions = replay(make_plan(load_sweep(adaptive_file)), trials)
        real: dict[str, Any] = {}
        if run_adaptive:
            say(f"adaptive design, for real: replicates {rep}")
            wall, outcome, _ = sweep_run(adaptive_file, [], uri, tmp / "adaptive.log")
            real = {"wall_s": wall, "trials": sorted(t["name"] for t in outcome.trials),
                    "decisions": {a.arm: a.answer for a in outcome.arms}}
    return {"trials": trials, "fixed_wall": fixed_wall, "chosen": chosen, "rounds": rounds,
            "fixed_decisions": decisions(fixed_plan, curves, list(fixed_plan.rows)),
            "adaptive_decisions": adaptive_decisions, "real": real}


def cost_table(m: dict[str, Any], title: str) -> Table:
    trials = m["trials"]
    fixed, adaptive = cost(list(trials), trials), cost([r.name for r in m["chosen"]], trials)
    table = Table(title, [Column("what", "what", "text"), Column("fixed", "fixed", fmt=".1f"),
                          Column("adaptive", "adaptive", fmt=".1f"),
                          Column("x", "adaptive / fixed", fmt=".2f")])
    for key, label in (("trials", "trials"), ("epochs", "trial-epochs"),
                       ("seconds", "trial seconds (summed)")):
        table.rows.append({"what": label, "fixed": fixed[key], "adaptive": adaptive[key],
                           "x": ratio(adaptive[key], fixed[key])})
    if m["real"]:
        table.rows.append({"what": "sweep wall clock, s (adaptive: run for real)",
                           "fixed": m["fixed_wall"], "adaptive": m["real"]["wall_s"],
                           "x": ratio(m["real"]["wall_s"], m["fixed_wall"])})
    return table


def decisions_table(m: dict[str, Any], seeds: int) -> Table:
    used: dict[str, int] = {}
    for r in m["chosen"]:
        used[r.arm] = used.get(r.arm, 0) + 1
    table = Table("decisions per arm against its baseline arm",
                  [Column("arm", "arm", "text"), Column("fixed", f"fixed {seeds} seeds", "text"),
                   Column("adaptive", "adaptive (replay)", "text"),
                   Column("seeds", "adaptive seeds", fmt=".0f"), Column("real", "adaptive (run)", "text")])
    for arm in sorted(m["fixed_decisions"]):
        table.rows.append({"arm": arm, "fixed": m["fixed_decisions"][arm],
                           "adaptive": m["adaptive_decisions"].get(arm, "-"), "seeds": used.get(arm, 0),
                           "real": m["real"].get("decisions", {}).get(arm, "-")})
    return table


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seeds", type=int, default=10, help="the fixed design's seeds, and the adaptive max")
    p.add_argument("--min", type=int, default=5, dest="min_seeds", help="the adaptive design's min")
    p.add_argument("--step", type=int, default=1, help="the adaptive design's step")
    p.add_argument("--no-run-adaptive", action="store_true", help="replay only: no adaptive run")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__, argv, _options)
    # quick: the harness only, seconds not minutes (smoke.yaml cut to its baseline arm and one
    # other, 3 seeds, half an epoch), and the replay alone: no adaptive sweep for real (its
    # tables fill without it; tests/integration/test_adaptive_e2e.py runs adaptive sweeps)
    source, seeds, min_seeds = (QUICK_SWEEP, 3, 2) if args.quick else (SWEEP, args.seeds, args.min_seeds)
    extra: dict[str, Any] = {"training.epochs": 0.5, "training.eval_every_epochs": 0.25,
                             "axes.scaling_rule": ["none"]} if args.quick else {}
    rep = {"min": min_seeds, "max": seeds, "step": args.step}
    report = Report(NAME, quick=args.quick, settings={"sweep": str(source.relative_to(ROOT)),
                                                       "fixed_seeds": seeds, "replicates": rep})
    m = measure(source, seeds, rep, extra, not (args.no_run_adaptive or args.quick))
    report.tables.append(cost_table(m, f"{source.relative_to(ROOT)}: fixed {seeds} seeds against "
                                       f"adaptive replicates {rep} ({m['rounds']} rounds), replayed on "
                                       "the fixed run's trials"))
    report.tables.append(decisions_table(m, seeds))
    epochs = report.tables[0].rows[1]["x"]
    report.target("trial-epochs, adaptive / fixed", epochs, "<=", 0.60)
    chosen = sorted(r.name for r in m["chosen"])
    if m["real"] and m["real"]["trials"] != chosen:
        report.notes.append("the real adaptive run ran other trials than the replay: "
                            f"{sorted(set(m['real']['trials']) ^ set(chosen))}")
    report.raw = {"fixed": {n: {k: v for k, v in t.items() if k != "curve"} for n, t in m["trials"].items()},
                  "chosen": chosen, "real": m["real"]}
    report.finish(args.out)


if __name__ == "__main__":
    main()
