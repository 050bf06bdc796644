"""`scalesweep solve`'s search against a grid over the same space at the same resolution: the
trial-epochs each spends, and whether the grid reaches the search's answer (docs/solve.md, "The
search against a grid").

Both run through the CLI, one after the other, on the same sweep, world size, space, baseline
seeds and search seed, each its own solve (baseline seeds, candidates, verification):

1. ``scalesweep solve SWEEP --world-size M --json``: Optuna's TPE within the default budget;
2. ``scalesweep solve SWEEP --world-size M --sampler grid --json``: every point of the grid at
   √2 steps per dimension (the resolution the search's answer is judged at), once, in an order
   shuffled by the search seed, with the same early stop (a candidate stops at the target, or
   once it cannot make the verification).

Costs: the search's trial-epochs (each candidate's last eval's epoch, summed, as `solve` counts
its budget) and the grid's, with the grid's full cost (no candidate stopped early) beside them;
trials and wall clock of each solve. The same answer: the grid's verified recipe within one
grid step of the search's on both dimensions, and their ratio intervals overlapping.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._common import (
    ROOT,
    Column,
    Report,
    Table,
    cli_env,
    parse_args,
    ratio,
    sandbox,
    say,
    sqlite_uri,
    write_yaml,
)
from scalesweep.orchestrator.spec.files import load_mapping
from scalesweep.science.solve import GRID_STEP

NAME = "solve_grid"
SWEEP, WORLD_SIZE = ROOT / "sweeps" / "wenet_4v16.yaml", 16
#: quick: the smoke study at 4 workers, its space narrowed to a 2 x 3 grid, one candidate
#: verified with 2 seeds (its seed axis dropped for adaptive replicates)
QUICK_SWEEP, QUICK_WORLD_SIZE = ROOT / "sweeps" / "smoke.yaml", 4
QUICK_ARGS = ["--lr", "2,2.828", "--warmup", "5,10", "--candidates", "1"]
QUICK_REPLICATES = {"min": 2, "max": 2}
QUICK_BUDGET = ["--budget", "54"]  # TPE: 3 baseline seeds (18), 2 candidates (12), the verification (24)


def solve(sweep: Path, world_size: int, extra: list[str], uri: str,
          log: Path) -> tuple[dict[str, Any], float]:
    """One ``scalesweep solve --json``: its answer and its wall seconds (its progress to ``log``)."""
    argv = [sys.executable, "-m", "scalesweep", "solve", str(sweep), "--world-size", str(world_size),
            "--json", "--no-record", "--tracking-uri", uri, *extra]
    t0 = time.perf_counter()
    with log.open("w") as err:
        proc = subprocess.run(argv, env=cli_env(PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE,
                              stderr=err, text=True, timeout=3 * 3600)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):  # 1: nothing could be verified, still an answer
        raise SystemExit(f"solve failed ({proc.returncode}): {log.read_text()[-3000:]}")
    return json.loads(proc.stdout), wall


def candidates(runs: Path, parent: str | None) -> list[dict[str, Any]]:
    """The candidates a solve ran, from its journal: name, lr factor, warmup, epochs trained."""
    from scalesweep.orchestrator.launch.solve_state import read_journal, trial_epochs

    out: list[dict[str, Any]] = []
    if parent is None:  # nothing verified: no search to tell apart from the other solve's
        return out
    for state in runs.glob("*-solve-*/solve.json"):
        if json.loads(state.read_text()).get("parent_run_id") != parent:
            continue
        for f in read_journal(state.parent):
            if f.point is not None:
                out.append({"name": f.name, "lr_factor": f.point[0], "warmup": f.point[1],
                            "epochs": trial_epochs(f.evals), "status": f.status})
    return out


def search_parent(uri: str, verification: str | None) -> str | None:
    """The search's parent run id, from its verification's tag."""
    if verification is None:
        return None
    from mlflow.tracking import MlflowClient

    from scalesweep.mlflow_names import SOLVE_SEARCH_TAG

    return MlflowClient(uri).get_run(verification).data.tags.get(SOLVE_SEARCH_TAG)


def within_a_step(a: dict[str, Any], b: dict[str, Any]) -> bool | None:
    """Whether two answers' (lr factor, warmup) lie within one grid step of each other on both."""
    if a.get("lr_factor") is None or b.get("lr_factor") is None:
        return None
    tol = math.log(GRID_STEP) + 1e-9
    return (abs(math.log(a["lr_factor"] / b["lr_factor"])) <= tol
            and abs(math.log(a["warmup_steps"] / b["warmup_steps"])) <= tol)


def overlap(a: dict[str, Any], b: dict[str, Any]) -> bool | None:
    if not a.get("ratio_ci") or not b.get("ratio_ci"):
        return None
    (alo, ahi), (blo, bhi) = a["ratio_ci"], b["ratio_ci"]
    return max(alo, blo) <= min(math.inf if ahi is None else ahi, math.inf if bhi is None else bhi)


