"""A global batch that grows in stages, and the data plan of a trial: which world size, epoch,
schedule position and lr multiplier each optimizer update has. Pure: no torch, no Ray.

A ramp is written ``"4:1,8:1"``: 4 virtual ranks for 1 epoch, then 8 for 1 epoch, then the
trial's own world size for the rest of its epochs (GPT-3 and Megatron's ``rampup_batch_size``
grow the batch the same way, in samples). The batch changes only at epoch boundaries, which are
update boundaries: every epoch is then one whole pass of ``DistributedSampler(num_replicas=V)``
at a single V, so every sample is seen once per epoch whatever the stage, and the data order of
each epoch is the one plain DDP at that V would use. Stages are counted in whole epochs for the
same reason.

The trial's world size is the last stage, and what the sweep's rules resolved (optimizer lr,
schedule) is for it. An earlier stage of global batch B_s runs, with B the final batch:

- the lr times ``lr_factor(rule, B_s) / lr_factor(rule, B)``: the sweep's lr rule applied per
  stage (linear: B_s / B; sqrt: sqrt(B_s / B); none: 1);
- the schedule on a clock that follows the warmup rule: ``scaled`` counts the schedule in
  samples (each update advances it by B_s / B of a final-stage update, so the warmup covers the
  same samples however the batch grows, the correction Megatron-Bridge had to make to a warmup
  that ignored the ramp); ``fixed`` and an explicit count keep counting updates.

Where exactly on that clock: the original schedules count differently (WeNet's WarmupLR reads
step k at update k, DeepSpeed's warmups last_batch_iteration k - 2, LambdaLR-style schedules
k - 1: ``ScheduleType.counts_from`` o, the count being k - 1 + o). The position of update k is
the update whose count is o plus the clock summed over the updates before k plus o times
update k's own clock:

    position(k) = 1 - o + sum_{j<k} c_j + o c_k,

so a schedule's count grows with the samples, and a first stage at clock c = B_s / B runs the
lr of a trial at B_s with every count scaled by B / B_s (exactly, for a schedule whose shape
scales: linear warmups, WeNet's inverse square root; DeepSpeed's log warmup does not scale).
Without a ramp (c = 1) the position of update k is k.
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from scalesweep.science.batching import updates_per_epoch

__all__ = ["DataPlan", "Segment", "Stage", "check", "describe", "eval_due", "parse"]

_STAGE = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$")
#: what a ramp looks like, for error messages
SYNTAX = "'V:epochs,V:epochs,...' with world sizes rising below the trial's (e.g. '4:1,8:1')"


@dataclass(frozen=True)
class Stage:
    """``epochs`` whole epochs at ``world_size`` virtual ranks."""

    world_size: int
    epochs: int


def parse(text: str | None) -> tuple[Stage, ...]:
    """``"4:1,8:1"`` -> (Stage(4, 1), Stage(8, 1)); None, "" and "none": no ramp, ()."""
    if text is None or (isinstance(text, str) and text.strip().lower() in ("", "none")):
        return ()
    if not isinstance(text, str):
        raise ValueError(f"must be a string {SYNTAX} or none, but got {text!r}")
    stages = []
    for part in text.split(","):
        m = _STAGE.match(part)
        if m is None:
            raise ValueError(f"stage {part.strip()!r} of {text!r} is not V:epochs; a ramp is {SYNTAX}")
        stages.append(Stage(int(m.group(1)), int(m.group(2))))
    return tuple(stages)


def describe(stages: Sequence[Stage]) -> str:
    """The canonical spelling: ``"4:1,8:1"``; ``"none"`` for no ramp."""
    return ",".join(f"{s.world_size}:{s.epochs}" for s in stages) or "none"


def check(stages: Sequence[Stage], world_size: int, epochs: float | None) -> str | None:
    """Why ``stages`` cannot ramp up to ``world_size`` over ``epochs``; None when they can."""
    if not stages:
        return None
    sizes = [s.world_size for s in stages]
    if any(s.world_size < 1 or s.epochs < 1 for s in stages):
        return f"every stage needs a world size and epochs of at least 1, but got {describe(stages)}"
    if any(b <= a for a, b in itertools.pairwise(sizes)) or sizes[-1] >= world_size:
        return (f"world sizes must rise and stay below the trial's world_size({world_size}), "
                f"but got {sizes}")
    if epochs is None:
        return "stages are counted in epochs: set training.epochs"
    ramp_epochs = sum(s.epochs for s in stages)
    if ramp_epochs >= epochs:
        return (f"its stages take {ramp_epochs} epochs, which leaves nothing of training.epochs"
                f"({epochs:g}) for the trial's world_size({world_size})")
    return None


def eval_due(update: int, eval_every: int, first_update: int = 1) -> bool:
    """Whether ``update`` evaluates: every ``eval_every``-th update counted from
    ``first_update`` (a stage's first; 1 without a ramp). The one cadence of the built-in loop
    and of users' loops (scalesweep.trainables.stepping.report_due)."""
    return (update - first_update + 1) % eval_every == 0


@dataclass(frozen=True)
class Segment:
    """A run of updates at one world size."""

    world_size: int
    global_batch: int
    first_update: int  # 1-based, as the schedules count
    updates: int
    first_epoch: int  # the epoch its first update is in
    updates_per_epoch: int
    lr_multiplier: float  # on the lr the schedule gives
    clock: float  # schedule position gained per update
    clock_before: float  # the clock summed over the updates before it
    eval_every: int  # updates between evaluations within the segment
    samples_before: int  # samples of the updates before it

    @property
    def last_update(self) -> int:
        return self.first_update + self.updates - 1


class StagePlan(Protocol):
    """One stage of a ramp as the planner resolved it (the final stage is the trial itself):
    what ``DataPlan`` reads of a ``scalesweep.trainables.config.RampStage``."""

    @property
    def world_size(self) -> int: ...
    @property
    def epochs(self) -> int: ...
    @property
    def lr_multiplier(self) -> float: ...
    @property
    def clock(self) -> float: ...
    @property
    def eval_every(self) -> int: ...


class DataPlan:
    """The updates of one trial: its ramp's stages, then its own world size up to
    ``total_updates``. Without stages, one segment: update k is at position k, in epoch
    (k - 1) // updates_per_epoch, with the trial's batch and lr, as before ramps existed."""

    def __init__(
        self,
        *,
        dataset_size: int,
        per_worker_batch: int,
        accum_grad: int,
        world_size: int,
        total_updates: int,
        eval_every: int,
        stages: Sequence[StagePlan] = (),
        counts_from: int = 0,
    ) -> None:
        """``counts_from``: the schedule's ``ScheduleType.counts_from`` (module doc)."""
        segments: list[Segment] = []
        self.counts_from = counts_from
        update, epoch, samples, clock_before = 1, 0, 0, 0.0
        b = per_worker_batch * accum_grad
        for stage in stages:
            upe = updates_per_epoch(dataset_size, stage.world_size, per_worker_batch, accum_grad)
            if upe == 0:
                raise ValueError(f"stage world_size({stage.world_size}): the global batch does "
                                 "not fit one shard of the training set")
            n = min(stage.epochs * upe, total_updates - update + 1)
            if n <= 0:
                break
            segments.append(Segment(stage.world_size, stage.world_size * b, update, n, epoch, upe,
                                    stage.lr_multiplier, stage.clock, clock_before, stage.eval_every,
                                    samples))
            update, epoch = update + n, epoch + stage.epochs
            samples += n * stage.world_size * b
            clock_before += n * stage.clock
        upe = updates_per_epoch(dataset_size, world_size, per_worker_batch, accum_grad)
        if update <= total_updates:
            segments.append(Segment(world_size, world_size * b, update, total_updates - update + 1,
                                    epoch, upe, 1.0, 1.0, clock_before, eval_every, samples))
        self.segments = tuple(segments)
        self.total_updates = total_updates
        self._firsts = [s.first_update for s in self.segments]

    def segment(self, update: int) -> Segment:
        if not 1 <= update <= self.total_updates:
            raise ValueError(f"update must be in [1, {self.total_updates}], but got {update=}")
        return self.segments[bisect.bisect_right(self._firsts, update) - 1]

    def position(self, update: int) -> float:
        """The schedule's position at ``update`` (module doc): ``update`` itself without a ramp."""
        s, o = self.segment(update), self.counts_from
        position = 1 - o + s.clock_before + (update - s.first_update) * s.clock + o * s.clock
        # an int where it is one: the schedules then see exactly what they saw before ramps
        return int(position) if position.is_integer() else position

    def done(self, update: int) -> tuple[int, int]:
        """(epochs completed, updates into the next epoch) after ``update`` (0: none made)."""
        if update == 0:
            return 0, 0
        s = self.segment(update)
        epochs, within = divmod(update - s.first_update + 1, s.updates_per_epoch)
        return s.first_epoch + epochs, within

    def epoch(self, update: int) -> float:
        """Epochs of data seen after ``update``, fractional (the ``epoch`` metric)."""
        s = self.segment(update)
        return s.first_epoch + (update - s.first_update + 1) / s.updates_per_epoch

    def samples(self, update: int) -> int:
        """Samples seen after ``update`` (the ``samples_seen`` metric)."""
        s = self.segment(update)
        return s.samples_before + (update - s.first_update + 1) * s.global_batch

    def eval_due(self, update: int) -> bool:
        """An evaluation every ``eval_every`` updates of the segment, counted from its start."""
        s = self.segment(update)
        return eval_due(update, s.eval_every, s.first_update)

    def epoch_at_position(self, position: float) -> float:
        """Epochs seen when the schedule reaches ``position`` (a warmup's end, in epochs)."""
        o = self.counts_from
        for s in self.segments:
            first = 1 - o + s.clock_before + o * s.clock  # the position of its first update
            last = first + (s.updates - 1) * s.clock
            if position <= last or s is self.segments[-1]:
                # updates into the segment when the position is reached (300 without a ramp)
                updates = max(0.0, (position - first) / s.clock + 1)
                return s.first_epoch + updates / s.updates_per_epoch
        return math.nan  # no segments: no updates
