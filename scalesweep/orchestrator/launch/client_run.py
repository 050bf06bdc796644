"""``scalesweep run SWEEP --address ray://HEAD:10001`` (Ray Client): the whole run as one task
pinned to the head, from the project snapshot ``submit`` ships; the summary comes back here.

It lives in launch, above cluster, because it runs the sweep loop (``run.run_sweep``) on the
head; what it ships and how it authenticates are cluster's (``submit``, ``ray_auth``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scalesweep.orchestrator.cluster.ray_auth import enable_token_auth
from scalesweep.orchestrator.cluster.submit import (
    job_env_vars,
    shipment,
    validate_here,
    warn_loopback_tracking,
)
from scalesweep.orchestrator.spec.errors import InputError
from scalesweep.orchestrator.tracking import atomic_file

# The head starts one "specific" Ray Client server per connection. On a starved head that
# process can die before it serves anyone: Ray then answers "Starting Ray client server failed"
# (the reason stays in ray_client_server_<port>.err on the head), or, when it dies while the
# proxy reads its command line, passes on psutil's ZombieProcess/NoSuchProcess. Nothing has run
# on the cluster yet, so connecting again -- a new server on the next port -- is safe.
CLIENT_CONNECT_ATTEMPTS = 3
_SERVER_DID_NOT_START = ("Starting Ray client server failed", "Proxy failed to Connect to backend",
                         "psutil.ZombieProcess", "psutil.NoSuchProcess")


def connect_client(init: Callable[[], object], *, reset: Callable[[], object],
                   attempts: int = CLIENT_CONNECT_ATTEMPTS) -> None:
    """``init()`` (a Ray Client ``ray.init``), again after ``reset()`` while the head's client
    server failed to start, ``attempts`` times in all; any other failure at once."""
    for attempt in range(1, attempts + 1):
        try:
            init()
            return
        except ConnectionAbortedError as exc:
            if attempt == attempts or not any(m in str(exc) for m in _SERVER_DID_NOT_START):
                raise
            print(f"warning: the head's Ray Client server did not start (attempt {attempt} of "
                  f"{attempts}); connecting again", file=sys.stderr, flush=True)
            with contextlib.suppress(Exception):
                reset()


def run_via_client(path: str, *, overrides: list[str], address: str, tracking_uri: str,
                   summary_json: str | None, verbose: bool) -> Any:
    """``run`` through Ray Client: the whole run is one task on the head, in the shipped tree.

    A Ray Client driver cannot run the sweep itself: Tune moves its driver to the head then,
    and the MLflow callback's state would never come back. So the head runs ``run_sweep`` and
    returns its ``Outcome``; the summary JSON is written here.
    """
    sweep, recipe = validate_here(path, overrides, tracking_uri, [])
    warn_loopback_tracking(address, tracking_uri)
    enable_token_auth(address)
    import ray
    from ray.exceptions import RayTaskError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    with shipment(path, overrides, recipe) as ship:
        runtime_env = {"working_dir": str(ship.directory), "env_vars": job_env_vars(tracking_uri)}
        connect_client(lambda: ray.init(address=address, runtime_env=runtime_env,
                                        logging_level=logging.WARNING, log_to_driver=True),
                       reset=ray.shutdown)
    head = next((n["NodeID"] for n in ray.nodes()
                 if n.get("Alive") and "node:__internal_head__" in n.get("Resources", {})), None)
    strategy = NodeAffinitySchedulingStrategy(head, soft=False) if head else "DEFAULT"
    print(f"sweep {sweep.spec.name}: its driver runs on the head of {address}", flush=True)
    task = ray.remote(_run_on_head).options(num_cpus=0, max_retries=0, scheduling_strategy=strategy)
    ref = task.remote(ship.sweep, ship.overrides, tracking_uri, verbose)
    try:
        outcome = ray.get(ref)
    except KeyboardInterrupt:
        ray.cancel(ref, force=True)
        raise
    except RayTaskError as exc:  # input and tracking problems keep their exit codes
        if isinstance(exc.cause, InputError):
            raise exc.cause from None
        raise
    if summary_json:
        Path(summary_json).parent.mkdir(parents=True, exist_ok=True)
        atomic_file.write_text(summary_json, json.dumps(outcome.trials, indent=1, default=str))
    return outcome


def _run_on_head(sweep: str, overrides: list[str], tracking_uri: str, verbose: bool) -> Any:
    from scalesweep.orchestrator.launch.run import run_sweep

    # A Ray worker's stdout/stderr are Ray's flushing wrappers around files opened "a", and
    # Tune pickles its callbacks (ours keeps sys.stdout) when it starts: cloudpickle can pickle
    # sys.stdout itself, not a wrapper of it. So the plain files, line-buffered, for this run.
    saved = sys.stdout, sys.stderr
    for name in ("stdout", "stderr"):
        inner = getattr(getattr(sys, name), "stream", None)
        if inner is not None and hasattr(inner, "reconfigure"):
            inner.reconfigure(line_buffering=True)
            setattr(sys, name, inner)
    try:
        # already inside the cluster: run_sweep's connect is a no-op here
        return run_sweep(sweep, overrides=overrides, address=None, tracking_uri=tracking_uri,
                         verbose=verbose)
    finally:
        sys.stdout, sys.stderr = saved
