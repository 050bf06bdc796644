"""What every benchmark shares: the machine description, tables, results files, temp stores.

Every comparison is a ratio taken within one run, its variants interleaved (A, B, A, B, ...) and
repeated, because the machine is shared and absolute timings drift with its load; the load
average is recorded before and after each benchmark, next to its numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from scalesweep.orchestrator.spec.files import dump_yaml

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SWEEPS = ROOT / "sweeps"

#: how a column's values are checked by the quick test: "text" anything; "positive" a finite
#: number > 0 (a time, a rate, a ratio of times); "number" finite (a difference may be < 0).
Kind = Literal["text", "positive", "number"]


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, Any]:
    import mlflow
    import ray
    import torch

    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem_gib = float("nan")
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(mem_gib, 1),
        "cpu": _cpu_model(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "ray": ray.__version__,
        "mlflow": mlflow.__version__,
        "git_commit": commit,
    }


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def spread(xs: Sequence[float]) -> str:
    """min-max of the repeats, to show how noisy a median is."""
    return f"{min(xs):.3g}-{max(xs):.3g}" if xs else ""


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


@dataclass
class Column:
    key: str
    label: str
    kind: Kind = "positive"
    fmt: str = ".3g"


@dataclass
class Table:
    title: str
    columns: list[Column]
    rows: list[dict[str, Any]] = field(default_factory=list)

    def markdown(self) -> str:
        head = "| " + " | ".join(c.label for c in self.columns) + " |"
        rule = "|" + "|".join("---" if c.kind == "text" else "---:" for c in self.columns) + "|"
        body = ["| " + " | ".join(_cell(r.get(c.key), c) for c in self.columns) + " |" for r in self.rows]
        return "\n".join([f"**{self.title}**", "", head, rule, *body])

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "columns": [c.__dict__ for c in self.columns], "rows": self.rows}


def _cell(value: Any, col: Column) -> str:
    if value is None:
        return ""
    if isinstance(value, bool) or col.kind == "text" or not isinstance(value, int | float):
        return str(value)
    return format(value, col.fmt)


@dataclass
class Target:
    what: str
    value: float
    target: str  # e.g. ">= 10"
    met: bool

    def line(self) -> str:
        return f"{'MET ' if self.met else 'MISSED'}  {self.what}: {self.value:.3g} (target {self.target})"


@dataclass
class Report:
    name: str
    quick: bool
    tables: list[Table] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    #: the script's own flags beyond --quick, for the command line the results show
    flags: str = ""
    #: every measurement the tables were computed from, for the JSON
    raw: dict[str, Any] = field(default_factory=dict)
    load_before: list[float] = field(default_factory=load)
    started: float = field(default_factory=time.time)
    _t0: float = field(default_factory=time.perf_counter)

    def target(self, what: str, value: float, op: Literal[">=", "<="], bound: float) -> None:
        met = math.isfinite(value) and (value >= bound if op == ">=" else value <= bound)
        self.targets.append(Target(what, value, f"{op} {bound:g}", met))

    def finish(self, out_dir: Path) -> Path:
        """Print the tables and write <out_dir>/<name>.md and .json; returns the .md path."""
        wall = time.perf_counter() - self._t0
        m = machine()
        info: dict[str, Any] = {
            "benchmark": self.name,
            "mode": "quick" if self.quick else "full",
            "date": dt.datetime.fromtimestamp(self.started, dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": m,
            "load_before": self.load_before,
            "load_after": load(),
            "wall_s": round(wall, 1),
            "command": f".venv/bin/python -m benchmarks.{self.name}" + (" --quick" if self.quick else "")
            + self.flags,
            "settings": self.settings,
        }
        lines = [
            f"# benchmarks.{self.name}" + (" (quick)" if self.quick else ""),
            "",
            f"`{info['command']}` — {info['date']}, {wall:.0f} s",
            "",
            f"Machine: {m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB; Python {m['python']}, "
            f"torch {m['torch']}, Ray {m['ray']}, MLflow {m['mlflow']}; commit {m['git_commit']}. "
            f"Load average (1/5/15 min) before {self.load_before}, after {info['load_after']}.",
            "",
        ]
        for table in self.tables:
            lines += [table.markdown(), ""]
        if self.targets:
            lines += ["**Targets**", "", *[f"- {t.line()}" for t in self.targets], ""]
        if self.notes:
            lines += ["**Notes**", "", *[f"- {n}" for n in self.notes], ""]
        text = "\n".join(lines)
        print(text)
        out_dir.mkdir(parents=True, exist_ok=True)
        md = out_dir / f"{self.name}.md"
        md.write_text(text)
        payload = {
            **info,
            "tables": [t.to_json() for t in self.tables],
            "raw": self.raw,
            "targets": [t.__dict__ for t in self.targets],
            "notes": self.notes,
        }
        (out_dir / f"{self.name}.json").write_text(json.dumps(payload, indent=1, default=_json_default))
        return md


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)


def parse_args(
    doc: str | None,
    argv: Sequence[str] | None = None,
    extra: Callable[[argparse.ArgumentParser], None] | None = None,
) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes, seconds: proves the script works")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results directory (default benchmarks/results, or benchmarks/results/quick)",
    )
    p.add_argument("--repeats", type=int, default=None, help="repeats of each interleaved variant")
    if extra:
        extra(p)
    args = p.parse_args(argv)
    if args.out is None:
        args.out = RESULTS / "quick" if args.quick else RESULTS
    return args


# -- isolated stores and Ray -----------------------------------------------------------------


@contextlib.contextmanager
def sandbox(prefix: str) -> Iterator[Path]:
    """A temp directory holding the sweep storage (SCALESWEEP_STORAGE) and any MLflow sqlite
    store; the working directory moves there too (reports/ and mlruns/ land inside)."""
    tmp = Path(tempfile.mkdtemp(prefix=f"scalesweep-bench-{prefix}-"))
    saved = {k: os.environ.get(k) for k in ("SCALESWEEP_STORAGE", "MLFLOW_TRACKING_URI")}
    cwd = os.getcwd()
    os.environ["SCALESWEEP_STORAGE"] = str(tmp / "runs")
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    os.chdir(tmp)
    try:
        yield tmp
    finally:
        os.chdir(cwd)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(tmp, ignore_errors=True)


def sqlite_uri(path: Path) -> str:
    return f"sqlite:///{path}"


def cli_env(**extra: str) -> dict[str, str]:
    """The environment a benchmark runs the CLI in: no MLFLOW_* variable of the caller's (the
    benchmark names its own store), no Ray usage stats, unbuffered output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update({"RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"}, **extra)
    return env


