"""Loop efficiency: our training loop against a bare PyTorch loop, same model, batches, optimizer.

Ours is ``scalesweep.trainables.loop.train`` with the simulate ``LocalWorld``: virtual-rank sharding
(DistributedSampler per rank and epoch), per-micro-batch reseeding, the lr schedule set per
update, loss weighting, metrics, dev evaluations, checkpoints (the planner's default: at the
first eval 60 s or more after the last checkpoint, and at the end) and reports (to a no-op here:
what Tune does with them is Tune's cost). The bare loop feeds the very same micro-batches
(indices taken from our sharding beforehand, collated inside the timed loop by the same
workload) through the same model and optimizer, and evaluates the dev set at the same updates
with the same code path a user would write: no sharding, seeding, schedule, metrics, checkpoints
or reports.

Both run in this process with ``torch.set_num_threads(1)``, interleaved (ours, bare, ours, ...)
and repeated; updates/s = updates / loop seconds over the loop's own span (ours: from the clock
readings that make ``train_seconds``; bare: the same span; model construction excluded on both
sides). Seconds are CPU seconds of this process (``time.process_time``: one thread, so they are
what the loop costs, and other jobs on a shared machine barely move them); wall-clock ratios
are shown beside them. Three cadences per workload: the planner's default (eval every 0.5
epoch, checkpoint every 60 s of wall time, which in these short loops is once, at the end), eval
and checkpoint every 0.5 epoch (the default until the wall-time cadence), and both only at the
end. Besides ours and bare, a diagnostic variant of ours switches off the gradient noise-scale
probe that the loop runs at every update for V > 1 (by patching the trial after construction),
to attribute its cost.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from benchmarks._common import Column, Report, Table, median, parse_args, ratio, say, spread
from scalesweep.science.batching import updates_per_epoch
from scalesweep.trainables import loop
from scalesweep.trainables import workloads as registry
from scalesweep.trainables.config import TrialConfig
from scalesweep.trainables.loop import EVAL_BATCH, build_optimizer
from scalesweep.trainables.sharding import Sharding
from scalesweep.trainables.world import LocalWorld

NAME = "loop_efficiency"


@dataclass(frozen=True)
class Case:
    label: str
    config: TrialConfig


def make_case(
    workload: str, options: dict[str, Any], world: int, epochs: float, cadence: str, optimizer: dict[str, Any]
) -> Case:
    w = registry.make(workload, options)
    upe = updates_per_epoch(w.train_size(), world, 16, 1)
    total = max(1, round(epochs * upe))
    every = total if cadence == "end" else max(1, round(upe * 0.5))
    cfg = TrialConfig(
        name=f"{workload}-{cadence}",
        workload=workload,
        workload_options=options,
        world_size=world,
        physical_workers=1,
        per_worker_batch=16,
        optimizer=optimizer,
        scheduler={"type": "constant"},
        total_updates=total,
        eval_every=every,
        checkpoint_every=every if cadence == "every_eval" else 0,
        # the planner's default: a checkpoint at the first eval 60 s after the last one (these
        # loops are shorter, so that is the one at the end) -- a cadence, not a count
        checkpoint_every_s=60.0 if cadence == "default" else None,
    )
    what = {
        "default": "eval every 0.5 epoch, checkpoint every 60 s (default)",
        "every_eval": "eval + checkpoint every 0.5 epoch (the default before 60 s)",
        "end": "eval + checkpoint at the end only",
    }[cadence]
    return Case(f"{workload} V={world}, {total} updates, {what}", cfg)


class _Clock:
    """Stands in for the loop's ``time`` module: the same wall clock, and the CPU time at each
    reading, so the loop's first and last readings bracket its own span in CPU seconds too."""

    def __init__(self) -> None:
        self.cpu: list[float] = []

    def perf_counter(self) -> float:
        self.cpu.append(time.process_time())
        return time.perf_counter()


def ours(cfg: TrialConfig, probe: bool = True) -> tuple[float, float]:
    """(CPU s, wall s) of our loop's own span."""
    clock, saved_time, saved_init = _Clock(), loop.time, loop._Trial.__init__
    loop.time = clock  # type: ignore[assignment]
    if not probe:

        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            saved_init(self, *args, **kwargs)
            self.noise = None

        loop._Trial.__init__ = init  # type: ignore[method-assign]
    try:
        result = loop.train(cfg, LocalWorld(), on_report=lambda metrics, checkpoint: None)
    finally:
        loop.time = saved_time
        loop._Trial.__init__ = saved_init  # type: ignore[method-assign]
    return clock.cpu[-1] - clock.cpu[0], float(result["train_seconds"])


def ours_no_probe(cfg: TrialConfig) -> tuple[float, float]:
    return ours(cfg, probe=False)


