"""Logging cost per update: synchronous per-result MLflow logging against our batched tracker.

The simulate loop (``scalesweep.trainables.loop.train``, ``LocalWorld``, one thread) trains
``mlp_regression`` at world size 4 and hands every eval's metrics to a logger, at eval cadences
1, 10, 100 and the default (every 0.5 epoch = 16 updates here). Loggers, all on one sqlite store:

* ``ray_sync``: what Ray's ``MLflowLoggerCallback`` does per result, through Ray's own helper
  (``ray.air._internal.mlflow._MLflowLoggerUtil.log_metrics``): a ``get_run`` to check the run
  exists, then one ``log_metric`` request per key;
* ``batch_sync``: one ``log_batch`` request per eval (``mlflow.log_metrics``' behaviour);
* ``ours``: ``scalesweep.orchestrator.tracking.tracker.SweepTracker`` as the sweep callback drives it:
  ``add_result`` (with the write-ahead journal line) and ``maybe_flush`` per eval, one
  ``log_batch`` per run every 2 s, and the final ``flush`` at the end (counted);
* ``none``: the loop alone, for its time per update.

Every logger gets the same metric dict (``curve_metrics`` of the report: what goes on the run's
charts); Ray's real callback also logs Tune's own numeric result keys, ~2x as many. The time
spent inside the logger calls is measured exactly (perf_counter around them) and divided by the
updates; its share of the loop's time per update is computed against the ``none`` runs of the
same repeat. For the workload of the WeNet study (mini_asr at V=4: eval every 32 updates), the
share uses its loop time per update measured here and the per-eval cost measured on the same
store.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks._common import (
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
)
from scalesweep.orchestrator.tracking.tracker import SweepTracker, curve_metrics
from scalesweep.trainables import loop
from scalesweep.trainables.config import TrialConfig
from scalesweep.trainables.world import LocalWorld

NAME = "logging_cost"
LOGGERS = ("none", "ray_sync", "batch_sync", "ours")


class Logger:
    """One trial's logging, timed: ``log(metrics)`` per eval, ``close()`` at the end."""

    def __init__(self, kind: str, uri: str, tmp: Path, tag: str) -> None:
        self.kind, self.seconds, self.evals = kind, 0.0, 0
        self._log: Callable[[int, dict[str, float]], None] = lambda step, m: None
        self._close: Callable[[], None] = lambda: None
        if kind == "ray_sync":
            from ray.air._internal.mlflow import _MLflowLoggerUtil

            util = _MLflowLoggerUtil()
            util.setup_mlflow(tracking_uri=uri, experiment_name="bench-logging-ray")
            run_id = util.start_run(run_name=tag).info.run_id
            self._log = lambda step, m: util.log_metrics(step=step, metrics_to_log=m, run_id=run_id)
        elif kind == "batch_sync":
            from mlflow.entities import Metric
            from mlflow.tracking import MlflowClient

            client = MlflowClient(uri)
            exp = client.get_experiment_by_name("bench-logging-batch")
            exp_id = exp.experiment_id if exp else client.create_experiment("bench-logging-batch")
            run_id = client.create_run(exp_id, run_name=tag).info.run_id

            def log_batch(step: int, m: dict[str, float]) -> None:
                ts = int(time.time() * 1000)
                client.log_batch(run_id, metrics=[Metric(k, v, ts, step) for k, v in m.items()])

            self._log = log_batch
        elif kind == "ours":
            tracker = SweepTracker(uri, "bench-logging-ours", journal=tmp / f"{tag}.journal.jsonl")
            parent = tracker.start_parent({}, {})
            run_id = tracker.child(parent, tag, {})

            def add(step: int, m: dict[str, float]) -> None:
                tracker.add_result(run_id, step, m)
                tracker.maybe_flush()

            def close() -> None:
                tracker.flush(raise_on_error=True)

            self._log, self._close = add, close

    def log(self, metrics: dict[str, Any]) -> None:
        t0 = time.perf_counter()
        self._log(int(metrics["update"]), curve_metrics(metrics))
        self.seconds += time.perf_counter() - t0
        self.evals += 1

    def close(self) -> None:
        t0 = time.perf_counter()
        self._close()
        self.seconds += time.perf_counter() - t0


def trial(workload: str, options: dict[str, Any], world: int, updates: int, every: int) -> TrialConfig:
    return TrialConfig(
        name=f"log-{workload}-{every}",
        workload=workload,
        workload_options=options,
        world_size=world,
        physical_workers=1,
        per_worker_batch=16,
        optimizer={"type": "adam", "lr": 1e-3},
        scheduler={"type": "constant"},
        total_updates=updates,
        eval_every=every,
        checkpoint_every=0,
    )


