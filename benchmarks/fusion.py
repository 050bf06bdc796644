"""Fused virtual ranks: updates per second of the loop, fused against one pass per micro-batch.

1. The loop (``scalesweep.trainables.loop.train``, simulate ``LocalWorld``) on mini_asr at V = 4 and 16,
   ``per_worker_batch`` 16 (the WeNet study's), one eval at the end, with ``fuse: auto`` (the
   default: fused passes grouped by length, the noise scale measured per virtual rank at every
   4th update) and ``fuse: off``; plus a diagnostic variant, fused with the noise-scale probe
   switched off (by patching the trial after construction, as loop_efficiency does), to
   attribute what the every-4th-update measurement costs. Seconds: CPU seconds of the loop's
   own span (``time.process_time``, one thread), wall clock beside them.
2. Passes of one V = 16 update (256 samples): the same samples cut into passes of at most 16,
   32, 64, 128 and 256 samples, in the sharding's order and grouped by length: why the CPU
   budget is 64 samples a pass.
3. Threads: the fused V = 16 loop at 1 and 2 intra-op threads (wall clock: a second thread
   spends CPU seconds to save wall seconds), for a sweep that runs fewer trials than cores.

Variants are interleaved (A, B, C, A, B, C, ...) and repeated; ratios are taken per repeat and
the median shown with the range of the repeats.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from benchmarks._common import Column, Report, Table, median, parse_args, ratio, say, spread
from scalesweep.science.batching import updates_per_epoch
from scalesweep.trainables import fusion, loop
from scalesweep.trainables import workloads as registry
from scalesweep.trainables.config import TrialConfig
from scalesweep.trainables.sharding import Sharding
from scalesweep.trainables.world import LocalWorld

NAME = "fusion"
Timing = tuple[float, float]  # (CPU s, wall s)


class _Clock:
    """Stands in for the loop's ``time`` module: the same wall clock, and the CPU time at each
    reading, so the loop's first and last readings bracket its own span in CPU seconds too."""

    def __init__(self) -> None:
        self.cpu: list[float] = []

    def perf_counter(self) -> float:
        self.cpu.append(time.process_time())
        return time.perf_counter()


def run_loop(cfg: TrialConfig, probe: bool = True) -> Timing:
    """(CPU s, wall s) of the loop's own span (model construction and data excluded)."""
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


def loop_config(options: dict[str, Any], world: int, batch: int, updates: int, fuse: str) -> TrialConfig:
    return TrialConfig(
        name=f"mini_asr-v{world}-{fuse}",
        workload="mini_asr",
        workload_options=options,
        world_size=world,
        physical_workers=1,
        per_worker_batch=batch,
        optimizer={"type": "adam", "lr": 2e-3},
        scheduler={"type": "warmuplr", "warmup_steps": 300},
        total_updates=updates,
        eval_every=updates,  # one eval, at the end: the same for every variant
        fuse=fuse,  # type: ignore[arg-type]
    )


def _raw(times: dict[str, list[Timing]]) -> dict[str, list[dict[str, float]]]:
    return {k: [{"cpu_s": c, "wall_s": w} for c, w in v] for k, v in times.items()}


def interleave(
    variants: Sequence[tuple[str, Callable[[], Timing]]], repeats: int, warm_up: bool = True
) -> dict[str, list[Timing]]:
    # warm-up: allocator, first-call costs, lazily made data (quick: none, nothing is measured)
    for _, fn in variants if warm_up else ():
        fn()
    times: dict[str, list[Timing]] = {name: [] for name, _ in variants}
    for rep in range(repeats):
        order = list(variants[rep % len(variants) :]) + list(variants[: rep % len(variants)])
        for name, fn in order:
            times[name].append(fn())
    return times