def bare(cfg: TrialConfig) -> tuple[float, float]:
    """The plain PyTorch loop a user would write for the same updates and evaluations."""
    w = registry.make(cfg.workload, cfg.workload_options)
    sharding = Sharding(w.train_size(), cfg.world_size, cfg.per_worker_batch, cfg.accum_grad, cfg.seed)
    plan = [
        [idx for v in range(cfg.world_size) for idx in sharding.micro_batches(u, v)]
        for u in range(1, cfg.total_updates + 1)
    ]
    torch.manual_seed(cfg.seed)
    model = w.build_model()
    opt = build_optimizer(model.parameters(), cfg.optimizer)
    weight = 1.0 / cfg.global_batch
    model.train()
    c0, t0 = time.process_time(), time.perf_counter()
    for u, micro_batches in enumerate(plan, start=1):
        opt.zero_grad(set_to_none=True)
        for indices in micro_batches:
            (w.loss(model, w.train_batch(indices)).sum() * weight).backward()
        opt.step()
        if u % cfg.eval_every == 0 or u == cfg.total_updates:
            model.eval()
            with torch.no_grad():
                for batch in w.dev_batches(EVAL_BATCH):
                    w.evaluate(model, batch)
            model.train()
    return time.process_time() - c0, time.perf_counter() - t0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(__doc__, argv)
    quick = args.quick
    torch.set_num_threads(1)
    repeats = args.repeats or (1 if quick else 5)
    adam = {"type": "adam", "lr": 1e-3}
    if quick:
        specs = [
            ("mlp_regression", {"train_size": 256, "dev_size": 64}, 4, 2.0),
            ("mini_asr", {"train_size": 128, "dev_size": 16, "d_model": 32, "num_blocks": 1}, 2, 1.0),
        ]
    else:
        specs = [("mlp_regression", {}, 4, 10.0), ("mini_asr", {"train_size": 1024}, 4, 4.0)]
    cases = [
        make_case(wl, opts, world, epochs, cadence, adam)
        for wl, opts, world, epochs in specs
        for cadence in ("default", "every_eval", "end")
    ]
    report = Report(
        NAME,
        quick,
        settings={
            "repeats": repeats,
            "threads": 1,
            "optimizer": adam,
            "cases": [c.config.model_dump(mode="json") for c in cases],
        },
    )
    probe_patchable = hasattr(loop, "_Trial") and hasattr(loop, "time")
    variants: list[tuple[str, Callable[[TrialConfig], tuple[float, float]]]] = [
        ("ours", ours),
        ("bare", bare),
    ]
    if probe_patchable:
        variants.append(("no_probe", ours_no_probe))
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for case in cases if not quick else ():  # warm-up: imports, allocator, first-call costs
        for _, fn in variants:
            fn(case.config)
    for rep in range(repeats):
        say(f"{NAME}: repeat {rep + 1}/{repeats}")
        for case in cases:
            order = variants[rep % len(variants) :] + variants[: rep % len(variants)]
            for kind, fn in order:
                times.setdefault((case.label, kind), []).append(fn(case.config))
    table = Table(
        f"Updates per second, median of {repeats} interleaved repeats, 1 thread, CPU time",
        [
            Column("case", "case", "text"),
            Column("ours", "ours upd/s"),
            Column("bare", "bare upd/s"),
            Column("x", "ours / bare"),
            Column("range", "ours / bare range", "text"),
            Column("x_wall", "ours / bare, wall clock"),
            Column("over_ms", "our overhead ms/update", "number"),
            Column("probe_ms", "of which noise-scale probe ms/update", "number"),
            Column("x_no_probe", "ours without probe / bare"),
        ],
    )
    for case in cases:
        n = case.config.total_updates
        o, b = times[(case.label, "ours")], times[(case.label, "bare")]
        speed = [ratio(bt[0], ot[0]) for ot, bt in zip(o, b, strict=True)]  # speed ratio = inverse time ratio
        speed_wall = [ratio(bt[1], ot[1]) for ot, bt in zip(o, b, strict=True)]
        row: dict[str, Any] = {
            "case": case.label,
            "ours": n / median([t[0] for t in o]),
            "bare": n / median([t[0] for t in b]),
            "x": median(speed),
            "range": spread(speed),
            "x_wall": median(speed_wall),
            "over_ms": 1000 * median([ot[0] - bt[0] for ot, bt in zip(o, b, strict=True)]) / n,
        }
        np_ = times.get((case.label, "no_probe"))
        if np_ and case.config.world_size > 1:
            row["probe_ms"] = 1000 * median([ot[0] - pt[0] for ot, pt in zip(o, np_, strict=True)]) / n
            row["x_no_probe"] = median([ratio(bt[0], pt[0]) for pt, bt in zip(np_, b, strict=True)])
        table.rows.append(row)
        report.target(f"ours / bare (CPU time), {case.label}", median(speed), ">=", 0.9)
        report.target(f"ours / bare (wall clock), {case.label}", median(speed_wall), ">=", 0.9)
    report.tables.append(table)
    report.raw = {
        f"{label} | {kind}": [{"cpu_s": c, "wall_s": w} for c, w in ts] for (label, kind), ts in times.items()
    }
    report.finish(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
