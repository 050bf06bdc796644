"""The ``reference_job:`` block: the real job a study stands in for, with what the recipe holds
(batch per GPU, accumulation, epochs, warmup) filled in and checked against it (docs/design.md
§4.3, "Regime"). Resolved when the sweep is loaded, so a contradiction is exit 2 before anything
starts; `plan` computes the job's regime from it (scalesweep/orchestrator/plan/regime.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scalesweep.orchestrator.spec.errors import InputError, Problem
from scalesweep.orchestrator.spec.schema import SweepSpec
from scalesweep.science import schedules


@dataclass(frozen=True)
class ReferenceJob:
    """The real job a study stands in for; None where neither the block nor the recipe says."""

    label: str
    dataset_size: int
    gpus: Mapping[int, int]
    epochs: float | None
    per_gpu_batch: int | None
    accum_grad: int
    warmup_steps: int | None

    @property
    def missing(self) -> list[str]:
        """The reference_job fields still unknown (its regime cannot be computed without them)."""
        return [f for f in ("epochs", "per_gpu_batch", "warmup_steps") if getattr(self, f) is None]


def _recipe_value(recipe: Mapping[str, Any] | None, path: str) -> Any:
    section, _, key = path.partition(".")
    return None if recipe is None else recipe.get(section, {}).get(key)


def reference_job(spec_: SweepSpec, recipe: Mapping[str, Any] | None, scheduler: Mapping[str, Any],
                  source: str) -> ReferenceJob | None:
    """The sweep's ``reference_job`` with what the recipe holds filled in; a value given in
    both that disagrees is exit 2. A value neither gives (e.g. a --set schedule whose warmup the
    recipe does not have) or a world size without its GPUs leaves the job's regime unknown
    there, said by `plan`, never a reason to refuse the sweep."""
    spec = spec_.reference_job
    if spec is None:
        return None
    problems: list[Problem] = []
    warmup_param = schedules.SCHEDULE_TYPES[schedules.canonical_name(
        str(scheduler["type"]))].warmup_param
    values: dict[str, Any] = {}
    for field, recipe_path in (("epochs", "training.epochs"), ("per_gpu_batch", "training.per_worker_batch"),
                               ("accum_grad", "training.accum_grad"),
                               ("warmup_steps", f"scheduler.{warmup_param}")):
        given, from_recipe = getattr(spec, field), _recipe_value(recipe, recipe_path)
        if given is not None and from_recipe is not None and given != from_recipe:
            problems.append(Problem(f"reference_job.{field}", given,
                                    f"contradicts the recipe's {recipe_path} ({from_recipe}): the "
                                    "reference job is the job the recipe describes"))
        value = given if given is not None else from_recipe
        values[field] = 1 if field == "accum_grad" and value is None else value
    if problems:
        raise InputError(source, problems)
    return ReferenceJob(label=spec.label, dataset_size=spec.dataset_size, gpus=dict(spec.gpus), **values)
