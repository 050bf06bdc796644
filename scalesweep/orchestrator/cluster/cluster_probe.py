"""The probe that ``scalesweep submit`` runs on a cluster before it submits a sweep: which
interpreter the head's Ray workers run, its Python, and which of scalesweep's dependencies
import there, with their versions. One JSON line marked :data:`MARK` carries the answer back
through the job's logs.

This file is the probe job's whole working_dir. It is run by the interpreter of the head's Ray
workers, which may lack everything scalesweep needs (that is what it looks for), so it imports
nothing of scalesweep and, at module level, only the standard library. The client side (the
probe job's entrypoint, the comparison with this machine, the messages) is
``scalesweep.orchestrator.cluster.cluster_python``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import sys
import time
from typing import Any

MARK = "@@scalesweep-probe@@ "
#: what scalesweep imports on the cluster (pyproject.toml's dependencies): import name ->
#: distribution, whose metadata gives the version when the module has no ``__version__``
PACKAGES: dict[str, str] = {
    "torch": "torch", "mlflow": "mlflow", "ray": "ray", "ray.train": "ray", "pydantic": "pydantic",
    "yaml": "PyYAML", "numpy": "numpy", "pandas": "pandas", "matplotlib": "matplotlib",
    "sklearn": "scikit-learn",
}


def interpreter() -> dict[str, Any]:
    """This process's interpreter: its path, version and the site flags a copy must repeat."""
    # Ray starts workers with the ``-S``/``-s`` flags ``ray start`` ran with; the job must too
    flags = [f for f, on in (("-S", sys.flags.no_site), ("-s", sys.flags.no_user_site)) if on]
    return {"executable": sys.executable, "python": list(sys.version_info[:3]), "flags": flags}


def _dist_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def packages(do_import: bool) -> dict[str, dict[str, Any]]:
    """For each of :data:`PACKAGES`: whether it imports (or, without ``do_import``, whether it
    is installed), its version, and the error that stopped it."""
    out: dict[str, dict[str, Any]] = {}
    for name, dist in PACKAGES.items():
        entry: dict[str, Any] = {"imports": False, "version": None, "error": None}
        if do_import:
            # a real import: an installed package can still fail to load (a missing shared
            # library, a numpy it was not built against), and the job would fail the same way
            try:
                module = importlib.import_module(name)
                entry["imports"] = True
                version = getattr(module, "__version__", None)
                entry["version"] = version if isinstance(version, str) else _dist_version(dist)
            except BaseException as exc:  # anything an import raises is the answer
                entry["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        else:
            try:
                found = importlib.util.find_spec(name) is not None
            except (ImportError, ValueError):
                found = False
            entry["imports"] = found
            entry["version"] = _dist_version(dist) if found else None
            if not found:
                entry["error"] = f"ModuleNotFoundError: No module named {name!r}"
        out[name] = entry
    return out


def report() -> dict[str, Any]:
    """What a Ray task on the head reports: its interpreter and the packages it can import."""
    start = time.monotonic()
    found = packages(do_import=True)
    return {**interpreter(), "packages": found, "import_s": round(time.monotonic() - start, 2)}


def main(argv: list[str]) -> int:
    """Run :func:`report` as a Ray task on this node and print it, marked. ``argv[1]`` says how
    the entrypoint found the interpreter running this (``raylet`` or ``PATH``)."""
    start = time.monotonic()
    out: dict[str, Any] = {"found_by": argv[1] if len(argv) > 1 else "",
                           "driver_executable": sys.executable, "error": None}
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    except BaseException as exc:  # no Ray here: say what this interpreter has
        out.update(report())
        out["error"] = f"cannot import ray ({type(exc).__name__}: {exc})".splitlines()[0]
        print(MARK + json.dumps(out), flush=True)
        return 0
    try:
        ray.init(address=os.environ.get("RAY_ADDRESS") or "auto", logging_level=logging.WARNING,
                 log_to_driver=False)
        # a task, not this process: what Ray's workers run is what the sweep's trials will
        # run; pinned to this node (the head, where the job's driver runs too), with no CPUs
        # so that a busy cluster cannot keep it waiting
        here = ray.get_runtime_context().get_node_id()
        task = ray.remote(report).options(
            num_cpus=0, max_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False))
        connected = time.monotonic()
        found: dict[str, Any] = ray.get(task.remote(), timeout=240)
        out.update(found)
        # where a slow probe spends its time: connecting, the task (a worker's start and the
        # imports), and the imports alone
        out["connect_s"] = round(connected - start, 2)
        out["task_s"] = round(time.monotonic() - connected, 2)
    except BaseException as exc:  # the client reports it, with the interpreter
        out.update(interpreter())
        out["error"] = f"the probe's Ray task failed ({type(exc).__name__}: {exc})".splitlines()[0]
    print(MARK + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
