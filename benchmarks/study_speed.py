"""How fast the shipped study runs: today's packing (one seed per trial process) against fused
seeds (``resources.seeds_per_trial``: an arm's seeds of a round in one process), side by side in
one run on the same machine and seeds (issue 51, item 4).

Each variant is the real CLI in a subprocess (embedded local Ray, MLflow on a fresh sqlite
store, the report at the end: a user's whole ``scalesweep run sweeps/wenet_4v16.yaml``); the
variants alternate (today, fused, today, ...) with ``--repeats`` and the ratio is taken per
repeat. The study keeps its adaptive seeds: the variants train the same updates (fused seeds
match their solo trials, docs/design.md "Fused seeds"), so they take the same decisions and run
the same rounds, which this script checks (every arm's decision in ``arms.json``, both
variants); a study made of fixed seeds instead would time something nobody runs. The fused
variant takes ``seeds_per_trial`` = the design's first round (6 seeds), so each round of an arm
is one process. Device-side data (workloads' ``place``) is the loop's on a GPU, in ``--gpu``'s
run; on a CPU the data is on the device anyway.

Per variant: the study's wall clock; the trials' training seconds (``train_seconds`` of the
summary JSON, summed per trial process: a fused process's seeds share its clock); the trial
processes; on CUDA, the device's busy fraction over the study's wall (``nvidia-smi`` utilisation
sampled every 200 ms); and host syncs per update, counted in process on a short mini_asr trial
(scalesweep's own reads of tensor values, as tests/unit/test_host_syncs.py counts them: the
difference between a 2N- and an N-update trial with one eval at the end, over N).

``--gpu`` (one CUDA device): today's packing only, each trial a quarter of the GPU and 3 CPUs,
and the device's busy fraction; fused seeds run on CPUs only yet (refused at load with
``resources.gpus_per_worker`` > 0), so there is no fused variant on a GPU. Its results go to
``<--out>/gpu/``; ``scripts/gpu_check.sh`` runs it and records them. ``--quick``: a tiny
mini_asr, 2 arms x 2 seeds, host syncs over 16 updates (minutes: two studies' Ray and trial
processes start), so tests/unit/test_study_speed.py checks its parts instead.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks._common import (
    ROOT,
    Column,
    Report,
    Table,
    cli_env,
    median,
    parse_args,
    ratio,
    say,
    spread,
)

NAME = "study_speed"
SWEEP = ROOT / "sweeps" / "wenet_4v16.yaml"
STUDY = "wenet-4v16"  # the sweep's name: its report's directory
#: the fused variant: the design's first round (replicates.min) in one process per arm
FUSED_SEEDS = 6
QUICK_SEEDS = 2
QUICK = [  # a few updates of a small model, two arms of two seeds
    "training.epochs=1", "training.eval_every_epochs=0.25", "axes.world_size=[4, 16]",
    "axes.warmup_rule=[fixed]", "axes.scaling_rule=[none]", "replicates=null", "axes.seed=[0, 1]",
    "workload.options={train_size: 1024, dev_size: 16, d_model: 32, num_blocks: 1}"]
GPU = ["resources.gpus_per_worker=0.25", "resources.cpus_per_worker=3"]
#: a fused trial's Tune name (scalesweep.orchestrator.plan.adaptive.fused_name)
FUSED_NAME = re.compile(r"^(?P<arm>.+)-seeds(?P<seeds>\d+(?:\+\d+)+)$")


def processes(names: list[str], tune_dirs: list[str]) -> list[list[str]]:
    """The summary's trial ``names`` grouped by the trial process that trained them: a fused
    Tune trial ``<arm>-seeds0+1`` trained ``<arm>-s0`` and ``<arm>-s1``; any other name was a
    process of its own."""
    owner: dict[str, str] = {}
    for d in tune_dirs:
        m = FUSED_NAME.match(d)
        if m:
            for seed in m["seeds"].split("+"):
                owner[f"{m['arm']}-s{seed}"] = d
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(owner.get(name, name), []).append(name)
    return list(groups.values())


def train_seconds(trials: list[dict[str, Any]], tune_dirs: list[str]) -> float:
    """The trials' training seconds summed per process: a fused process's seeds report its clock
    at their own ends, so the process trained as long as its last seed."""
    seconds = {t["name"]: float(t.get("train_seconds") or 0.0) for t in trials}
    return sum(max(seconds[n] for n in group) for group in processes(list(seconds), tune_dirs))


Decisions = dict[str, str]


def compare_decisions(pairs: list[tuple[Decisions, Decisions]]) -> tuple[list[dict[str, Any]], bool]:
    """Each repeat's (today's, fused) decisions by arm, as table rows; and whether every arm of
    every repeat took the same decision both ways (an arm missing from one side differs)."""
    rows = []
    for r, (today, fused) in enumerate(pairs, start=1):
        for arm in sorted(set(today) | set(fused)):
            a, b = today.get(arm), fused.get(arm)
            rows.append({"repeat": str(r), "arm": arm, "today": a, "fused": b,
                         "same": "yes" if a == b else "NO"})
    return rows, all(row["same"] == "yes" for row in rows)


class DeviceBusy:
    """``nvidia-smi``'s utilisation of GPU 0, sampled every 200 ms while it is open; ``busy``:
    the mean over the samples (0-1)."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._proc: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> DeviceBusy:
        self._proc = subprocess.Popen(
            ["nvidia-smi", "--id=0", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
             "-lms", "200"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                self.samples.append(float(line.strip()) / 100)
            except ValueError:  # "[N/A]" and the like
                continue

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None and self._thread is not None
        self._proc.terminate()
        self._proc.wait(timeout=10)
        self._thread.join(timeout=10)

    @property
    def busy(self) -> float:
        return sum(self.samples) / len(self.samples) if self.samples else float("nan")


def run_study(per_trial: int, quick: bool, gpu: bool) -> dict[str, Any]:
    """One ``scalesweep run`` of the study in a fresh directory."""
    with tempfile.TemporaryDirectory(prefix=f"scalesweep-bench-{NAME}-") as tmp:
        sets = [f"resources.seeds_per_trial={per_trial}", *(QUICK if quick else []), *(GPU if gpu else [])]
        summary = Path(tmp) / "summary.json"
        cmd = [sys.executable, "-m", "scalesweep", "run", str(SWEEP), "--tracking-uri",
               f"sqlite:///{tmp}/mlflow.db", "--summary-json", str(summary)]
        for s in sets:
            cmd += ["--set", s]
        sampler = DeviceBusy() if gpu else None
        t0 = time.perf_counter()
        with sampler or _nothing():
            proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True,
                                  env=cli_env(SCALESWEEP_STORAGE=f"{tmp}/runs"))
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        trials = json.loads(summary.read_text())
        tune_dirs = [p.name for p in Path(tmp, "runs").glob("*/tune*/*") if p.is_dir()]
        arms = json.loads(Path(tmp, "reports", STUDY, "arms.json").read_text())
        names = [t["name"] for t in trials]
        return {"wall_s": wall, "seeds": len(trials), "processes": len(processes(names, tune_dirs)),
                "train_s": train_seconds(trials, tune_dirs),
                "device_busy": None if sampler is None else sampler.busy,
                "decisions": {_arm_label(a): a["decision"] for a in arms}}


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def _arm_label(arm: dict[str, Any]) -> str:
    return str(arm.get("arm") or arm.get("name") or json.dumps(arm.get("settings"), sort_keys=True))


# -- host syncs per update ---------------------------------------------------------------------

#: the tensor methods through which Python reads a value on the host (tests/unit/test_host_syncs.py)
READS = ("item", "tolist", "numpy", "cpu", "__float__", "__int__", "__bool__", "__index__")
#: tiny mini_asr, float64 on a CPU (as tests/unit/test_host_syncs.py)
ASR = {"train_size": 64, "dev_size": 8, "d_model": 8, "num_blocks": 1, "max_frames": 40}


def count_reads(run: Callable[[], None]) -> int:
    """scalesweep's own reads of tensor values while ``run`` runs (torch's inside are left out)."""
    import torch

    count = 0

    def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
        def counted(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            nonlocal count
            if sys._getframe(1).f_globals.get("__name__", "").startswith("scalesweep."):
                count += 1
            return method(tensor, *args, **kwargs)
        return counted

    saved = {name: getattr(torch.Tensor, name) for name in READS}
    try:
        for name, method in saved.items():
            setattr(torch.Tensor, name, wrap(method))
        run()
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)
    return count


def host_syncs(updates: int = 32) -> dict[str, float]:
    """Host reads per update of the loop (one seed) and of fused seeds (two), each the
    difference between a 2N- and an N-update trial, both with one eval at their end, over N."""
    from scalesweep.trainables.config import TrialConfig
    from scalesweep.trainables.loop import train
    from scalesweep.trainables.seed_fusion import train_seeds
    from scalesweep.trainables.world import LocalWorld

    def config(n: int) -> TrialConfig:
        return TrialConfig.model_validate(
            {"name": "t", "workload": "mini_asr", "workload_options": ASR, "world_size": 2,
             "physical_workers": 1, "per_worker_batch": 2, "accum_grad": 1,
             "optimizer": {"type": "adam", "lr": 3e-3}, "scheduler": {"type": "warmuplr", "warmup_steps": 5},
             "total_updates": n, "eval_every": n, "dtype": "float64"})

    def loop(n: int) -> None:
        train(config(n), LocalWorld(), on_report=lambda m, d: None)

    def fused(n: int) -> None:
        train_seeds(config(n), [0, 1], on_report=lambda s, m, d: None)

    def per_update(f: Callable[[int], None]) -> float:
        return (count_reads(lambda: f(2 * updates)) - count_reads(lambda: f(updates))) / updates

    return {"loop": per_update(loop), "fused": per_update(fused)}


# -- the benchmark -----------------------------------------------------------------------------


def _extra(p: Any) -> None:
    p.add_argument("--gpu", action="store_true",
                   help="today's packing on one CUDA device (a quarter of it a trial), its busy fraction")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__, argv, _extra)
    if args.gpu and shutil.which("nvidia-smi") is None:
        raise SystemExit("--gpu: no nvidia-smi on PATH, so no GPU to measure")
    repeats = args.repeats or 1
    fused = QUICK_SEEDS if args.quick else FUSED_SEEDS
    variants = {"today": 1} if args.gpu else {"today": 1, "fused": fused}
    report = Report(NAME, quick=args.quick, flags=" --gpu" if args.gpu else "",
                    settings={"sweep": "sweeps/wenet_4v16.yaml", "repeats": repeats, "gpu": args.gpu,
                              "seeds_per_trial": variants,
                              "sets": [*(QUICK if args.quick else []), *(GPU if args.gpu else [])]})
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    for r in range(repeats):
        for variant, per_trial in variants.items():
            say(f"repeat {r + 1}/{repeats}: {variant} (seeds_per_trial {per_trial})")
            runs[variant].append(run_study(per_trial, args.quick, args.gpu))
    say("host syncs per update (in process, mini_asr)")
    syncs = host_syncs(16 if args.quick else 32)

    first = runs["today"][0]
    table = Table(
        f"sweeps/wenet_4v16.yaml{' (quick)' if args.quick else ''}: {first['seeds']} seed trials, "
        f"{repeats} repeat(s){', one GPU' if args.gpu else ''}",
        [Column("what", "what", "text"),
         *[Column(v, f"{v} (seeds_per_trial {k})") for v, k in variants.items()],
         *([Column("x", "fused / today"), Column("range", "fused / today range", "text")]
           if "fused" in variants else [])])
    for key, label in (("wall_s", "study wall clock, s"), ("processes", "trial processes"),
                       ("train_s", "trials' training, s (summed per process)")):
        row: dict[str, Any] = {"what": label, **{v: median([x[key] for x in runs[v]]) for v in variants}}
        if "fused" in variants:
            xs = [ratio(f[key], t[key]) for t, f in zip(runs["today"], runs["fused"], strict=True)]
            row.update(x=median(xs), range=spread(xs))
        table.rows.append(row)
    busy = median([x["device_busy"] for x in runs["today"]]) if args.gpu else None
    table.rows.append({"what": "device busy, share of the study's wall",
                       **{v: (busy if v == "today" else None) for v in variants}}
                      if args.gpu else {"what": "device busy", "range": "n/a (no GPU)"})
    table.rows.append({"what": "host reads per update (mini_asr, in process)", "today": syncs["loop"],
                       **({"fused": syncs["fused"]} if "fused" in variants else {})})
    report.tables.append(table)

    same = True
    if "fused" in variants:
        rows, same = compare_decisions([(t["decisions"], f["decisions"])
                                        for t, f in zip(runs["today"], runs["fused"], strict=True)])
        report.tables.append(Table("each arm's decision, per repeat: today | fused",
                                   [Column("repeat", "repeat", "text"), Column("arm", "arm", "text"),
                                    Column("today", "today", "text"), Column("fused", "fused", "text"),
                                    Column("same", "same", "text")], rows))
        wall_x = table.rows[0]["x"]
        report.target("fused wall / today's wall (CPU, same run)", wall_x, "<=", 0.7)
        report.target("arms whose decision differs between the variants", 0.0 if same else 1.0, "<=", 0)
    if args.gpu:
        report.target("the whole study's wall on one GPU, s", table.rows[0]["today"], "<=", 90)
        report.target("device busy, share of the study's wall", busy if busy is not None else float("nan"),
                      ">=", 0.5)
        report.notes.append("Fused seeds run on CPUs only yet (refused with resources.gpus_per_worker > 0): "
                            "no fused variant on a GPU. The busy share is over the study's whole wall "
                            "(Ray's start and the report included), a lower bound of the trials' own.")
    report.notes.append("Host reads per update: scalesweep's own reads of tensor values per optimizer update "
                        "(a 2N- less an N-update trial over N, one eval each), on a CPU: on a GPU each waits "
                        "for the queued work. A fused update updates every seed of its process.")
    report.raw = {"runs": runs, "host_syncs": syncs, "decisions_same": same}
    report.finish(args.out / "gpu" if args.gpu else args.out)


if __name__ == "__main__":
    main()