def loop_table(
    report: Report, options: dict[str, Any], specs: list[tuple[int, int, int]], repeats: int
) -> None:
    table = Table(
        f"1. The mini_asr loop, updates per second, median of {repeats} interleaved repeats, "
        "1 thread, CPU time",
        [
            Column("case", "case", "text"),
            Column("off", "fuse off upd/s"),
            Column("auto", "fuse auto upd/s"),
            Column("x", "auto / off"),
            Column("range", "auto / off range", "text"),
            Column("x_wall", "auto / off, wall clock"),
            Column("x_no_probe", "fused without noise probe / off"),
            Column("probe_share", "share of the fused gain the probe costs", "number", ".2f"),
        ],
    )
    for world, batch, updates in specs:
        cfgs = {fuse: loop_config(options, world, batch, updates, fuse) for fuse in ("off", "auto")}
        say(f"{NAME}: loop V={world}")
        off_cfg, auto_cfg = cfgs["off"], cfgs["auto"]

        def off_run(c: TrialConfig = off_cfg) -> Timing:
            return run_loop(c)

        def auto_run(c: TrialConfig = auto_cfg) -> Timing:
            return run_loop(c)

        def no_probe_run(c: TrialConfig = auto_cfg) -> Timing:
            return run_loop(c, probe=False)

        times = interleave([("off", off_run), ("auto", auto_run), ("no_probe", no_probe_run)], repeats,
                           not report.quick)
        off, auto, bare = times["off"], times["auto"], times["no_probe"]
        speed = [ratio(o[0], a[0]) for o, a in zip(off, auto, strict=True)]
        no_probe = median([ratio(o[0], b[0]) for o, b in zip(off, bare, strict=True)])
        x = median(speed)
        label = f"mini_asr V={world} x {batch} samples ({world * batch} per update), {updates} updates"
        table.rows.append({
            "case": label,
            "off": updates / median([t[0] for t in off]),
            "auto": updates / median([t[0] for t in auto]),
            "x": x,
            "range": spread(speed),
            "x_wall": median([ratio(o[1], a[1]) for o, a in zip(off, auto, strict=True)]),
            "x_no_probe": no_probe,
            "probe_share": (no_probe - x) / (no_probe - 1) if no_probe > 1 else float("nan"),
        })  # fmt: skip
        report.raw[f"loop V={world}"] = _raw(times)
        if world == 16 or (report.quick and world == max(s[0] for s in specs)):
            report.target(f"fused / unfused updates per second, {label} (CPU time)", x, ">=", 1.3)
    report.tables.append(table)


def passes_table(report: Report, options: dict[str, Any], world: int, batch: int, repeats: int) -> None:
    """One update's forward and backward passes, cut every way, on the same model and samples."""
    workload = registry.make("mini_asr", options)
    torch.manual_seed(0)
    model = workload.build_model()
    sharding = Sharding(workload.train_size(), world, batch, 1, 0)
    indices = [i for v in range(world) for mb in sharding.micro_batches(1, v) for i in mb]
    lengths = fusion.sample_lengths(workload, indices)
    n = len(indices)

    def update(passes: list[list[int]]) -> Callable[[], Timing]:
        def run() -> Timing:
            model.zero_grad(set_to_none=True)
            c0, t0 = time.process_time(), time.perf_counter()
            for group in passes:
                (workload.loss(model, workload.train_batch(group)).sum() / n).backward()
            return time.process_time() - c0, time.perf_counter() - t0

        return run

    budgets = [b for b in (16, 32, 64, 128, 256) if b <= n] if not report.quick else [batch, n]
    variants = [("per micro-batch (fuse off)", update(fusion.plan_passes(indices, batch)))]
    for b in budgets:
        variants.append((f"<= {b}, sharding order", update(fusion.plan_passes(indices, b))))
        variants.append((f"<= {b}, grouped by length", update(fusion.plan_passes(indices, b, lengths))))
    say(f"{NAME}: passes of one V={world} update")
    times = interleave(variants, repeats, not report.quick)
    base = times[variants[0][0]]
    table = Table(
        f"2. One mini_asr update of {n} samples (V={world} x {batch}), CPU seconds, median of "
        f"{repeats}, 1 thread",
        [
            Column("cut", "passes of at most", "text"),
            Column("passes", "passes", fmt="d"),
            Column("padded", "padded frames / real frames"),
            Column("cpu_s", "CPU s per update"),
            Column("x", "speed vs per micro-batch"),
        ],
    )
    frames = sum(lengths or [1])
    for name, _ in variants:
        if name == variants[0][0]:
            passes = fusion.plan_passes(indices, batch)
        else:
            b = int(name.split()[1].rstrip(","))
            passes = fusion.plan_passes(indices, b, lengths if "length" in name else None)
        length_of = dict(zip(indices, lengths or [1] * n, strict=True))
        padded = sum(len(p) * max(length_of[i] for i in p) for p in passes)
        table.rows.append({
            "cut": name,
            "passes": len(passes),
            "padded": padded / frames,
            "cpu_s": median([t[0] for t in times[name]]),
            "x": median([ratio(b[0], t[0]) for b, t in zip(base, times[name], strict=True)]),
        })  # fmt: skip
    report.raw["passes"] = _raw(times)
    report.tables.append(table)


