"""The store a read (report, results, predict, advise, ui, studies) reads from: one that exists
and answers, checked before MLflow opens it (MLflow would make an empty SQLite file), and, when
it is not there or holds no such study, the studies the user could have meant: those the store
holds, and those the sweeps under ./scalesweep_runs recorded with their URIs."""

from __future__ import annotations

import json
import os
from pathlib import Path

from scalesweep.mlflow_names import store_uri_for_mlflow
from scalesweep.orchestrator.spec.errors import InputError, Problem

#: how many names a hint lists before "..."
SHOWN = 8


def check_readable(uri: str) -> None:
    """``uri`` a store a read can use, else an ``InputError`` (exit 2) that names it and the
    studies recorded under the working directory's sweep state."""
    from scalesweep.orchestrator.tracking.store_check import check_store

    try:
        check_store(uri, reading=True)
    except InputError as exc:
        hint = recorded_hint()
        if not hint:
            raise
        raise InputError(exc.source, [Problem(p.path, p.value, f"{p.rule}; {hint}")
                                      for p in exc.problems]) from None


def held_hint(uri: str) -> str:
    """The studies the store at ``uri`` holds, as a hint after "no such study"."""
    from mlflow.tracking import MlflowClient

    try:
        client = MlflowClient(store_uri_for_mlflow(uri))
        names = [e.name for e in client.search_experiments() if e.name != "Default"]
    except Exception:  # a hint must not hide the problem it follows
        return ""
    said = f"this store holds {_listed(names)}" if names else "this store holds no study"
    recorded = recorded_hint()
    return f"{said}; {recorded}" if recorded else said


#: launch/run.py's state file and default storage root, named here because importing that
#: module imports MLflow, which costs seconds on a path whose point is to answer fast
#: (tests/unit/test_store_check.py holds them equal)
STATE_FILE = "scalesweep.json"
STORAGE_ENV, STORAGE_DEFAULT = "SCALESWEEP_STORAGE", "scalesweep_runs"


def storage_root() -> Path:
    """Where sweeps keep their state when their sweep file names no storage_path."""
    return Path(os.environ.get(STORAGE_ENV, STORAGE_DEFAULT)).resolve()


def recorded_hint() -> str:
    """What the sweeps under the sweep state directory (./scalesweep_runs, or
    SCALESWEEP_STORAGE) recorded: each study's experiment and tracking URI."""
    root = storage_root()
    found = recorded_studies(root)
    if not found:
        return ""
    shown = _listed([f"{name} at {uri}" for name, uri in found])
    return f"the sweeps under {root} recorded {shown}"


def recorded_studies(root: Path) -> list[tuple[str, str]]:
    """(experiment, tracking URI) of each sweep and solve whose state is under ``root``,
    without repeats, in name order."""
    from scalesweep.orchestrator.launch.solve_state import SOLVE_STATE

    found: set[tuple[str, str]] = set()
    for state in [*root.glob(f"*/{STATE_FILE}"), *root.glob(f"*/{SOLVE_STATE}")]:
        try:
            data = json.loads(state.read_text(encoding="utf-8"))
            found.add((str(data["experiment"]), str(data["tracking_uri"])))
        except (OSError, ValueError, KeyError, TypeError):  # torn or foreign: not a hint
            continue
    return sorted(found)


def _listed(items: list[str]) -> str:
    more = len(items) - SHOWN
    return ", ".join(items[:SHOWN]) + (f" and {more} more" if more > 0 else "")