def run(cfg: TrialConfig, logger: Logger) -> float:
    """Train with ``logger`` on every report; returns the loop's seconds (logging included)."""
    result = loop.train(cfg, LocalWorld(), on_report=lambda metrics, checkpoint: logger.log(metrics))
    logger.close()
    return float(result["train_seconds"])


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(__doc__, argv)
    quick = args.quick
    torch.set_num_threads(1)
    repeats = args.repeats or (1 if quick else 3)
    mlp = {"train_size": 256, "dev_size": 64} if quick else {}
    # (cadence label, eval every, updates): enough evals at each cadence to average over
    cadences = (
        [("1", 1, 8), ("default", 4, 8)]
        if quick
        else [("1", 1, 100), ("10", 10, 1000), ("default (0.5 epoch)", 16, 1000), ("100", 100, 3000)]
    )
    asr_opts = (
        {"train_size": 128, "dev_size": 16, "d_model": 32, "num_blocks": 1} if quick else {"train_size": 4096}
    )
    asr_world, asr_every, asr_updates = (2, 2, 4) if quick else (4, 32, 32)
    report = Report(
        NAME,
        quick,
        settings={
            "repeats": repeats,
            "world_size": 4,
            "workload": "mlp_regression",
            "cadences": cadences,
            "mini_asr": {"options": asr_opts, "eval_every": asr_every, "updates": asr_updates},
        },
    )
    rows: list[dict[str, Any]] = []
    asr_loop: list[float] = []
    with sandbox(NAME) as tmp:
        uri = sqlite_uri(tmp / "mlflow.db")
        # warm-up: schema creation, imports, first requests (quick: none, nothing is measured)
        for kind in LOGGERS if not quick else ():
            run(trial("mlp_regression", mlp, 4, 4, 1), Logger(kind, uri, tmp, f"warmup-{kind}"))
        for rep in range(repeats):
            for label, every, updates in cadences:
                say(f"{NAME}: repeat {rep + 1}/{repeats}, eval every {every}")
                order = LOGGERS[rep % 4 :] + LOGGERS[: rep % 4]
                for kind in order:
                    logger = Logger(kind, uri, tmp, f"r{rep}-{every}-{kind}")
                    loop_s = run(trial("mlp_regression", mlp, 4, updates, every), logger)
                    rows.append(
                        {
                            "rep": rep,
                            "cadence": label,
                            "every": every,
                            "updates": updates,
                            "kind": kind,
                            "loop_s": loop_s,
                            "log_s": logger.seconds,
                            "evals": logger.evals,
                        }
                    )
            say(f"{NAME}: repeat {rep + 1}/{repeats}, mini_asr loop")
            asr = trial("mini_asr", asr_opts, asr_world, asr_updates, asr_every)
            asr_loop.append(run(asr, Logger("none", uri, tmp, "asr")) / asr_updates)

    def base_per_update(rep: int, label: str) -> float:
        r = next(r for r in rows if r["rep"] == rep and r["cadence"] == label and r["kind"] == "none")
        return float(r["loop_s"] / r["updates"])

    alone_ms = 1000 * median([base_per_update(r, cadences[0][0]) for r in range(repeats)])
    table = Table(
        f"mlp_regression V=4 (loop alone ~{alone_ms:.2g} ms/update), median of {repeats} interleaved repeats",
        [
            Column("cadence", "eval every", "text"),
            Column("kind", "logger", "text"),
            Column("evals", "evals", "text"),
            Column("per_eval_ms", "ms per eval"),
            Column("per_update_ms", "ms per update"),
            Column("pct", "% of loop time"),
            Column("vs_ours", "x ours"),
            Column("range", "% range", "text"),
        ],
    )
    per_eval_default: dict[str, float] = {}
    for label, _every, _updates in cadences:
        ours = [r for r in rows if r["cadence"] == label and r["kind"] == "ours"]
        for kind in LOGGERS[1:]:
            rs = [r for r in rows if r["cadence"] == label and r["kind"] == kind]
            pcts = [100 * r["log_s"] / r["updates"] / base_per_update(r["rep"], label) for r in rs]
            per_eval = median([r["log_s"] / r["evals"] for r in rs])
            if label.startswith("default"):
                per_eval_default[kind] = per_eval
            table.rows.append(
                {
                    "cadence": label,
                    "kind": kind,
                    "evals": rs[0]["evals"],
                    "per_eval_ms": 1000 * per_eval,
                    "per_update_ms": 1000 * median([r["log_s"] / r["updates"] for r in rs]),
                    "pct": median(pcts),
                    "vs_ours": median(
                        [ratio(r["log_s"], o["log_s"]) for r in rs for o in ours if o["rep"] == r["rep"]]
                    ),
                    "range": spread(pcts),
                }
            )
            if kind == "ours" and label.startswith("default"):
                report.target(
                    "ours, % of mlp_regression loop time at the default cadence", median(pcts), "<=", 2.0
                )
    asr_per_update = median(asr_loop)
    t2 = Table(
        f"The WeNet study's workload: mini_asr V={asr_world}, eval every {asr_every} updates (0.5 epoch), "
        f"loop {asr_per_update:.3g} s/update",
        [
            Column("kind", "logger", "text"),
            Column("per_eval_ms", "ms per eval (measured above)"),
            Column("pct", "% of loop time"),
        ],
    )
    for kind in LOGGERS[1:]:
        pct = 100 * per_eval_default[kind] / asr_every / asr_per_update
        t2.rows.append({"kind": kind, "per_eval_ms": 1000 * per_eval_default[kind], "pct": pct})
        if kind == "ours":
            report.target("ours, % of mini_asr loop time at the default cadence", pct, "<=", 2.0)
    report.tables += [table, t2]
    report.raw = {"mlp_runs": rows, "mini_asr_loop_s_per_update": asr_loop}
    report.notes.append(
        "In a sweep the loggers run in the sweep driver, not in the trial's process; "
        "on a 2-core machine they still take CPU from the trials, and a slow callback "
        "delays Tune's handling of every trial's results."
    )
    report.finish(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
