"""Simulate vs real DDP: the same mini_asr trial on both backends, at world sizes 4 and 16.

The trial is the one of ``sweeps/wenet_4v16.yaml`` (mini_asr, WeNet's conformer
recipe) at world size V, warmup fixed, lr rule none, capped at a fixed number of updates, run
through ``scalesweep run`` (``scalesweep.orchestrator.launch.run.run_sweep``) with ``backend`` set to
``simulate`` (one process plays all V ranks) or ``ddp`` (a TorchTrainer of V gloo workers). On a
2-core machine the 16 workers share 2 cores, so every worker gets ``cpus_per_worker = cores / V``.

Per run: the loop's own time per update (``train_seconds`` / updates, start-up excluded), the
trial's whole life (its MLflow child run is opened at Tune's on_trial_start and closed at
on_trial_complete) and the sweep's wall time. Variants are interleaved (sim V, ddp V, ...) and
repeated; each ratio is ddp / simulate of the same repeat, and the table shows their medians.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from benchmarks._common import (
    PHASES,
    SWEEPS,
    Column,
    Report,
    Table,
    median,
    parse_args,
    ratio,
    sandbox,
    say,
    spread,
    sqlite_uri,
    start_ray,
    sweep_run,
    trial_spans,
)

NAME = "backends"
SWEEP = SWEEPS / "wenet_4v16.yaml"


def overrides(world: int, backend: str, updates: int, cpus_per_worker: float, quick: bool) -> list[str]:
    o = [
        f"name=bench-backends-{backend}-ws{world}",
        f"axes.world_size=[{world}]",
        f"baseline.world_size={world}",  # the one trial is its own baseline: a target to resolve
        "axes.warmup_rule=[fixed]",
        "axes.scaling_rule=[none]",
        "replicates=null",  # one fixed seed, not the study's adaptive ones
        "axes.seed=[0]",
        "exclude=[]",
        f"backend={backend}",
        "physical_workers=auto",
        f"resources.cpus_per_worker={cpus_per_worker}",
        f"training.max_updates={updates}",
    ]
    if quick:
        o += ["workload.options={train_size: 256, dev_size: 16, d_model: 32, num_blocks: 1}"]
    return o


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(__doc__, argv)
    quick = args.quick
    import os

    cores = os.cpu_count() or 1
    sizes = [1] if quick else [4, 16]  # quick: one worker, the fewest processes
    updates = 2 if quick else 20
    repeats = args.repeats or (1 if quick else 2)
    cpw = cores / max(sizes)
    report = Report(
        NAME,
        quick,
        settings={
            "world_sizes": sizes,
            "updates": updates,
            "repeats": repeats,
            "cpus_per_worker": cpw,
            "sweep": str(SWEEP.relative_to(SWEEP.parents[1])),
        },
    )
    runs: list[dict[str, Any]] = []
    import ray

    with sandbox(NAME) as tmp:
        uri = sqlite_uri(tmp / "mlflow.db")
        start_ray()
        try:
            for rep in range(repeats):
                for world in sizes:
                    for backend in ("simulate", "ddp"):
                        say(f"{NAME}: repeat {rep + 1}/{repeats}, V={world}, {backend}")
                        wall, outcome, phases = sweep_run(
                            SWEEP, overrides(world, backend, updates, cpw, quick), uri, tmp / "sweeps.log"
                        )
                        (trial,) = outcome.trials
                        span = trial_spans(uri, outcome)[trial["name"]]
                        runs.append(
                            {
                                "rep": rep,
                                "world": world,
                                "backend": backend,
                                "physical_workers": trial["physical_workers"],
                                "updates": trial["total_updates"],
                                "sweep_s": wall,
                                "trial_s": span,
                                "loop_s": trial["train_seconds"],
                                "per_update_s": trial["train_seconds"] / trial["total_updates"],
                                "startup_s": span - trial["train_seconds"],
                                **phases,
                            }
                        )
                        say(f"  sweep {wall:.1f} s, trial {span:.1f} s, loop {trial['train_seconds']:.2f} s")
        finally:
            ray.shutdown()

    table = Table(
        f"mini_asr (wenet_4v16 trial), {updates} updates, median of {repeats} interleaved repeats",
        [
            Column("world", "V", "text"),
            Column("backend", "backend", "text"),
            Column("p", "P", "text"),
            Column("per_update_s", "loop s/update"),
            Column("loop_s", "loop s"),
            Column("trial_s", "trial wall s (Tune start-finish)"),
            Column("startup_s", "trial wall - loop s"),
            Column("sweep_s", "sweep wall s"),
            Column("trial_range", "trial wall range", "text"),
        ],
    )
    ratios = Table(
        "ddp / simulate (ratio per repeat, median): how much faster simulate is",
        [
            Column("world", "V", "text"),
            Column("loop", "loop time per update"),
            Column("trial", "trial wall time"),
            Column("startup", "trial wall - loop"),
            Column("sweep", "sweep wall time"),
        ],
    )
    for world in sizes:
        for backend in ("simulate", "ddp"):
            rs = [r for r in runs if r["world"] == world and r["backend"] == backend]
            table.rows.append(
                {
                    "world": world,
                    "backend": backend,
                    "p": rs[0]["physical_workers"],
                    **{
                        k: median([r[k] for r in rs])
                        for k in ("per_update_s", "loop_s", "trial_s", "startup_s", "sweep_s")
                    },
                    "trial_range": spread([r["trial_s"] for r in rs]),
                }
            )
        pairs = [
            (s, d)
            for s in runs
            for d in runs
            if s["world"] == d["world"] == world
            and s["rep"] == d["rep"]
            and s["backend"] == "simulate"
            and d["backend"] == "ddp"
        ]
        keys = {"loop": "per_update_s", "trial": "trial_s", "startup": "startup_s", "sweep": "sweep_s"}
        row: dict[str, Any] = {"world": world}
        for label, key in keys.items():
            row[label] = median([ratio(d[key], s[key]) for s, d in pairs])
        ratios.rows.append(row)
    where = Table(
        f"Where each sweep's wall time goes (s, median of {repeats})",
        [
            Column("world", "V", "text"),
            Column("backend", "backend", "text"),
            *[Column(p, p.replace("_", " "), "number") for p in PHASES],
            Column("sweep_s", "wall"),
        ],
    )
    for world in sizes:
        for backend in ("simulate", "ddp"):
            rs = [r for r in runs if r["world"] == world and r["backend"] == backend]
            where.rows.append(
                {
                    "world": world,
                    "backend": backend,
                    "sweep_s": median([r["sweep_s"] for r in rs]),
                    **{p: median([r[p] for r in rs]) for p in PHASES},
                }
            )
    report.tables += [table, ratios, where]
    report.raw = {"runs": runs}
    big = ratios.rows[-1]
    report.target(f"simulate speed-up over ddp, trial wall time, V={max(sizes)}", big["trial"], ">=", 10)
    report.notes.append(
        f"ddp workers get cpus_per_worker = {cores}/{max(sizes)} = {cpw:g} so that a {max(sizes)}-worker "
        f"group fits {cores} cores; simulate trials reserve the same. Ray starts each process with "
        "OMP_NUM_THREADS=1, so both backends compute on one thread per process."
    )
    report.finish(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
