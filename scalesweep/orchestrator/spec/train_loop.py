"""A user's own Ray Train loop as the sweep's workload (``workload: {train_loop: ...}``): what
the sweep file must say for it, checked before anything starts (exit 2).

The planner needs of a workload only its training-set size (updates per epoch, the warmup in
epochs, the total updates of ``training.epochs``) and its dev metrics (the target's direction);
a loop's come from the sweep file (:class:`LoopWorkload`). The loop itself is imported here
once, so that a path that names nothing callable is refused before Ray starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scalesweep.orchestrator.spec.errors import Problem
from scalesweep.orchestrator.spec.schema import SweepSpec
from scalesweep.trainables.user_loop import TrainLoopError, resolve_train_loop
from scalesweep.trainables.workloads.base import Direction

#: a loop that says nothing of its metrics reports dev_loss, lower is better
DEFAULT_METRICS: dict[str, Direction] = {"loss": "min"}
#: training settings only the built-in loop acts on; a train_loop gets grad_clip in its config
BUILTIN_LOOP_ONLY = ("dtype", "fuse", "fuse_max_samples", "divergence_threshold",
                     "checkpoint_every", "checkpoint_every_s")
TRAIN_SIZE_RULE = ("a train_loop must give its training-set size (workload.train_size: N): plan "
                   "counts updates per epoch from it, floor(ceil(N / world_size) / "
                   "(per_worker_batch x accum_grad)) as DistributedSampler shards N samples, "
                   "for every trial's warmup in epochs, total updates and evaluation cadence")


@dataclass(frozen=True)
class LoopWorkload:
    """What the planner knows of a train_loop: the sizes and metrics the sweep file gives."""

    path: str
    size: int
    metrics: Mapping[str, Direction] = field(default_factory=lambda: dict(DEFAULT_METRICS))
    #: no suggested recipe: the sweep file (or its recipe) gives optimizer, schedule, batch
    defaults: Mapping[str, Any] = field(default_factory=dict)

    def train_size(self) -> int:
        return self.size


def with_loop_backend(spec: SweepSpec) -> SweepSpec:
    """A train_loop's sweep without a backend of its own runs ddp (the default, simulate, is
    the protocol's)."""
    if spec.workload.train_loop is None or "backend" in spec.model_fields_set:
        return spec
    return spec.model_copy(update={"backend": "ddp"})


def make(spec: SweepSpec, problems: list[Problem]) -> LoopWorkload | None:
    """The loop's :class:`LoopWorkload`; None (and problems) when it cannot run."""
    w = spec.workload
    assert w.train_loop is not None
    found = len(problems)
    try:
        resolve_train_loop(w.train_loop)
    except TrainLoopError as exc:
        problems.append(Problem("workload.train_loop", w.train_loop, str(exc)))
    if w.train_size is None:
        problems.append(Problem("workload.train_size", None, TRAIN_SIZE_RULE))
    metrics = dict(w.metrics) if w.metrics is not None else dict(DEFAULT_METRICS)
    if "loss" not in metrics:
        problems.append(Problem("workload.metrics", w.metrics, "must include loss (every report "
                                "carries dev_loss)"))
    problems.extend(_backend_problems(spec))
    if len(problems) > found or w.train_size is None:
        return None
    return LoopWorkload(path=w.train_loop, size=w.train_size, metrics=metrics)


def _backend_problems(spec: SweepSpec) -> list[Problem]:
    """What a loop of the user's cannot do: run simulated, or take a batch-size ramp."""
    problems = []
    if spec.backend == "simulate" and "backend" in spec.model_fields_set:
        problems.append(Problem("backend", spec.backend, (
            "a train_loop runs as Ray Train's train_loop_per_worker, on real workers: use ddp "
            "(or auto). simulate needs a workload of the protocol (docs/workloads.md); a loop "
            "can still play V virtual ranks on fewer workers with "
            "scalesweep.loop_helpers.VirtualRanks and physical_workers")))
    ramp_axis = "training.batch_ramp"
    if spec.training.batch_ramp not in (None, "none") or ramp_axis in spec.axes.free_axes():
        value = spec.axes.free_axes().get(ramp_axis, spec.training.batch_ramp)
        problems.append(Problem(ramp_axis, value, "a train_loop runs at one world size; batch-size "
                                "ramps need a workload of the protocol"))
    return problems


def notes(spec: SweepSpec) -> list[str]:
    """The sweep's settings a train_loop does not act on unless it reads them itself."""
    given = [f"training.{k}" for k in BUILTIN_LOOP_ONLY if k in spec.training.model_fields_set]
    if spec.stop_at_target:
        given.append("stop_at_target")
    if not given:
        return []
    return [f"{', '.join(given)}: the built-in loop's settings; the train_loop "
            f"{spec.workload.train_loop} runs as it is written (its config has grad_clip)"]
