"""Process start-up: what each Tune trial process and each ddp worker spends before training.

A ddp trial of world size V starts V Ray Train workers (plus its Tune trial process); on a
2-core machine their start-up, not the loop, decides how long the trial takes. This measures,
in fresh Python processes (CPU seconds of the process, ``time.process_time``, so the load of a
shared machine barely moves them), interleaved and repeated:

* the import a Tune trial process makes to find our trainable: ``scalesweep.trainables.trial_driver``
  (the entry point since the light-entry fix), against ``scalesweep.orchestrator.launch.tune`` (the entry
  point before it: it also pulls in MLflow and the planner) and against what a simulate trial
  needs (``ray.tune`` + ``scalesweep.trainables.loop``);
* the steps of a ddp worker in order: ``import ray.train`` (+ torch), our worker module, the
  workload's data (``mini_asr`` as in the WeNet study, 4096 utterances), the model, the first
  optimizer (torch imports ``torch._dynamo`` on it), and, for comparison with making the data,
  unpickling the same data (what fetching it from Ray's object store would cost at most).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from benchmarks._common import ROOT, Column, Report, Table, median, parse_args, say, spread

NAME = "startup"

IMPORTS = {
    "scalesweep.orchestrator.launch.tune (the Tune entry point before the fix)":
        "import scalesweep.orchestrator.launch.tune",
    "scalesweep.trainables.trial_driver (the Tune entry point)":
        "import scalesweep.trainables.trial_driver",
    "ray.tune + scalesweep.trainables.loop (what a simulate trial runs)": (
        "import ray.tune, scalesweep.trainables.loop, scalesweep.trainables.world, "
        "scalesweep.trainables.config"
    ),
    "python -c pass": "pass",
}

WORKER = """
import json, pickle, time, sys
marks = []
def mark(name, c=[time.process_time()]):
    now = time.process_time(); marks.append((name, now - c[0])); c[0] = now
import ray.train, ray.train.torch; mark("import ray.train, ray.train.torch (and torch)")
import scalesweep.trainables.ray_train.ray_worker; mark("import our worker module")
from scalesweep.trainables import workloads
w = workloads.make(sys.argv[1], json.loads(sys.argv[2]))
getattr(w, "prepare", lambda: None)()  # lazily generated data: generate it now
mark(f"make the workload's data ({sys.argv[1]}; per worker before ddp trials shared it)")
import torch
torch.manual_seed(0); model = w.build_model(); mark("build the model")
torch.optim.Adam(model.parameters(), lr=1e-3); mark("first optimizer (torch imports torch._dynamo)")
blob = pickle.dumps(w, protocol=5); c = time.process_time(); pickle.loads(blob)
marks.append((f"unpickle the same data ({len(blob) / 2**20:.0f} MiB; what a worker pays now, at most)",
              time.process_time() - c))
print(json.dumps(marks))
"""


def child_cpu(args: list[str]) -> tuple[float, str]:
    """(CPU seconds of the child process, its stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, proc.stdout


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(__doc__, argv)
    quick = args.quick
    repeats = args.repeats or (1 if quick else 5)
    workload, options = ("mini_asr", {"train_size": 256}) if quick else ("mini_asr", {"train_size": 4096})
    report = Report(NAME, quick, settings={"repeats": repeats, "workload": workload, "options": options})
    imports: dict[str, list[float]] = {k: [] for k in IMPORTS}
    steps: dict[str, list[float]] = {}
    for rep in range(repeats):
        say(f"{NAME}: repeat {rep + 1}/{repeats}")
        items = list(IMPORTS.items())
        for label, stmt in items[rep % len(items) :] + items[: rep % len(items)]:
            imports[label].append(child_cpu(["-c", stmt])[0])
        _, out = child_cpu(["-c", WORKER, workload, json.dumps(options)])
        for name, cpu in json.loads(out):
            steps.setdefault(name, []).append(cpu)
    t1 = Table(
        f"Import a Tune trial process makes before our trainable runs (CPU s of a fresh process, "
        f"median of {repeats})",
        [Column("what", "import", "text"), Column("cpu", "CPU s"), Column("range", "range", "text")],
    )
    for label, xs in imports.items():
        t1.rows.append({"what": label, "cpu": median(xs), "range": spread(xs)})
    t2 = Table(
        f"One ddp worker's start-up, step by step (CPU s, median of {repeats}); a trial of world size "
        "V pays it V times",
        [
            Column("what", "step", "text"),
            Column("cpu", "CPU s"),
            Column("v16", "x 16 workers, CPU s"),
            Column("range", "range", "text"),
        ],
    )
    for name, xs in steps.items():
        t2.rows.append({"what": name, "cpu": median(xs), "v16": 16 * median(xs), "range": spread(xs)})
    ours = [v for k, v in steps.items() if not k.startswith("unpickle")]
    total = sum(median(xs) for xs in ours)
    t2.rows.append({"what": "total, each worker making the data", "cpu": total, "v16": 16 * total})
    made = next(median(v) for k, v in steps.items() if k.startswith("make"))
    fetched = next(median(v) for k, v in steps.items() if k.startswith("unpickle"))
    now = total - made + fetched
    t2.rows.append({"what": "total, data made once per trial and fetched", "cpu": now, "v16": 16 * now})
    before, light = imports[items[0][0]], imports[items[1][0]]
    saving: dict[str, Any] = {"what": "saving of the light entry point (tune_launch - trial_driver)"}
    saving["cpu"] = median([a - b for a, b in zip(before, light, strict=True)])
    if saving["cpu"] > 0:
        saving["range"] = spread([a - b for a, b in zip(before, light, strict=True)])
        t1.rows.append(saving)
    report.tables += [t1, t2]
    report.raw = {"imports": imports, "worker_steps": steps}
    report.finish(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
