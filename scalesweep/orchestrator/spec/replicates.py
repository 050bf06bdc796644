"""Adaptive seeds in the sweep file: what ``replicates`` must satisfy, and the seed axis it
stands for (docs/design.md §4, "Adaptive seeds")."""

from __future__ import annotations

from scalesweep.orchestrator.spec.errors import Problem
from scalesweep.orchestrator.spec.schema import SweepSpec


def problems(spec: SweepSpec) -> list[Problem]:
    """``replicates`` numbers the seeds itself: seeds listed by hand too would be two answers
    to one question (and random search draws its own trials, not paired seeds)."""
    rep = spec.replicates
    if rep is None:
        return []
    out = []
    if "seed" in spec.axes.model_fields_set:
        out.append(Problem("axes.seed", spec.axes.seed, "give seeds by hand or adaptive replicates "
                           f"(replicates: {{min: {rep.min}, max: {rep.max}}}), not both: replicates "
                           "runs seeds first_seed, first_seed + 1, ... itself"))
    if spec.search.type != "grid":
        out.append(Problem("search.type", spec.search.type, "adaptive replicates need a grid search "
                           "(every arm with the same seeds, paired by seed number)"))
    if spec.search.trial_scheduler != "fifo":
        out.append(Problem("search.trial_scheduler", spec.search.trial_scheduler,
                           "adaptive replicates decide "
                           "from whole trials; an early-stopping scheduler would cut them short"))
    return out


def expand(spec: SweepSpec) -> SweepSpec:
    """The spec with every seed adaptive replicates may run (first_seed .. first_seed + max - 1)
    on the seed axis; the launcher decides which of them run."""
    rep = spec.replicates
    if rep is None:
        return spec
    axes = spec.axes.model_copy(update={"seed": list(range(rep.first_seed, rep.first_seed + rep.max))})
    return spec.model_copy(update={"axes": axes})