def threads_table(report: Report, cfg: TrialConfig, repeats: int) -> None:
    def at(threads: int) -> Callable[[], Timing]:
        def run() -> Timing:
            torch.set_num_threads(threads)
            try:
                return run_loop(cfg)
            finally:
                torch.set_num_threads(1)

        return run

    say(f"{NAME}: threads")
    times = interleave([("1", at(1)), ("2", at(2))], repeats, not report.quick)
    one, two = times["1"], times["2"]
    n = cfg.total_updates
    table = Table(
        f"3. Fused mini_asr loop V={cfg.world_size}, intra-op threads, median of {repeats} "
        "interleaved repeats",
        [
            Column("threads", "threads", "text"),
            Column("wall", "updates per wall second"),
            Column("cpu", "CPU s per update"),
            Column("x", "wall speed vs 1 thread"),
            Column("range", "range", "text"),
        ],
    )
    speed = [ratio(a[1], b[1]) for a, b in zip(one, two, strict=True)]
    for name, ts, x, rng in (("1", one, 1.0, ""), ("2", two, median(speed), spread(speed))):
        table.rows.append({
            "threads": name, "wall": n / median([t[1] for t in ts]), "cpu": median([t[0] for t in ts]) / n,
            "x": x, "range": rng,
        })  # fmt: skip
    report.raw["threads"] = _raw(times)
    report.tables.append(table)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(__doc__, argv)
    quick = args.quick
    torch.set_num_threads(1)
    repeats = args.repeats or (1 if quick else 5)
    if quick:
        options: dict[str, Any] = {"train_size": 256, "dev_size": 16, "d_model": 32, "num_blocks": 1}
        specs, batch = [(4, 4, 4), (16, 4, 4)], 4
    else:
        options = {"train_size": 4096}  # the WeNet study's data
        batch = 16
        # whole noise-scale cadences (every 4th update runs per virtual rank): V = 4, 16 updates
        # (a quarter epoch); V = 16, 8 updates (half an epoch)
        specs = [(4, batch, 4 * loop.NOISE_EVERY), (16, batch, updates_per_epoch(4096, 16, batch) // 2)]
    report = Report(
        NAME,
        quick,
        settings={
            "repeats": repeats,
            "options": options,
            "loop": specs,
            "noise_every": loop.NOISE_EVERY,
            "cpu_pass_samples": fusion.CPU_PASS_SAMPLES,
        },
    )
    loop_table(report, options, specs, repeats)
    passes_table(report, options, 16, batch, repeats)
    world, _, updates = specs[-1]
    threads_table(report, loop_config(options, world, batch, updates, "auto"), repeats)
    report.notes.append(
        "No GPU was lent to this task: CPU only. On a GPU the default budget is per_worker_batch "
        "(fused passes only regroup samples by length); give training.fuse_max_samples to go bigger."
    )
    report.finish(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
