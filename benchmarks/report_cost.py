"""What a report costs an own loop under a sweep, against the same loop standalone.

Ray Train V2's controller takes a worker's report off a one-slot queue only when it polls the
workers (``RAY_TRAIN_HEALTH_CHECK_INTERVAL_S``, 2 s by default), and ``ray.train.report``
blocks until the slot is free: a loop that evaluates more often than that waited up to 2 s at
every eval. The trial driver now sets the interval for the controllers it starts
(``scalesweep.trainables.trial_driver.REPORT_POLL_S``).

The loop (:func:`train_loop_per_worker`, in this module so that the sweep's workers import it)
is a small MLP at a fixed amount of work per update, with ``loop_helpers.lr_scheduler`` and
``loop_helpers.report`` at every ``eval_every`` updates; it times itself on rank 0 (its whole
body, and each report call) and writes that with its start time. Each sweep runs it at world
sizes 1 and 2 (``scalesweep run``, a subprocess of the CLI with a local Ray of its own, so that
the variable reaches its trials), and then the same function runs here, in this process, with
each trial's own config and the report built but not sent: the standalone loop. Per eval:

* ``in report``: the seconds rank 0 spent inside ``report`` calls, over the evals;
* ``over standalone``: (the loop's wall under the sweep - its standalone wall) / evals, the
  whole cost of being swept once the loop has started, whatever its cause;
* ``start-up``: from the MLflow child run's start (Tune started the trial) to the loop's first
  line: the trial's Tune actor, Ray Train's controller, the worker group and its process group.

Variants, interleaved per repeat: ``ray default`` (the variable set to Ray's 2 s in the CLI's
environment: the behaviour before the fix) and ``sweep default`` (nothing set). The built-in
ddp backend reports through the same Ray Train path; a ``mlp_regression`` ddp sweep with as
many evals shows its per-eval difference between the two (trial wall from MLflow). In ``--quick``
mode (and whenever ``RAY_ADDRESS`` names a cluster, whose trials do not see the CLI's
environment) only ``sweep default`` runs; ``--quick`` runs the own loop at world size 2 alone.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
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
    sandbox,
    say,
    spread,
    write_yaml,
)

NAME = "report_cost"
POLL_ENV = "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"
RAY_DEFAULT_POLL = "2"
HIDDEN = 256


def _body(config: Mapping[str, Any], send: Callable[..., Any]) -> dict[str, Any]:
    """The loop: ``config["total_updates"]`` updates of a fixed amount of work, an eval and a
    ``send(update=, dev_loss=, lr=)`` whenever ``loop_helpers.eval_due``. Returns its own
    timings (perf_counter) and start time (time.time)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    from scalesweep import loop_helpers

    started = time.time()
    torch.set_num_threads(1)  # a worker holds 1 CPU; standalone the same
    torch.manual_seed(int(config["seed"]))
    hidden = int(config["options"].get("hidden", HIDDEN))
    model = nn.Sequential(nn.Linear(32, hidden), nn.Tanh(), nn.Linear(hidden, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=float(config["lr"]))
    scheduler = loop_helpers.lr_scheduler(optimizer, config)
    g = torch.Generator().manual_seed(0)
    batch = int(config["per_worker_batch"])
    x, y = torch.randn(batch, 32, generator=g), torch.randn(batch, 4, generator=g)
    dev_x, dev_y = torch.randn(256, 32, generator=g), torch.randn(256, 4, generator=g)
    F.mse_loss(model(x), y).backward()  # autograd's first pass, outside the clock
    optimizer.zero_grad()
    if torch.distributed.is_initialized():  # the workers start together, as DDP's first sync would
        torch.distributed.barrier()
    in_report: list[float] = []
    t0 = time.perf_counter()  # from the first update: set-up and imports are start-up
    for update in range(1, int(config["total_updates"]) + 1):
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        scheduler.step()
        if loop_helpers.eval_due(config, update):
            with torch.no_grad():
                dev = F.mse_loss(model(dev_x), dev_y).item()
            t = time.perf_counter()
            send(update=update, dev_loss=dev, lr=scheduler.lr_at(update))
            in_report.append(time.perf_counter() - t)
    return {"started": started, "wall_s": time.perf_counter() - t0, "in_report_s": in_report}


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """The swept loop; rank 0 writes its timings and its config to ``options.out``."""
    import ray.train

    from scalesweep import loop_helpers

    timings = _body(config, lambda **r: loop_helpers.report(config, **r))
    if ray.train.get_context().get_world_rank() == 0:
        out = Path(config["options"]["out"]) / f"{config['name']}.json"
        out.write_text(json.dumps({"config": config, **timings}))


def standalone(config: Mapping[str, Any]) -> dict[str, Any]:
    """The same loop in this process, its reports built but not sent (once untimed first: the
    swept worker's imports and first optimizer are start-up, outside its clock too)."""
    from scalesweep import loop_helpers

    _body(config, lambda **r: None)
    return _body(config, lambda **r: loop_helpers.build_report(config, **r))


def own_loop_sweep(out: Path, evals: int, worlds: Sequence[int] = (1, 2)) -> dict[str, Any]:
    """World sizes ``worlds``; ``evals`` evals per trial (every 1/evals epoch of 2 epochs)."""
    return {
        "name": "report-cost",
        "workload": {"train_loop": "benchmarks.report_cost:train_loop_per_worker", "train_size": 1024,
                     "options": {"out": str(out), "hidden": HIDDEN}},
        "reference": {"world_size": worlds[0]},
        "target": {"metric": "dev_loss", "relative_to_baseline": 0.25},
        "backend": "ddp",
        "optimizer": {"type": "sgd", "lr": 0.01},
        "scheduler": {"type": "warmuplr", "warmup_steps": 4},
        "training": {"per_worker_batch": 32, "epochs": 2, "eval_every_epochs": 2 / evals},
        "resources": {"cpus_per_worker": 1},
        "axes": {"world_size": list(worlds), "seed": [0]},
    }


def builtin_sweep(evals: int) -> dict[str, Any]:
    """The built-in loop on real DDP workers, as many evals."""
    return {
        "name": "report-cost-builtin",
        "workload": {"name": "mlp_regression", "options": {"train_size": 1024, "dev_size": 256}},
        "reference": {"world_size": 1},
        "target": {"metric": "dev_loss", "relative_to_baseline": 0.25},
        "backend": "ddp",
        "optimizer": {"type": "sgd", "lr": 0.01},
        "training": {"per_worker_batch": 32, "epochs": 2, "eval_every_epochs": 2 / evals},
        "resources": {"cpus_per_worker": 1},
        "axes": {"world_size": [1, 2], "seed": [0]},
    }


def run_cli(sweep: Path, cwd: Path, env: dict[str, str], report: bool = True) -> list[dict[str, Any]]:
    """``scalesweep run`` as a subprocess (``--no-report`` unless ``report``); the trials of its
    --summary-json."""
    summary = cwd / f"{sweep.stem}-summary.json"
    proc = subprocess.run([sys.executable, "-m", "scalesweep", "run", str(sweep),
                           "--summary-json", str(summary), *([] if report else ["--no-report"])],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=1500)
    (cwd / f"{sweep.stem}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"{sweep} exited {proc.returncode}: {proc.stderr[-2000:]}")
    trials: list[dict[str, Any]] = json.loads(summary.read_text())
    return trials


def run_starts(uri: str, trials: Sequence[Mapping[str, Any]]) -> dict[str, tuple[float, float]]:
    """Trial name -> (start, end) of its MLflow child run, in seconds since the epoch."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    spans = {}
    for t in trials:
        info = client.get_run(t["mlflow_run_id"]).info
        spans[t["name"]] = (info.start_time / 1000.0, info.end_time / 1000.0)
    return spans


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(__doc__, argv)
    quick = args.quick
    own_cluster = not os.environ.get("RAY_ADDRESS")
    variants = ["ray default", "sweep default"] if own_cluster and not quick else ["sweep default"]
    repeats = args.repeats or (1 if quick else 2)
    evals = 4 if quick else 16
    # quick: world size 2 alone (two ranks: the barrier, rank 0 alone writing), one trial
    worlds = [2] if quick else [1, 2]
    report = Report(NAME, quick, settings={"evals_per_trial": evals, "repeats": repeats, "variants": variants,
                                           "hidden": HIDDEN, "world_sizes": worlds, "cpus_per_worker": 1,
                                           "ray_default_poll_s": float(RAY_DEFAULT_POLL)})
    rows: list[dict[str, Any]] = []
    builtin: list[dict[str, Any]] = []
    with sandbox(NAME) as tmp:
        for rep in range(repeats):
            for variant in variants:
                cwd = tmp / f"r{rep}-{variant.replace(' ', '_')}"
                out = cwd / "loop"
                out.mkdir(parents=True)
                path = [str(ROOT), os.environ.get("PYTHONPATH")]  # the workers import this module
                extra = {"PYTHONPATH": os.pathsep.join(p for p in path if p)}
                if variant == "ray default":
                    extra[POLL_ENV] = RAY_DEFAULT_POLL
                env = cli_env(**extra)
                if variant != "ray default":
                    env.pop(POLL_ENV, None)
                uri = f"sqlite:///{cwd / 'mlflow.db'}"  # the CLI's default store, in its cwd
                say(f"{NAME}: repeat {rep + 1}/{repeats}, {variant}: own loop")
                # quick: no report after the sweep (it comes after every loop: nothing measured)
                trials = run_cli(write_yaml(cwd / "own.yaml", own_loop_sweep(out, evals, worlds)), cwd, env,
                                 report=not quick)
                spans = run_starts(uri, trials)
                for t in trials:
                    swept = json.loads((out / f"{t['name']}.json").read_text())
                    alone = standalone(swept["config"])
                    n = len(swept["in_report_s"])
                    row = {
                        "rep": rep, "variant": variant, "trial": t["name"], "evals": n,
                        "in_report_per_eval_s": sum(swept["in_report_s"]) / n,
                        "loop_s": swept["wall_s"], "standalone_s": alone["wall_s"],
                        "over_standalone_per_eval_s": (swept["wall_s"] - alone["wall_s"]) / n,
                        "ratio": swept["wall_s"] / alone["wall_s"],
                        "startup_s": swept["started"] - spans[t["name"]][0],
                        "trial_s": spans[t["name"]][1] - spans[t["name"]][0],
                    }
                    rows.append(row)
                    say(f"  {t['name']}: {row['in_report_per_eval_s']:.3f} s in report per eval, loop "
                        f"{row['loop_s']:.2f} s against {row['standalone_s']:.2f} s standalone, "
                        f"start-up {row['startup_s']:.1f} s")
                if quick:
                    continue
                say(f"{NAME}: repeat {rep + 1}/{repeats}, {variant}: built-in ddp loop")
                trials = run_cli(write_yaml(cwd / "builtin.yaml", builtin_sweep(evals)), cwd, env)
                spans = run_starts(uri, trials)
                for t in trials:
                    start, end = spans[t["name"]]
                    builtin.append({"rep": rep, "variant": variant, "trial": t["name"],
                                    "evals": evals, "trial_s": end - start,
                                    "loop_s": float(t["train_seconds"])})
    report.raw = {"own_loop": rows, "builtin": builtin}

    def med(key: str, variant: str, trial: str | None = None, source: list[dict[str, Any]] = rows) -> float:
        return median([r[key] for r in source if r["variant"] == variant
                       and (trial is None or r["trial"] == trial)])

    table = Table(
        f"An own loop's cost per eval under a sweep, {evals} evals per trial (median of {repeats} repeats)",
        [Column("variant", "poll", "text"), Column("trial", "trial", "text"),
         Column("in_report", "s in report / eval"), Column("over", "s over standalone / eval", "number"),
         Column("ratio", "loop wall / standalone"), Column("loop", "loop s"), Column("alone", "standalone s"),
         Column("startup", "start-up s"), Column("range", "s in report / eval, range", "text")])
    for variant in variants:
        for trial in sorted({r["trial"] for r in rows}):
            mine = [r for r in rows if r["variant"] == variant and r["trial"] == trial]
            table.rows.append({
                "variant": variant, "trial": trial,
                "in_report": med("in_report_per_eval_s", variant, trial),
                "over": med("over_standalone_per_eval_s", variant, trial),
                "ratio": med("ratio", variant, trial), "loop": med("loop_s", variant, trial),
                "alone": med("standalone_s", variant, trial), "startup": med("startup_s", variant, trial),
                "range": spread([r["in_report_per_eval_s"] for r in mine]),
            })
    report.tables.append(table)
    fixed = [r for r in rows if r["variant"] == "sweep default"]
    worst = max(statistics.median([r["over_standalone_per_eval_s"] for r in fixed if r["trial"] == t])
                for t in {r["trial"] for r in fixed})
    report.target("own loop's cost per eval over standalone, s (worst trial, median of repeats)",
                  worst, "<=", 0.1)
    if builtin:
        btable = Table(
            f"The built-in loop on ddp workers, {evals} evals per trial: trial wall (MLflow child run) "
            f"by poll (median of {repeats})",
            [Column("trial", "trial", "text"), Column("slow", "trial s, Ray's 2 s poll"),
             Column("fast", "trial s, sweep default"), Column("saved", "s saved / eval", "number")])
        for trial in sorted({b["trial"] for b in builtin}):
            slow = med("trial_s", "ray default", trial, builtin)
            fast = med("trial_s", "sweep default", trial, builtin)
            btable.rows.append({"trial": trial, "slow": slow, "fast": fast, "saved": (slow - fast) / evals})
        report.tables.append(btable)
    report.notes.append(
        "start-up: from the MLflow child run's start (Tune starting the trial) to the loop's first line on "
        "rank 0; the trial's Tune actor, Ray Train's controller and worker group, torch's process group.")
    report.finish(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