def row(sampler: str, answer: dict[str, Any], wall: float, ran: list[dict[str, Any]]) -> dict[str, Any]:
    ci = answer.get("ratio_ci") or [None, None]
    return {"sampler": sampler, "candidates": len(ran), "trial_epochs": answer["search_trial_epochs_used"],
            "full_grid": answer["grid_trial_epochs"],
            "share": answer["search_trial_epochs_used"] / answer["grid_trial_epochs"],
            "lr_factor": answer.get("lr_factor"), "warmup": answer.get("warmup_steps"),
            "decision": answer.get("decision") or "none verified", "lo": ci[0], "hi": ci[1],
            "trials": answer["trials_used"], "wall_s": wall}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__, argv)
    sweep, m = (QUICK_SWEEP, QUICK_WORLD_SIZE) if args.quick else (SWEEP, WORLD_SIZE)
    extra = QUICK_ARGS if args.quick else []
    report = Report(NAME, quick=args.quick)
    report.settings = {"sweep": str(sweep.relative_to(ROOT)), "world_size": m, "args": extra,
                       "search_seed": 0, "replicates": QUICK_REPLICATES if args.quick else None}
    with sandbox(NAME) as tmp:
        uri = sqlite_uri(tmp / "mlflow.db")
        if args.quick:
            data = load_mapping(sweep)
            data["axes"].pop("seed", None)
            sweep = write_yaml(tmp / sweep.name, {**data, "replicates": QUICK_REPLICATES})
        results: dict[str, tuple[dict[str, Any], float, list[dict[str, Any]]]] = {}
        for sampler, more in (("tpe", QUICK_BUDGET if args.quick else []), ("grid", ["--sampler", "grid"])):
            say(f"solve {sweep.name} at {m} workers, sampler {sampler}")
            answer, wall = solve(sweep, m, [*extra, *more], uri, tmp / f"{sampler}.log")
            ran = candidates(tmp / "runs", search_parent(uri, answer.get("verification_parent_run_id")))
            results[sampler] = (answer, wall, ran)
            say(f"{sampler}: {len(ran)} candidates, {answer['search_trial_epochs_used']:g} trial-epochs, "
                f"answer lr x{answer.get('lr_factor')} warmup {answer.get('warmup_steps')} "
                f"({answer.get('decision')}) in {wall:.0f} s")
    (tpe, tpe_wall, tpe_ran), (grid, grid_wall, grid_ran) = results["tpe"], results["grid"]
    title = "The search against the grid: same sweep, space, baseline seeds and search seed"
    report.tables.append(Table(title, [
        Column("sampler", "sampler", "text"), Column("candidates", "candidates run", "number", "d"),
        Column("trial_epochs", "trial-epochs searched", "positive", ".1f"),
        Column("full_grid", "a full grid (none stopped early)", "positive", ".0f"),
        Column("share", "share of the full grid", "positive", ".2f"),
        Column("lr_factor", "answer: lr factor", "number", ".3g"),
        Column("warmup", "answer: warmup", "number", "d"), Column("decision", "decision", "text"),
        Column("lo", "ratio interval lo", "number", ".3g"), Column("hi", "hi", "number", ".3g"),
        Column("trials", "trials in all", "number", "d"), Column("wall_s", "wall s", "positive", ".0f")],
        [row("tpe (Optuna TPE)", tpe, tpe_wall, tpe_ran), row("grid", grid, grid_wall, grid_ran)]))
    same_point, same_ci = within_a_step(tpe, grid), overlap(tpe, grid)
    spent = ratio(tpe["search_trial_epochs_used"], grid["search_trial_epochs_used"])
    report.tables.append(Table("Does the grid reach the search's answer?", [
        Column("what", "", "text"), Column("value", "", "text")], [
        {"what": "grid's answer within one grid step (sqrt 2) of the search's, lr factor and warmup",
         "value": str(same_point)},
        {"what": "their ratio intervals overlap", "value": str(same_ci)},
        {"what": "same decision", "value": str(tpe.get("decision") == grid.get("decision"))},
        {"what": "trial-epochs searched, search / grid", "value": f"{spent:.2f}"}]))
    report.target("trial-epochs searched, search / grid (same early stop)", spent, "<=", 1.0)
    report.raw = {"tpe": {"answer": tpe, "wall_s": tpe_wall, "candidates": tpe_ran},
                  "grid": {"answer": grid, "wall_s": grid_wall, "candidates": grid_ran},
                  "same_point": same_point, "intervals_overlap": same_ci}
    report.notes.append("Each solve is one run: which candidates TPE draws depends on the order results "
                        "come back in (two at a time), and each candidate is one seed, so the best "
                        "points of a flat region can trade places between runs; the verification's "
                        "decision is what carries over.")
    report.finish(args.out)


if __name__ == "__main__":
    main()
