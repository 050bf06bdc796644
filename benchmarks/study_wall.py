"""The WeNet study's wall time with fused virtual ranks and without: what issue #12's fusion buys
a user who runs ``scalesweep run sweeps/wenet_4v16.yaml``.

Each variant is the real CLI in a subprocess (embedded local Ray, MLflow on a fresh sqlite
store, the report at the end), on the shipped study with ``training.fuse`` set to ``auto`` (the
default) or ``off``; ``--seeds`` picks how many of its seeds (default 2: 8 trials a variant, so
both fit in one sitting; the full study's wall time is in docs/study.md). Variants alternate
(auto, off, auto, off, ...) with ``--repeats``; the ratio is taken per repeat. Besides the sweep's
wall clock, the trials' own training seconds (``train_seconds`` in the summary JSON, summed) show
how much of the gain reaches the loop and how much the fixed costs (Ray start, trial processes,
MLflow, the report) dilute it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._common import ROOT, Column, Report, Table, cli_env, median, parse_args, ratio, say, spread

NAME = "study_wall"
SWEEP = ROOT / "sweeps" / "wenet_4v16.yaml"


def run_study(fuse: str, seeds: int, quick: bool) -> dict[str, Any]:
    """One ``scalesweep run`` of the study in a fresh directory: wall seconds and trial seconds."""
    with tempfile.TemporaryDirectory(prefix=f"scalesweep-bench-{NAME}-") as tmp:
        # a fixed number of seeds (the study's own are adaptive: its wall time would depend on
        # how many rounds the decisions take)
        sets = [f"training.fuse={fuse}", "replicates=null", f"axes.seed={list(range(seeds))}"]
        if quick:  # seconds, not minutes: two updates of a small model on a small data set
            sets += ["training.epochs=0.25", "training.eval_every_epochs=0.125",
                     "axes.world_size=[4]",
                     "workload.options={train_size: 512, dev_size: 16, d_model: 32, num_blocks: 1}"]
        summary = Path(tmp) / "summary.json"
        cmd = [sys.executable, "-m", "scalesweep", "run", str(SWEEP), "--tracking-uri",
               f"sqlite:///{tmp}/mlflow.db", "--summary-json", str(summary)]
        if quick:  # the report is the CLI's, not this script's: tests/integration cover it
            cmd.append("--no-report")
        for s in sets:
            cmd += ["--set", s]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True,
                              env=cli_env(SCALESWEEP_STORAGE=f"{tmp}/runs"))
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        trials = json.loads(summary.read_text())
        return {"wall_s": wall, "trials": len(trials),
                "train_s": sum(float(t.get("train_seconds") or 0.0) for t in trials)}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__, argv, lambda p: p.add_argument("--seeds", type=int, default=2))
    seeds = 1 if args.quick else args.seeds
    repeats = args.repeats or 1
    report = Report(NAME, quick=args.quick, settings={"sweep": "sweeps/wenet_4v16.yaml",
                                                       "seeds": seeds, "repeats": repeats})
    runs: dict[str, list[dict[str, Any]]] = {"auto": [], "off": []}
    for r in range(repeats):
        for fuse in ("auto", "off"):
            say(f"repeat {r + 1}/{repeats}: fuse {fuse}")
            runs[fuse].append(run_study(fuse, seeds, args.quick))
    pairs = list(zip(runs["auto"], runs["off"], strict=True))
    walls = [ratio(off["wall_s"], auto["wall_s"]) for auto, off in pairs]
    trains = [ratio(off["train_s"], auto["train_s"]) for auto, off in pairs]
    table = Table(
        f"sweeps/wenet_4v16.yaml with {seeds} seed(s) ({runs['auto'][0]['trials']} trials), "
        f"{repeats} repeat(s), fuse auto against off",
        [Column("what", "what", "text"), Column("off", "fuse off", fmt=".0f"),
         Column("auto", "fuse auto", fmt=".0f"),
         Column("x", "off / auto"), Column("range", "off / auto range", "text")])
    for key, label, xs in (("wall_s", "sweep wall clock, s", walls),
                           ("train_s", "trials' training, s (summed)", trains)):
        table.rows.append({"what": label, "off": median([x[key] for x in runs["off"]]),
                           "auto": median([x[key] for x in runs["auto"]]),
                           "x": median(xs), "range": spread(xs)})
    report.tables.append(table)
    report.raw = runs
    report.notes.append("Both variants train the same updates (the fused gradient is the same sum, "
                        "tests/unit/test_fusion.py); only the passes differ.")
    report.finish(args.out)


if __name__ == "__main__":
    main()
