"""Scale: a sweep of 100 small simulate trials, then the report and the MLflow UI's requests.

The sweep: ``mlp_regression``, simulate, ``axes.optimizer.lr`` with 25 values x world sizes
1, 2, 4, 8 = 100 trials of a few updates each, MLflow on sqlite. Timed, each the way a user
runs it (a subprocess of the CLI, Python start-up included):

* ``scalesweep plan SWEEP --json`` (and, in process, ``load_sweep`` + ``make_plan``);
* ``scalesweep run SWEEP`` (its own local Ray; it ends with the report on the parent run);
* ``scalesweep report --experiment NAME`` (MLflow -> tables and figures), repeated;
* against a ``mlflow server`` started here on 127.0.0.1 over the same store (stopped by its pid
  at the end): the REST requests the UI makes to show the study, repeated: the experiment
  page's run search (``runs/search`` is POST-only in MLflow's REST API, as the UI sends it),
  the parent's children (the UI expanding the parent run), one run's ``dev_loss`` history,
  the chart view's bulk history of ``dev_loss`` for every child, and the UI's index page.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks._common import (
    Column,
    Report,
    Table,
    cli_env,
    median,
    parse_args,
    sandbox,
    say,
    sqlite_uri,
    write_yaml,
)

NAME = "scale"


def sweep_file(tmp: Path, lrs: int, worlds: list[int], updates: int) -> Path:
    return write_yaml(
        tmp / "scale.yaml",
        {
            "name": "bench-scale",
            "workload": {"name": "mlp_regression"},
            "reference": {"world_size": worlds[0]},
            "target": {"metric": "dev_loss", "value": 0.5},
            "backend": "simulate",
            "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.9},
            "training": {"per_worker_batch": 16, "epochs": 100, "max_updates": updates, "eval_every": 2},
            "axes": {"world_size": worlds, "optimizer.lr": [round(0.002 * (i + 1), 4) for i in range(lrs)]},
        },
    )


def cli(*args: str, cwd: Path, timeout: float = 3600) -> tuple[float, subprocess.CompletedProcess[str]]:
    env = cli_env()
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "scalesweep", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(
            f"scalesweep {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return wall, proc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``mlflow server`` on 127.0.0.1 in its own session; stopped by its pid's process group."""

    def __init__(self, store: str, workdir: Path, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        log = (workdir / "mlflow-server.log").open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlflow",
                "server",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--backend-store-uri",
                store,
                "--workers",
                "1",
            ],
            cwd=workdir,
            env=env,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        end = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2):
                    break
            except OSError:
                if time.monotonic() > end or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(
                        f"mlflow server did not start; see {workdir / 'mlflow-server.log'}"
                    ) from None
                time.sleep(0.5)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def request(self, path: str, body: dict[str, Any] | None = None) -> tuple[float, bytes]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.url + path,
            data=data,
            method="POST" if data else "GET",
            headers={"Content-Type": "application/json"} if data else {},
        )
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=120) as resp:
            payload = resp.read()
        return time.perf_counter() - t0, payload


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(__doc__, argv)
    quick = args.quick
    # quick: one trial per world size, each step once (the tables filled, nothing measured)
    lrs, worlds, updates = (1, [1, 2], 4) if quick else (25, [1, 2, 4, 8], 8)
    n_trials = lrs * len(worlds)
    repeats = args.repeats or (1 if quick else 5)
    plans = 1 if quick else 3
    report = Report(
        NAME,
        quick,
        settings={
            "trials": n_trials,
            "lr_values": lrs,
            "world_sizes": worlds,
            "updates_per_trial": updates,
            "eval_every": 2,
            "repeats": repeats,
        },
    )
    steps = Table(
        f"{n_trials} simulate trials of mlp_regression ({updates} updates each), sqlite store",
        [
            Column("step", "step", "text"),
            Column("s", "wall s"),
            Column("per_trial", "s per trial"),
            Column("how", "how", "text"),
        ],
    )
    http = Table(
        f"MLflow server over that store: REST requests of the UI, median of {repeats} (max beside it)",
        [
            Column("what", "request", "text"),
            Column("ms", "median ms"),
            Column("max_ms", "max ms"),
            Column("kb", "response KiB"),
        ],
    )
    with sandbox(NAME) as tmp:
        store = sqlite_uri(tmp / "mlflow.db")
        sweep = sweep_file(tmp, lrs, worlds, updates)
        say(f"{NAME}: plan")
        plan_cli = [cli("plan", str(sweep), "--json", cwd=tmp)[0] for _ in range(plans)]
        from scalesweep.orchestrator.plan.rows import make_plan
        from scalesweep.orchestrator.spec.load import load_sweep

        plan_inproc = []
        for _ in range(plans):
            t0 = time.perf_counter()
            rows = make_plan(load_sweep(sweep)).rows
            plan_inproc.append(time.perf_counter() - t0)
        assert len(rows) == n_trials, f"the plan has {len(rows)} rows, not {n_trials}"
        say(f"{NAME}: run {n_trials} trials")
        run_s, _ = cli("run", str(sweep), "--tracking-uri", store, "--summary-json", "summary.json", cwd=tmp)
        trials = json.loads((tmp / "summary.json").read_text())
        loops = sum(t["train_seconds"] for t in trials)
        say(f"{NAME}: run took {run_s:.0f} s; reports")
        report_s = [
            cli(
                "report",
                "--experiment",
                "bench-scale",
                "--tracking-uri",
                store,
                "--out",
                str(tmp / f"report{i}"),
                cwd=tmp,
            )[0]
            for i in range(1 if quick else 3)
        ]
        steps.rows += [
            {
                "step": "plan (CLI, --json)",
                "s": median(plan_cli),
                "per_trial": median(plan_cli) / n_trials,
                "how": f"median of {plans}; Python and imports included",
            },
            {
                "step": "plan (in process)",
                "s": median(plan_inproc),
                "per_trial": median(plan_inproc) / n_trials,
                "how": f"load_sweep + make_plan, median of {plans}",
            },
            {
                "step": "run (CLI)",
                "s": run_s,
                "per_trial": run_s / n_trials,
                "how": f"Ray start, {n_trials} trials 2 at a time, MLflow, summary, report; trials' loops "
                f"sum to {loops:.1f} s",
            },
            {
                "step": "report (CLI)",
                "s": median(report_s),
                "per_trial": median(report_s) / n_trials,
                "how": f"median of {len(report_s)}: MLflow -> tables, figures, HTML",
            },
        ]
        report.settings["trial_loop_seconds_sum"] = loops
        report.raw.update(plan_cli_s=plan_cli, plan_inproc_s=plan_inproc, run_s=run_s, report_s=report_s)
        say(f"{NAME}: mlflow server")
        # quick: without MLflow's job consumers (processes the UI's requests do not use)
        server = Server(store, tmp, {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
                        if quick else None)
        try:
            exp = json.loads(
                server.request("/api/2.0/mlflow/experiments/get-by-name?experiment_name=bench-scale")[1]
            )
            exp_id = exp["experiment"]["experiment_id"]
            runs = json.loads(
                server.request(
                    "/api/2.0/mlflow/runs/search", {"experiment_ids": [exp_id], "max_results": 1000}
                )[1]
            )["runs"]
            parent = next(
                r["info"]["run_id"]
                for r in runs
                if any(
                    t["key"] == "scalesweep.role" and t["value"] == "parent"
                    for t in r["data"].get("tags", [])
                )
            )
            children = [r["info"]["run_id"] for r in runs if r["info"]["run_id"] != parent]
            bulk = urllib.parse.urlencode(
                [("run_ids", c) for c in children[:100]] + [("metric_key", "dev_loss"), ("max_results", 320)]
            )
            requests: list[tuple[str, Callable[[], tuple[float, bytes]]]] = [
                ("GET /health", lambda: server.request("/health")),
                ("GET / (the UI's page)", lambda: server.request("/")),
                (
                    "POST runs/search, the experiment (UI runs table, 100 rows)",
                    lambda: server.request(
                        "/ajax-api/2.0/mlflow/runs/search",
                        {
                            "experiment_ids": [exp_id],
                            "max_results": 100,
                            "order_by": ["attributes.start_time DESC"],
                        },
                    ),
                ),
                (
                    "POST runs/search, the parent's children",
                    lambda: server.request(
                        "/ajax-api/2.0/mlflow/runs/search",
                        {
                            "experiment_ids": [exp_id],
                            "max_results": 1000,
                            "filter": f"tags.`mlflow.parentRunId` = '{parent}'",
                        },
                    ),
                ),
                (
                    "GET metrics/get-history, one run's dev_loss",
                    lambda: server.request(
                        f"/ajax-api/2.0/mlflow/metrics/get-history?run_id={children[0]}&metric_key=dev_loss"
                    ),
                ),
                (
                    f"GET get-history-bulk-interval, dev_loss of {min(100, len(children))} runs (chart view)",
                    lambda: server.request(f"/ajax-api/2.0/mlflow/metrics/get-history-bulk-interval?{bulk}"),
                ),
            ]
            for _ in range(0 if quick else 1):  # warm-up, not measured (quick: nothing is)
                for _, fn in requests:
                    fn()
            times: dict[str, list[float]] = {label: [] for label, _ in requests}
            sizes: dict[str, int] = {}
            for _ in range(repeats):
                for label, fn in requests:
                    t, payload = fn()
                    times[label].append(t)
                    sizes[label] = len(payload)
            for label, _ in requests:
                http.rows.append(
                    {
                        "what": label,
                        "ms": 1000 * median(times[label]),
                        "max_ms": 1000 * max(times[label]),
                        "kb": max(sizes[label] / 1024, 0.001),
                    }
                )
            report.raw["http_s"] = times
            slowest = max(median(t) for t in times.values())
            report.target("slowest UI request over the study (its median), s", slowest, "<=", 1.0)
        finally:
            server.stop()
    report.target("report of the study, s", median(report_s), "<=", 30.0)
    report.tables += [steps, http]
    report.notes.append(
        "The 1 s (median request) and 30 s (report) bounds are ours; the issue sets no number for "
        "them. Single requests can take seconds when the shared machine's load spikes (the max column)."
    )
    report.finish(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
