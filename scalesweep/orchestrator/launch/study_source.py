"""Where a finished study's sweep file is (for `predict --verify`): the copy its sweep
directory keeps, with the overrides it ran with, as `resume` reads it; else the file the
parent run's ``sweep_file`` tag names."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from scalesweep.mlflow_names import SWEEP_FILE_TAG
from scalesweep.orchestrator.launch.run import STATE_FILE
from scalesweep.orchestrator.plan.verify_sweep import StudySource
from scalesweep.orchestrator.spec.errors import InputError, Problem
from scalesweep.orchestrator.spec.files import load_mapping


def find_study_spec(parent_run_id: str, experiment: str, tags: dict[str, str],
                    storage_roots: Sequence[Path]) -> StudySource:
    """The copy in the sweep directory ``<root>/<experiment>-<parent id[:8]>`` (its state file,
    as `run` writes it), else the tagged file; exit 2 naming both when neither is there."""
    tagged = tags.get(SWEEP_FILE_TAG)
    roots = list(storage_roots)
    if tagged and Path(tagged).is_file():
        own = load_mapping(tagged).get("storage_path")
        if isinstance(own, str):
            roots.insert(0, Path(own).resolve())
    dirs = [r / f"{experiment}-{parent_run_id[:8]}" for r in roots]
    for d in dirs:
        if (d / STATE_FILE).is_file():
            state = json.loads((d / STATE_FILE).read_text(encoding="utf-8"))
            copy = Path(str(state[SWEEP_FILE_TAG]))
            if copy.is_file():
                return StudySource(copy, list(state.get("overrides", [])), f"sweep directory {d}")
    if tagged and Path(tagged).is_file():
        return StudySource(Path(tagged), [], f"the parent run's {SWEEP_FILE_TAG} tag")
    raise InputError("predict --verify", [Problem(
        f"parent run {parent_run_id} tag {SWEEP_FILE_TAG}", tagged,
        "the study's sweep file is not there, and no sweep directory holds its copy ("
        + ", ".join(str(d / STATE_FILE) for d in dirs) + "): run from where the study ran, or "
        "set SCALESWEEP_STORAGE to its storage root")])