def start_ray() -> None:
    """Ray as ``scalesweep run`` connects to it (scalesweep.orchestrator.launch.run.connect_ray),
    so sweeps and the bare Ray baselines share one cluster: a local Ray of our own, or, with
    ``RAY_ADDRESS`` set (and ``RAY_AUTH_TOKEN`` where that cluster wants one), that cluster, as
    the CLI sweeps the benchmarks start join it too; the quick-mode tests run on their session's
    Ray head this way, and timings then leave out Ray's own start-up. Stop it with
    ``ray.shutdown()``."""
    from scalesweep.orchestrator.launch.run import connect_ray

    connect_ray(None, verbose=False)


def write_yaml(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_yaml(data, sort_keys=False))
    return path


@contextlib.contextmanager
def quiet(log_path: Path) -> Iterator[None]:
    """Send what a sweep prints (progress lines, Ray's chatter) to a log file."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        yield


#: where a sweep's wall time goes, in order (see :func:`sweep_run`)
PHASES = ("validate", "plan", "mlflow_start", "tune_start", "trials", "tune_end", "finish")


def sweep_run(
    sweep: str | Path, overrides: list[str], tracking_uri: str, log: Path
) -> tuple[float, Any, dict[str, float]]:
    """``scalesweep run`` in process (``scalesweep.orchestrator.launch.run.run_sweep``): (wall
    seconds, Outcome, phases). Phases, from timestamps taken by wrappers around the runner's steps
    (nothing of the product is changed): validate (load_sweep), plan (make_plan), mlflow_start (tracker and
    parent run), tune_start (launch until Tune starts the first trial), trials (first trial
    start to last trial end, as the sweep callback sees them), tune_end (until launch returns),
    finish (summaries, MLflow summaries and run ends, until run_sweep returns)."""
    from scalesweep.orchestrator.launch import run as runner
    from scalesweep.orchestrator.launch import tune as tune_launch
    from scalesweep.orchestrator.tracking.callback import SweepCallback
    from scalesweep.orchestrator.tracking.tracker import SweepTracker

    marks: dict[str, list[float]] = {}

    def mark(name: str) -> None:
        marks.setdefault(name, []).append(time.perf_counter())

    def wrap(owner: Any, attr: str, name: str) -> Callable[[], None]:
        original = getattr(owner, attr)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            mark(f"{name}>")
            try:
                return original(*args, **kwargs)
            finally:
                mark(f"{name}<")

        setattr(owner, attr, wrapper)
        return lambda: setattr(owner, attr, original)

    undo = [
        wrap(runner, "load_sweep", "validate"),
        wrap(runner, "make_plan", "plan"),
        wrap(SweepTracker, "__init__", "tracker"),
        wrap(SweepTracker, "start_parent", "parent"),
        wrap(tune_launch, "launch", "launch"),
        wrap(SweepCallback, "on_trial_start", "trial_start"),
        wrap(SweepCallback, "on_trial_complete", "trial_end"),
        wrap(SweepCallback, "on_trial_error", "trial_end"),
    ]
    try:
        with quiet(log):
            t0 = time.perf_counter()
            outcome = runner.run_sweep(
                str(sweep), overrides=overrides, address=None, tracking_uri=tracking_uri
            )
            t1 = time.perf_counter()
    finally:
        for u in reversed(undo):
            u()
    bad = [t["name"] for t in outcome.trials if t["status"] not in ("completed", "stopped")]
    if bad:
        raise RuntimeError(f"trials {bad} did not complete; see {log}")

    def first(key: str) -> float:
        return min(marks[key])

    def last(key: str) -> float:
        return max(marks[key])

    phases = {
        "validate": last("validate<") - first("validate>"),
        "plan": last("plan<") - first("plan>"),
        "mlflow_start": (last("tracker<") - first("tracker>")) + (last("parent<") - first("parent>")),
        "tune_start": first("trial_start>") - first("launch>"),
        "trials": last("trial_end<") - first("trial_start>"),
        "tune_end": last("launch<") - last("trial_end<"),
        "finish": t1 - last("launch<"),
    }
    return t1 - t0, outcome, phases


def trial_spans(tracking_uri: str, outcome: Any) -> dict[str, float]:
    """Trial name -> seconds its MLflow child run was open: the sweep callback creates it at
    Tune's on_trial_start and ends it at on_trial_complete, so this is the trial's whole life
    as the sweep driver sees it (actor start, workers, loop, reports)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    spans = {}
    for t in outcome.trials:
        info = client.get_run(t["mlflow_run_id"]).info
        spans[t["name"]] = (info.end_time - info.start_time) / 1000.0
    return spans


def say(text: str) -> None:
    """Progress on stderr (stdout is for the table)."""
    print(f"[{time.strftime('%H:%M:%S')} load {load()[0]}] {text}", file=sys.stderr, flush=True)
