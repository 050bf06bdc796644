"""Sweeps whose driver runs on a Ray cluster's head node.

* ``scalesweep submit SWEEP --address http://HEAD:8265``: a Ray job (the Jobs API) whose
  entrypoint is ``<python> -m scalesweep run SWEEP --address auto ...``; its logs stream back and
  its exit code is ours. ``<python>`` is the interpreter of the head's Ray workers, by its
  absolute path, found by a probe job first (``cluster_python``): the shell's ``python`` there
  need not be it, nor have torch. A cluster whose workers lack a dependency gets nothing.
* ``scalesweep run SWEEP --address ray://HEAD:10001`` (Ray Client): the same run, as one task
  pinned to the head (``scalesweep.orchestrator.launch.client_run``, above this stage, with what
  it ships from here).

Both validate the sweep here first (exit 2, nothing submitted), then ship a snapshot of the
project (the ``working_dir`` of the runtime env) with the sweep file and its recipe, copied in
when they live outside the project. MLflow is written from the head, so the tracking URI must
make sense there: an MLflow server the head can reach, or an absolute path on the head.

Token authentication (Ray >= 2.52; on by default for new local clusters since 2.59): Ray's own
clients send ``Authorization: Bearer <token>`` only when this process runs with
``RAY_AUTH_MODE=token``, with the token from ``RAY_AUTH_TOKEN``, the file named by
``RAY_AUTH_TOKEN_PATH``, or ``~/.ray/auth_token`` (in that order). :func:`auth_token` follows the
same sources, and also treats an explicitly given ``RAY_AUTH_TOKEN``/``RAY_AUTH_TOKEN_PATH`` (or
the default file, for a cluster on this machine's loopback) as meaning token mode when
``RAY_AUTH_MODE`` is unset, as Ray does for ``address="auto"``. The default file is never sent to
another host unless ``RAY_AUTH_MODE=token`` says so.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scalesweep.mlflow_names import DEFAULT_TRACKING_URI
from scalesweep.orchestrator.cluster import upload
from scalesweep.orchestrator.cluster.cluster_python import Verdict
from scalesweep.orchestrator.cluster.ray_auth import (
    AUTH_HINT,
    auth_token,
    host_of,
    is_loopback,
)
from scalesweep.orchestrator.spec.errors import InputError, Problem
from scalesweep.orchestrator.tracking import atomic_file, credentials, store_check

#: the checkout this code runs from (an editable install), or None for a plain install
PROJECT_ROOT: Path | None = (
    Path(__file__).resolve().parents[3]
    if (Path(__file__).resolve().parents[3] / "pyproject.toml").is_file() else None)
PACKAGES = ("scalesweep",)
STAGE = "_scalesweep_submit"  # inside the shipped tree: sweep/recipe files from elsewhere
SUMMARY_MARK = "@@scalesweep-summary@@ "
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
#: the probe job starts a driver and one task, and imports torch, mlflow, ... there
PROBE_TIMEOUT_S = 300.0
#: the driver's "report: <path>" line (commands/_common.finish); that path is in the job's working_dir
REPORT_LINE = re.compile(r"^report: (\S.*)$")


# -- what gets shipped -----------------------------------------------------------------------


@dataclass
class Shipment:
    """A snapshot of the project in a temporary directory, plus how to name the sweep there."""

    directory: Path
    sweep: str  # the sweep file, relative to the shipped tree
    overrides: list[str] = field(default_factory=list)  # --set values, recipe path fixed up


def _inside(path: Path, root: Path | None) -> Path | None:
    if root is None:
        return None
    try:
        return path.resolve().relative_to(root)
    except ValueError:
        return None


def project_manifest(root: Path | None = None) -> upload.Manifest:
    """What `submit` uploads of the project: the checkout (root), else the installed package."""
    root = root or PROJECT_ROOT
    if root is not None:
        return upload.manifest(root)
    package = Path(__import__("scalesweep").__file__ or "").parent
    return upload.manifest(package.parent, only=PACKAGES)


@contextlib.contextmanager
def shipment(sweep_path: str, overrides: list[str], recipe: Path | None,
             max_upload: int = upload.MAX_UPLOAD_BYTES, root: Path | None = None) -> Iterator[Shipment]:
    """The working_dir to ship: the project (:mod:`upload` says which files), the sweep file and
    its recipe (resolved here). More than ``max_upload`` bytes is exit 2, nothing uploaded."""
    root = root or PROJECT_ROOT
    files = project_manifest(root)
    if files.size > max_upload:
        biggest = sorted(files.files, key=lambda f: -f[1])[:5]
        raise InputError("submit", [Problem(
            "--max-upload", upload.human(max_upload),
            f"the upload would be {upload.human(files.size)} ({len(files.files)} files; the largest: "
            + ", ".join(f"{p} {upload.human(s)}" for p, s in biggest)
            + "): keep data out of the checkout (or in .gitignore), or raise --max-upload")])
    with tempfile.TemporaryDirectory(prefix="scalesweep-ship-") as tmp:
        tree = Path(tmp) / "project"
        tree.mkdir()
        upload.copy(files, tree)
        rel = _inside(Path(sweep_path), root)
        if rel is not None and not (tree / rel).is_file():  # in the checkout but ignored by git
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(sweep_path, tree / rel)
        if rel is None:
            (tree / STAGE).mkdir(exist_ok=True)
            shutil.copy2(sweep_path, tree / STAGE / Path(sweep_path).name)
            rel = Path(STAGE) / Path(sweep_path).name
        out = list(overrides)
        if recipe is not None:
            rrel = _inside(recipe, root)
            if rrel is not None and not (tree / rrel).is_file():
                (tree / rrel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(recipe, tree / rrel)
            if rrel is None:
                (tree / STAGE / "recipes").mkdir(parents=True, exist_ok=True)
                rrel = Path(STAGE) / "recipes" / recipe.name
                shutil.copy2(recipe, tree / rrel)
            # where the head would otherwise look first (its cwd, then the sweep's directory)
            # may hold a different file of that name: name the one resolved here explicitly
            out.append(f"recipe={rrel.as_posix()}")
        yield Shipment(tree, rel.as_posix(), out)


def _resolved_recipe(sweep: Any, sweep_path: str) -> Path | None:
    from scalesweep.orchestrator.spec.load import recipe_candidates

    if sweep.spec.recipe is None:
        return None
    return next((c.resolve() for c in recipe_candidates(sweep.spec.recipe, Path(sweep_path))
                 if c.is_file()), None)


def _tracking_problems(uri: str) -> list[Problem]:
    """A store the head can use, written as MLflow reads it (store_check.py; the store itself
    is the cluster's to reach): a server, or an absolute path (a relative one would live in the
    job's temporary working directory and vanish with it)."""
    form = store_check.form_problem(uri)
    if form is not None:
        return [Problem("--tracking-uri", uri, form)]
    if uri.lower().startswith("sqlite:///") and not uri[len("sqlite:///"):].startswith("/"):
        return [Problem("--tracking-uri", uri,
                        "the sweep's driver runs on the cluster, so a relative local store would be "
                        "made in the job's temporary directory and lost; pass an MLflow server the "
                        "head can reach (--tracking-uri http://HOST:5000) or an absolute path there, "
                        "sqlite:////PATH")]
    return []


def validate_here(sweep_path: str, overrides: list[str], tracking_uri: str,
                  arg_problems: list[Problem]) -> tuple[Any, Path | None]:
    """The sweep loaded and the URI's form checked on this machine, before anything is shipped
    (exit 2 naming every problem); its resolved recipe, to ship beside it."""
    from scalesweep.orchestrator.spec.load import load_sweep

    problems = arg_problems + _tracking_problems(tracking_uri)
    try:
        sweep = load_sweep(sweep_path, overrides)
    except InputError as exc:
        raise InputError(exc.source, [*problems, *exc.problems]) from None
    if problems:
        raise InputError("scalesweep", problems)
    return sweep, _resolved_recipe(sweep, sweep_path)


def job_env_vars(tracking_uri: str) -> dict[str, str]:
    """The job's environment: the tracking URI's credentials (never in the entrypoint, which
    the dashboard shows), and the storage root as the head sees it."""
    env = {"PYTHONUNBUFFERED": "1", **credentials.job_env(tracking_uri)}
    # SCALESWEEP_STORAGE as the cluster's nodes see it; unset, the head's own environment decides
    for key in ("SCALESWEEP_STORAGE", "SCALESWEEP_DEBUG"):
        if os.environ.get(key):
            env[key] = os.environ[key]
    return env


def warn_loopback_tracking(address: str, tracking_uri: str) -> None:
    if tracking_uri.startswith(("http://", "https://")) and is_loopback(host_of(tracking_uri)) \
            and not is_loopback(host_of(address)):
        print(f"warning: --tracking-uri {tracking_uri} names a loopback address, which on the "
              "cluster is the head itself", file=sys.stderr)


# -- scalesweep submit -----------------------------------------------------------------------


def submit(args: argparse.Namespace) -> int:
    """``scalesweep submit``: returns the job's exit code (see module docs)."""
    address = args.address or os.environ.get("RAY_ADDRESS", "")
    uri = credentials.strip(args.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
                            or DEFAULT_TRACKING_URI)
    arg_problems = []
    try:
        max_upload = upload.parse_size(args.max_upload)
    except ValueError:
        arg_problems.append(Problem("--max-upload", args.max_upload, "a size: bytes, or a number "
                                    "with KB, MB or GB (e.g. 500MB)"))
        max_upload = upload.MAX_UPLOAD_BYTES
    if args.dry_run:
        return _dry_run(args, uri, arg_problems, max_upload)
    if not address.startswith(("http://", "https://")):
        arg_problems.append(Problem(
            "--address", address or None,
            "submit needs the Ray dashboard's address, http://HEAD:8265 (`scalesweep run "
            "--address` takes auto, host:port or ray://host:10001)"))
    sweep, recipe = validate_here(args.sweep, list(args.set), uri, arg_problems)
    warn_loopback_tracking(address, uri)
    client = _jobs_client(address)
    python = _probe_python(client, address)  # exit 2 where the workers' python cannot run it
    with shipment(args.sweep, list(args.set), recipe, max_upload) as ship:
        entrypoint = _entrypoint(ship, uri, args.verbose, bool(args.summary_json), python.command)
        job_id = f"scalesweep-{sweep.spec.name}-{uuid.uuid4().hex[:8]}"
        client.submit_job(
            entrypoint=entrypoint, submission_id=job_id,
            runtime_env={"working_dir": str(ship.directory), "env_vars": job_env_vars(uri)},
            metadata={"scalesweep.sweep": sweep.spec.name, "scalesweep.file": args.sweep})
    print(f"submitted Ray job {job_id} to {address}: {entrypoint.split(';')[0]}", flush=True)
    print("following its logs (Ctrl-C stops the job)", flush=True)
    try:
        printed = _follow(client, job_id)
        info = _wait_terminal(client, job_id, timeout_s=120.0)
    except KeyboardInterrupt:
        print(f"\nstopping job {job_id} ...", file=sys.stderr, flush=True)
        client.stop_job(job_id)
        with contextlib.suppress(Exception):
            info = _wait_terminal(client, job_id, timeout_s=30.0)
            print(f"job {job_id}: {info.status}", file=sys.stderr)
        raise
    logs = client.get_job_logs(job_id)
    _print_rest(logs, printed)
    code = job_exit_code(info)
    status = str(getattr(info.status, "value", info.status))
    print(f"job {job_id} {status}" + (f" (exit code {code})" if code else ""), flush=True)
    if code and info.message:
        print(f"ray: {info.message}", file=sys.stderr)
    _where_results_are(logs, uri)
    if args.summary_json and _write_summary(logs, args.summary_json):
        print(f"summary: {Path(args.summary_json).resolve()}", flush=True)
    return code


def _where_results_are(logs: str, uri: str) -> None:
    """Where the user finds the report: the MLflow parent run, not the head's job directory
    (the paths the driver printed are inside the job's temporary working_dir)."""
    from scalesweep.orchestrator.tracking.sweep_runs import PARENT_RUN_PATTERN, parent_run_line

    parents = PARENT_RUN_PATTERN.findall(logs)
    if not parents:
        return
    parent = parents[-1]
    lines = logs.splitlines()
    logged = any(REPORT_LINE.match(ln) for ln in lines)
    print(parent_run_line(parent, uri) + (
        ": the report is logged there as artifacts report/ (report.html, figures, trials.csv)"
        if logged else ""), flush=True)
    print(f"write the report here: scalesweep report --run-id {parent} --tracking-uri {uri}",
          flush=True)


def _probe_python(client: Any, address: str) -> Verdict:
    """Run the probe job (cluster_python explains why and how) and judge its report: raises
    InputError (exit 2) for what the cluster's workers cannot run, prints the warnings, and
    returns the interpreter the sweep's job is to run with."""
    from scalesweep.orchestrator.cluster import cluster_probe
    from scalesweep.orchestrator.cluster.cluster_python import (
        SCRIPT,
        check,
        describe,
        local_report,
        parse_report,
        probe_entrypoint,
    )

    start = time.monotonic()
    job_id = f"scalesweep-probe-{uuid.uuid4().hex[:8]}"
    print(f"checking the Python of the Ray workers at {address} (probe job {job_id}) ...", flush=True)
    # only the probe's own file: no project tree to pack and upload, nothing of ours to import
    with tempfile.TemporaryDirectory(prefix="scalesweep-probe-") as tmp:
        shutil.copyfile(cluster_probe.__file__, Path(tmp) / SCRIPT)
        client.submit_job(entrypoint=probe_entrypoint(), submission_id=job_id,
                          runtime_env={"working_dir": tmp, "env_vars": {"PYTHONUNBUFFERED": "1"}},
                          metadata={"scalesweep.probe": "python"})
    try:
        info = _wait_terminal(client, job_id, timeout_s=PROBE_TIMEOUT_S)
    except KeyboardInterrupt:
        client.stop_job(job_id)
        raise
    status = str(getattr(info.status, "value", info.status))
    if status not in TERMINAL:
        client.stop_job(job_id)
        raise RuntimeError(f"the probe job {job_id} on {address} did not finish in "
                           f"{PROBE_TIMEOUT_S:.0f} s ({status}; `ray job logs {job_id}` says "
                           "why); nothing was submitted")
    logs = client.get_job_logs(job_id)
    remote = parse_report(logs)
    if remote is None:
        tail = "\n".join(f"  | {ln}" for ln in logs.splitlines()[-15:])
        raise RuntimeError(f"the probe job {job_id} on {address} ended {status} without reporting "
                           f"the cluster's Python ({info.message or 'no message'}); its log "
                           f"ends:\n{tail}\nnothing was submitted")
    # the probe job stays in the cluster's job list (metadata scalesweep.probe): deleting it
    # races the job manager's last status write, which can put it back
    verdict = check(address, remote, local_report())
    if verdict.problems:
        raise verdict.error()
    for warning in verdict.warnings:
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    took = time.monotonic() - start
    parts = [f"{label} {remote[key]:.1f} s" for key, label in (
        ("connect_s", "driver connecting"), ("task_s", "task"), ("import_s", "imports in it"))
        if isinstance(remote.get(key), int | float)]
    print(f"{describe(verdict)} (probed in {took:.1f} s" + (f": {', '.join(parts)}" if parts else "")
          + ")", flush=True)
    return verdict


def job_exit_code(info: Any) -> int:
    """0 for SUCCEEDED; else the driver's own exit code where Ray kept it, else 1."""
    status = str(getattr(info.status, "value", info.status))
    if status == "SUCCEEDED":
        return 0
    code = getattr(info, "driver_exit_code", None)
    return code if isinstance(code, int) and 0 < code < 256 else 1


def _dry_run(args: argparse.Namespace, uri: str, problems: list[Problem], max_upload: int) -> int:
    """``submit --dry-run``: what would be uploaded and run; nothing is contacted or submitted."""
    _, recipe = validate_here(args.sweep, list(args.set), uri, problems)
    files = project_manifest()
    print(files.describe())
    with shipment(args.sweep, list(args.set), recipe, max_upload) as ship:  # exit 2 if too big
        command = _entrypoint(ship, uri, args.verbose, bool(args.summary_json), ["python"])
    print(f"upload: {upload.human(files.size)} of at most {upload.human(max_upload)} (--max-upload)")
    print(f"the job would run: {command}")
    if credentials.job_env(uri):
        print("tracking credentials: passed in the job's environment, not in its command")
    return 0


def _jobs_client(address: str) -> Any:
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    token = auth_token(address)
    headers = {"Authorization": f"Bearer {token}"} if token else None
    try:
        return JobSubmissionClient(address, headers=headers)
    except AuthenticationError as exc:
        first = str(exc).splitlines()[0]
        raise RuntimeError(f"{first}; {AUTH_HINT} (nothing was submitted)") from None
    except ConnectionError as exc:
        raise RuntimeError(f"cannot reach the Ray Jobs API at {address} ({exc}); is the head's "
                           "dashboard running there? (nothing was submitted)") from None


def _entrypoint(ship: Shipment, uri: str, verbose: bool, summary: bool, python: list[str]) -> str:
    """The job's shell command; ``python`` is the probed interpreter of the head's Ray workers,
    by its absolute path, not the shell's ``python`` (whatever comes first on the head's PATH)."""
    cmd = [*python, "-m", "scalesweep", "run", ship.sweep, "--address", "auto",
           "--tracking-uri", uri]
    for item in ship.overrides:
        cmd += ["--set", item]
    if verbose:
        cmd.append("--verbose")
    if not summary:
        return shlex.join(cmd)
    # the summary is written on the head; it comes back as one marked line of the logs
    path = f"{STAGE}/summary.json"
    emit = (f"import json,os,sys; p=sys.argv[1]; os.path.exists(p) and "
            f"print({SUMMARY_MARK!r} + json.dumps(json.load(open(p))))")
    return (f"{shlex.join([*cmd, '--summary-json', path])}; rc=$?; "
            f"{shlex.join([*python, '-c', emit, path])}; exit $rc")


def _follow(client: Any, job_id: str) -> int:
    """Stream the job's logs to stdout until it ends; returns how many characters came."""
    count = 0
    pending = ""

    async def tail() -> None:
        nonlocal count, pending
        async for chunk in client.tail_job_logs(job_id):
            count += len(chunk)
            pending += chunk
            *lines, pending = pending.split("\n")
            for line in lines:
                _show(line)

    try:
        asyncio.run(tail())
    except (RuntimeError, OSError) as exc:  # the websocket dropped: the rest comes at the end
        print(f"(log stream interrupted: {exc}; waiting for the job)", file=sys.stderr, flush=True)
    if pending:
        _show(pending)
    return count


def _show(line: str) -> None:
    """One line of the job's log, as the user should read it here."""
    if line.startswith(SUMMARY_MARK):
        return
    if REPORT_LINE.match(line):
        # a path in the job's temporary working_dir on the head: useless here
        line = ("report: made on the head and logged on the MLflow parent run (artifacts "
                "report/); how to get it here is printed at the end")
    print(line, flush=True)


def _print_rest(logs: str, printed: int) -> None:
    for line in logs[printed:].splitlines():
        _show(line)


def _wait_terminal(client: Any, job_id: str, timeout_s: float) -> Any:
    end = time.monotonic() + timeout_s
    while True:
        info = client.get_job_info(job_id)
        if str(getattr(info.status, "value", info.status)) in TERMINAL or time.monotonic() > end:
            return info
        time.sleep(0.5)


def _write_summary(logs: str, path: str) -> bool:
    lines = [ln for ln in logs.splitlines() if ln.startswith(SUMMARY_MARK)]
    if not lines:
        print(f"warning: the job wrote no summary, so {path} was not written", file=sys.stderr)
        return False
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    # whole or not at all: a full disk must not leave half a JSON where the user's script reads
    atomic_file.write_text(path, json.dumps(json.loads(lines[-1][len(SUMMARY_MARK):]), indent=1))
    return True
