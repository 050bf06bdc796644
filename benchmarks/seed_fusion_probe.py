"""Fused seeds (issue 51, item 1): does one process training K seeds at once pay on a CPU?

Per optimizer update of mini_asr (the shipped WeNet study's workload and data options, float32,
``per_worker_batch`` 16, one intra-op thread), CPU seconds of:

* solo: the loop's own update (``loop._Trial._update``, simulate, P = 1), once per seed, the
  noise-scale probe switched off so that both sides do the same work (seed fusion does not
  measure the noise scale yet);
* fused K: one update of K seeds through ``scalesweep.trainables.seed_fusion`` (vmap over the
  stacked parameters).

The figure of merit is fused K / (K x solo): below 1 the fused run is cheaper per seed-update.
With dropout 0 (the study's) both sides run fused virtual-rank passes (64 samples a pass);
with ``--dropout`` both run one pass per micro-batch with the per-pass reseeding. Variants are
interleaved (solo, fused 2, fused 4, solo, ...) and repeated; the ratio is taken per repeat and
the median shown with the range. Evaluation is not timed (it runs seed by seed either way).

``--workload mlp_regression`` (a tiny MLP: per-op overhead, not arithmetic) and ``--batch 1``
(mini_asr's fixed cost per update) bracket where fusing can pay on a CPU.

Run: ``.venv/bin/python -m benchmarks.seed_fusion_probe [--repeats 3] [--updates 4]
[--dropout 0.1] [--worlds 4 16] [--ks 2 4] [--workload mlp_regression] [--batch 16]``; it
prints a markdown table.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from scalesweep.trainables import loop, seed_fusion
from scalesweep.trainables import workloads as registry
from scalesweep.trainables.config import TrialConfig
from scalesweep.trainables.workloads.base import Workload
from scalesweep.trainables.world import LocalWorld

#: the WeNet study's data (sweeps/wenet_4v16.yaml); the model options are mini_asr's defaults
STUDY_OPTIONS: dict[str, Any] = {"train_size": 8192, "dev_size": 1000, "train_speakers": 200,
                                 "dev_speakers": 50}


def config(world: int, dropout: float, updates: int, workload: str = "mini_asr",
           batch: int = 16) -> TrialConfig:
    options = {**STUDY_OPTIONS, "dropout": dropout} if workload == "mini_asr" else {}
    fields: dict[str, Any] = {
        "name": "probe", "workload": workload, "workload_options": options,
        "world_size": world, "physical_workers": 1, "per_worker_batch": batch,
        "optimizer": {"type": "adam", "lr": 2e-3}, "scheduler": {"type": "warmuplr", "warmup_steps": 300},
        "total_updates": updates + 1, "eval_every": updates + 1, "dtype": "float32",
    }  # fmt: skip
    return TrialConfig(**fields)


def solo_runner(cfg: TrialConfig, seeds: Sequence[int], workload: Workload) -> Callable[[int], float]:
    """CPU seconds of ``updates`` loop updates, for each seed in turn (their sum)."""
    trials = []
    for seed in seeds:
        seeded = cfg.model_copy(update={"seed": seed})
        trial = loop._Trial(seeded, LocalWorld(), lambda m, d: None, workload)
        trial.noise = None  # no probe: seed fusion does not measure the noise scale yet
        trials.append(trial)

    def run(updates: int) -> float:
        start = time.process_time()
        for trial in trials:
            for u in range(1, updates + 1):
                trial._set_hyperparameters(u)
                trial._update(trial.model, u)
        return time.process_time() - start

    return run


def fused_runner(cfg: TrialConfig, seeds: Sequence[int], workload: Workload) -> Callable[[int], float]:
    fused = seed_fusion._FusedSeeds(cfg, seeds, lambda s, m: None, None, workload)

    def run(updates: int) -> float:
        start = time.process_time()
        for u in range(1, updates + 1):
            fused._set_hyperparameters(u)
            fused._update(u)
        return time.process_time() - start

    return run


def machine() -> str:
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        names = [ln.split(":", 1)[1].strip() for ln in lscpu.splitlines() if ln.startswith("Model name")]
        model = names[0] if names else "?"
    except OSError:
        model = platform.processor() or "?"
    import os

    return f"{model}, {os.cpu_count()} logical CPUs, torch {torch.__version__}, 1 intra-op thread"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--updates", type=int, default=4, help="timed updates per variant and repeat")
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--worlds", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--ks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--workload", default="mini_asr", help="mini_asr (study data) or mlp_regression")
    parser.add_argument("--batch", type=int, default=16, help="per_worker_batch")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    print(f"machine: {machine()}; {args.workload}, per_worker_batch {args.batch}, dropout "
          f"{args.dropout}, {args.updates} updates x {args.repeats} repeats\n")
    print("| V | K | solo ms/update (per seed) | fused ms/update (K seeds) "
          "| fused / (K x solo), median [range] |")
    print("|---|---|---|---|---|")
    for world in args.worlds:
        cfg = config(world, args.dropout, args.updates, args.workload, args.batch)
        workload = registry.make(cfg.workload, cfg.workload_options)
        prepare = getattr(workload, "prepare", None)
        if callable(prepare):
            prepare()  # the data made now, not in the first timed update
        kmax = max(args.ks)
        solo = solo_runner(cfg, range(kmax), workload)
        fused = {k: fused_runner(cfg, range(k), workload) for k in args.ks}
        # a first untimed update each: allocator and thread pools warm
        solo(1)
        for k in args.ks:
            fused[k](1)
        solo_t: list[float] = []
        fused_t: dict[int, list[float]] = {k: [] for k in args.ks}
        for _ in range(args.repeats):
            solo_t.append(solo(args.updates) / (args.updates * kmax))
            for k in args.ks:
                fused_t[k].append(fused[k](args.updates) / args.updates)
        for k in args.ks:
            ratios = [f / (k * s) for f, s in zip(fused_t[k], solo_t, strict=True)]
            print(f"| {world} | {k} | {1e3 * statistics.median(solo_t):.1f} "
                  f"| {1e3 * statistics.median(fused_t[k]):.1f} "
                  f"| {statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}] |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
