"""Where a sweep's CPU goes, by process: the CLI driver, Ray's own daemons, the Tune trial
actors, Ray Train's controller and helper actors, the training workers.

Runs ``scalesweep run`` (a local Ray of its own, as a user's first run) on sweeps/smoke.yaml
with ``backend=ddp`` and samples the CPU time (user + system, from /proc) of every process of
its tree once a second, plus the Ray daemons it starts (they detach from the tree: found by the
sandbox directory in their command line or working directory, their children by parent). A
process is counted under what it was last seen as (a Ray worker starts as ``ray::IDLE`` and is
renamed when it becomes an actor: the CPU of its start-up lands under its actor's name when it
lived long enough to be sampled as one). CPU seconds are the comparison, not wall time: on a
shared machine they move far less with the load. The same sweep with ``backend=simulate`` (one
process per trial, no Ray Train) is run beside it, interleaved, for the difference a Ray Train
trial makes.

    .venv/bin/python -m benchmarks.cpu_by_process            # 4 trials, 2 repeats
    .venv/bin/python -m benchmarks.cpu_by_process --quick    # 1 trial, once
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._common import (
    SWEEPS,
    Column,
    Report,
    Table,
    cli_env,
    median,
    parse_args,
    sandbox,
    say,
)

NAME = "cpu_by_process"
HZ = os.sysconf("SC_CLK_TCK")

#: (pattern in the command line, kind), first match wins; a Ray actor is named by its class
KINDS: tuple[tuple[str, str], ...] = (
    ("gcs_server", "ray daemons"),
    ("/raylet", "ray daemons"),
    ("log_monitor", "ray daemons"),
    ("monitor.py", "ray daemons"),
    ("dashboard", "ray daemons"),
    ("DashboardAgent", "ray daemons"),
    ("RuntimeEnvAgent", "ray daemons"),
    ("runtime_env/agent", "ray daemons"),
    ("ray.util.client.server", "ray daemons"),
    ("ray::IDLE", "ray worker, not yet an actor"),
    ("default_worker.py", "ray worker, not yet an actor"),
    ("-m scalesweep", "CLI driver"),
)


def kind(cmdline: str) -> str:
    actor = re.match(r"ray::([A-Za-z_]\w*)", cmdline)
    if actor and actor.group(1) not in ("IDLE", "DashboardAgent", "RuntimeEnvAgent"):
        return f"actor {actor.group(1)}"
    for pattern, name in KINDS:
        if pattern in cmdline:
            return name
    return "other"


def _processes() -> dict[int, tuple[int, float, str, str]]:
    """pid -> (parent pid, CPU seconds so far, command line, working directory)."""
    out: dict[int, tuple[int, float, str, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            try:
                cwd = os.readlink(entry / "cwd")
            except OSError:
                cwd = ""
            out[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / HZ, cmd, cwd)
        except (OSError, IndexError, ValueError):
            continue  # gone between the listing and the read
    return out


def measure(argv: Sequence[str], cwd: Path, marker: str) -> tuple[float, dict[str, float], int]:
    """Run ``argv``; (wall seconds, CPU seconds by kind, exit code). A process is ours if it
    started after the command did and descends from it or names ``marker`` (the sandbox) in its
    command line or cwd: a previous run's processes still shutting down are not counted."""
    before = set(_processes())
    proc = subprocess.Popen(list(argv), cwd=cwd, env=cli_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    start = time.perf_counter()
    ours: set[int] = {proc.pid}
    last: dict[int, tuple[float, str]] = {}
    while True:
        done = proc.poll() is not None
        table = _processes()
        grew = True
        while grew:  # children of ours, and Ray's detached daemons by their sandbox paths
            grew = False
            for pid, (parent, _, cmd, where) in table.items():
                if pid not in ours and pid not in before and (
                        parent in ours or marker in cmd or marker in where):
                    ours.add(pid)
                    grew = True
        for pid in ours & table.keys():
            _, cpu, cmd, _ = table[pid]
            last[pid] = (cpu, kind(cmd))
        if done:
            break
        time.sleep(1.0)
    wall = time.perf_counter() - start
    by_kind: dict[str, float] = collections.defaultdict(float)
    for cpu, name in last.values():
        by_kind[name] += cpu
    return wall, dict(by_kind), proc.returncode


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(__doc__, argv)
    repeats = args.repeats or (1 if args.quick else 2)
    trials = ["--set", "axes.world_size=[2]", "--set", "axes.scaling_rule=[none]"] if args.quick else []
    settings = {"sweep": "sweeps/smoke.yaml", "sets": trials, "repeats": repeats}
    report = Report(NAME, args.quick, settings=settings)
    runs: list[dict[str, Any]] = []
    with sandbox(NAME) as tmp:
        for rep in range(repeats):
            for backend in ("ddp", "simulate"):  # interleaved
                work = tmp / f"{backend}-{rep}"
                work.mkdir()
                say(f"{NAME}: repeat {rep + 1}/{repeats}, backend {backend}")
                wall, cpu, code = measure(
                    [sys.executable, "-m", "scalesweep", "run", "--no-report", str(SWEEPS / "smoke.yaml"),
                     "--set", f"backend={backend}", *trials], work, str(tmp))
                if code != 0:
                    raise SystemExit(f"{NAME}: the {backend} sweep exited {code} (its files: {work})")
                runs.append({"rep": rep, "backend": backend, "wall": wall, "cpu": cpu})
    report.raw["runs"] = runs
    kinds = sorted({k for r in runs for k in r["cpu"]},
                   key=lambda k: -median([r["cpu"].get(k, 0.0) for r in runs if r["backend"] == "ddp"]))
    table = Table(f"CPU seconds by process kind, median of {repeats} (scalesweep run, a local Ray)",
                  [Column("kind", "process kind", "text"), Column("ddp", "backend ddp", "number"),
                   Column("ddp_share", "share of ddp's CPU", "number", ".0%"),
                   Column("simulate", "backend simulate", "number")])
    totals = {b: median([sum(r["cpu"].values()) for r in runs if r["backend"] == b])
              for b in ("ddp", "simulate")}
    for k in kinds:
        ddp = median([r["cpu"].get(k, 0.0) for r in runs if r["backend"] == "ddp"])
        sim = median([r["cpu"].get(k, 0.0) for r in runs if r["backend"] == "simulate"])
        table.rows.append({"kind": k, "ddp": ddp, "ddp_share": ddp / totals["ddp"], "simulate": sim})
    table.rows.append({"kind": "all", "ddp": totals["ddp"], "ddp_share": 1.0, "simulate": totals["simulate"]})
    walls = Table("Wall seconds of the command, median",
                  [Column("backend", "backend", "text"), Column("wall", "wall s"),
                   Column("cpu_per_wall", "CPU s per wall s")])
    for b in ("ddp", "simulate"):
        wall = median([r["wall"] for r in runs if r["backend"] == b])
        walls.rows.append({"backend": b, "wall": wall, "cpu_per_wall": totals[b] / wall})
    report.tables += [table, walls]
    report.notes.append("A process is counted under its last sampled name; processes that lived "
                        "under a second may be missed (sampled once a second).")
    report.finish(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
