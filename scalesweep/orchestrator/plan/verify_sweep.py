"""`scalesweep predict --verify OUT.yaml`: the smallest sweep that checks a prediction at M
(docs/beyond.md, "Predict, then verify").

The study's own sweep file (found by scalesweep.orchestrator.launch.study_source, as `resume`
finds it: the sweep directory's copy and the overrides it ran with; else the file the parent
run's ``sweep_file`` tag names), narrowed to
world size M plus the reference (and the baseline's), the lr rules to the predicted ones plus
linear and sqrt, with adaptive seeds (the study's own ``replicates``, else ``DEFAULT_REPLICATES``;
a fixed ``FIXED_SEEDS`` where the search cannot take them). Its target is the study's resolved
value, so the verification is measured against the very target the prediction is for, and its
name is the study's, so its trials log to the study's experiment, where `predict --ledger`
scores the prediction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalesweep.orchestrator.spec.errors import InputError
from scalesweep.orchestrator.spec.files import dump_yaml, load_mapping
from scalesweep.orchestrator.spec.load import apply_overrides, load_sweep, parse_overrides, recipe_candidates

#: adaptive seeds where the study had none: three to start, more only where undecided
DEFAULT_REPLICATES = {"min": 3, "max": 6}
#: seeds where adaptive ones cannot run (random search, early stopping)
FIXED_SEEDS = [0, 1, 2]
#: every verification runs these lr rules besides the predicted ones (the two common answers)
ALWAYS_RULES = ("linear", "sqrt")
#: the verification trains this far past the widest predicted interval's end: a median seed
#: that never reached by then lies beyond the interval (a miss), not merely beyond the study's
#: own horizon (censored: the ledger cannot tell)
PAST_INTERVAL = 1.1
#: its epochs are rounded up to this
EPOCHS_STEP = 0.25


@dataclass(frozen=True)
class StudySource:
    """Where the study's sweep file was found, and the overrides it ran with."""

    path: Path
    overrides: list[str]
    how: str


def verification_spec(source: StudySource, *, experiment: str, world_size: int,
                      rules: Sequence[str], target_value: float | None,
                      interval_end: float | None = None,
                      verifies: str | None = None) -> dict[str, Any]:
    """The sweep file (as a mapping) that checks the prediction at ``world_size``;
    ``interval_end``: the largest predicted interval's upper end, in epochs, which the
    verification trains past (a study counted in epochs only); ``verifies``: the study's
    parent run id, which tags the verification's parent run."""
    data = load_mapping(source.path)
    problems = apply_overrides(data, parse_overrides(source.overrides))
    if problems:
        raise InputError(str(source.path), problems)
    study = load_sweep(source.path, source.overrides)
    keep = {world_size}
    if study.reference_world_size is not None:
        keep.add(study.reference_world_size)
    baseline = data.get("baseline")
    if isinstance(baseline, dict) and isinstance(baseline.get("world_size"), int):
        keep.add(baseline["world_size"])
    wanted = set(rules) | set(ALWAYS_RULES)
    if isinstance(baseline, dict) and isinstance(baseline.get("scaling_rule"), str):
        wanted.add(baseline["scaling_rule"])  # the baseline trial must stay in the grid
    axes = dict(data["axes"])
    axes["world_size"] = sorted(keep)
    axes["scaling_rule"] = sorted(wanted)
    recipe = data.get("recipe")
    if isinstance(recipe, str) and not Path(recipe).is_absolute():
        found = next((p for p in recipe_candidates(recipe, source.path) if p.is_file()), None)
        data["recipe"] = str((found or Path(recipe)).resolve())
    search = data.get("search") or {}
    adaptive = search.get("type", "grid") == "grid" and search.get("scheduler", "fifo") == "fifo"
    if adaptive:
        axes.pop("seed", None)
        data["replicates"] = data.get("replicates") or dict(DEFAULT_REPLICATES)
    else:
        axes["seed"] = list(FIXED_SEEDS)
        data.pop("replicates", None)
    data["axes"] = axes
    data["exclude"] = [e for e in data.get("exclude", []) if _inside(e, axes)]
    if not data["exclude"]:
        data.pop("exclude")
    if target_value is not None:
        target = dict(data.get("target") or {})
        target.pop("relative_to_baseline", None)
        target["value"] = target_value
        data["target"] = target
    if study.training.max_updates is None:
        _train_past(data, study.training.epochs, interval_end)
    data["name"] = experiment
    if verifies is not None:
        data["verifies"] = verifies
    else:
        data.pop("verifies", None)
    data["description"] = (f"verification of `scalesweep predict` at world size {world_size} "
                           f"(lr rules {', '.join(sorted(rules))}) for study {experiment}")
    return data


def _train_past(data: dict[str, Any], epochs: float | None, interval_end: float | None) -> None:
    """Lengthen training.epochs to PAST_INTERVAL x the interval's end where the study's is
    shorter (a study bounded by max_updates keeps its length)."""
    if epochs is None or interval_end is None or not math.isfinite(interval_end):
        return
    needed = math.ceil(PAST_INTERVAL * interval_end / EPOCHS_STEP) * EPOCHS_STEP
    if needed > epochs:
        data["training"] = {**dict(data.get("training") or {}), "epochs": needed}


def _inside(entry: Any, axes: dict[str, Any]) -> bool:
    """An exclude entry that names only values still on the axes (the rest exclude nothing)."""
    if not isinstance(entry, dict):
        return True
    for key, value in entry.items():
        values = axes.get(key)
        if isinstance(values, list) and value not in values:
            return False
    return True


def write_spec(data: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(dump_yaml(data, sort_keys=False), encoding="utf-8")
