"""Warmup-stable-decay: schedule type ``wsd``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from scalesweep.science.schedules._types import (
    AUTO,
    Change,
    NoMomentum,
    Problem,
    ScaleCount,
    ScheduleConfig,
    ScheduleType,
    at_most,
    check_update,
    param,
)

DECAY_TYPES = ("linear", "cosine", "1-sqrt")


@dataclass(frozen=True)
class WarmupStableDecay(NoMomentum):
    """Warmup-stable-decay (MiniCPM, Hu et al. 2024); the 1-sqrt decay from Hägele et al. 2024.

    There is no original scheduler class to match; the reference is a torch ``LambdaLR`` (as
    Hugging Face's ``get_wsd_schedule`` with a linear warmup), whose construction evaluates the
    lambda at step 0. So update k runs at t = k - 1 completed updates, as ``GradualWarmup``
    does. With W = warmup_steps, D = decay_steps, T = total_steps, S = T - D (W <= S),
    r0 = warmup_min_ratio, m = min_lr_ratio:

    - t < W (updates 1..W): ``base * (r0 + (1 - r0) * t / W)``; update 1 runs at r0 * base,
      update W at ``base * (r0 + (1 - r0) * (W - 1) / W)``, never yet at base.
    - W <= t < S (updates W+1..S): base, exactly; update W+1 is the first at base.
    - S <= t < T (updates S+1..T): ``base * (m + (1 - m) * f(p))`` with p = (t - S) / D and
      f = 1 - p (linear), (1 + cos(pi p)) / 2 (cosine) or 1 - sqrt(p) (1-sqrt). Update S+1
      has p = 0 and runs at base exactly; update S+2 is the first below it; the last update
      of the run, T, has p = (D - 1) / D and is still above m * base (for m < 1).
    - t >= T (updates T+1 on): m * base, exactly.

    With W = 0 there is no warmup (update 1 at base); with W = S there is no stable phase (the
    decay starts right after the warmup, at base).
    """

    base: float
    warmup: int
    decay: int
    total: int
    warmup_min_ratio: float
    min_ratio: float
    decay_type: str

    def _shape(self, p: float) -> float:
        """The decay's fraction of the way from min to base, 1 at p = 0 and 0 at p = 1."""
        if self.decay_type == "linear":
            return 1.0 - p
        if self.decay_type == "cosine":
            return (1.0 + math.cos(math.pi * p)) / 2
        return 1.0 - math.sqrt(p)

    def lr(self, update: float) -> float:
        t = check_update(update) - 1
        start = self.total - self.decay
        if t < self.warmup:
            ratio = self.warmup_min_ratio + (1.0 - self.warmup_min_ratio) * t / self.warmup
        elif t < start:
            return self.base
        elif t < self.total:
            # m + (1 - m) * 1 is 1.0 exactly in floats, so update S+1 gives base itself
            ratio = self.min_ratio + (1.0 - self.min_ratio) * self._shape((t - start) / self.decay)
        else:
            ratio = self.min_ratio
        return self.base * ratio

    def boundaries(self) -> tuple[int, ...]:
        return (self.warmup + 1, self.total - self.decay + 1, self.total + 1)


@dataclass(frozen=True, kw_only=True)
class WarmupStableDecayConfig(ScheduleConfig):
    name: ClassVar[str] = "wsd"
    warmup_steps: int = param("int", ge=0)
    decay_steps: int = param("int", ge=1)
    #: "auto" until fill_auto: a config is made only once it is filled in
    total_steps: int = param("int", ge=1, auto=True)
    #: same name and meaning as ds_warmup_cosine's: the warmup's first lr / base
    warmup_min_ratio: float = param("float", 0.0, ge=0, le=1)
    min_lr_ratio: float = param("float", 0.0, ge=0, le=1)
    #: 1-sqrt: Hägele et al. 2024 find it beats linear for the same decay length
    decay_type: str = param("str", "1-sqrt", choices=DECAY_TYPES)

    def build(self, base_lr: float) -> WarmupStableDecay:
        return WarmupStableDecay(
            base_lr, self.warmup_steps, self.decay_steps, self.total_steps,
            float(self.warmup_min_ratio), float(self.min_lr_ratio), self.decay_type)


def _cross_checks(v: dict[str, Any], base_lr: float | None) -> list[Problem]:
    if v["total_steps"] == AUTO:  # checked once filled in
        return []
    # the phases must not overlap: warmup_steps + decay_steps <= total_steps
    if v["decay_steps"] > v["total_steps"]:
        return at_most(v, "decay_steps", "total_steps", v["total_steps"])
    return at_most(v, "warmup_steps", "total_steps - decay_steps",
                   v["total_steps"] - v["decay_steps"])


def _scale_counts(params: Mapping[str, Any], auto: Sequence[str], scale: ScaleCount,
                  how: str) -> list[Change]:
    # Every count is in updates, so a "scaled" warmup rule rescales all three, as it does
    # ds_warmup_cosine's total_num_steps: at k x the global batch the run has 1/k of the
    # updates, and the decay must still end where the run does (in samples). decay_steps is
    # rescaled through the decay's start, not on its own, so that rounding never pushes the
    # warmup into the decay.
    out = [Change(key, scale(params[key]), how) for key in ("warmup_steps", "total_steps")
           if key not in auto]
    if auto:
        # the run's end is this trial's own; the decay covers the reference's samples
        return [*out, Change("decay_steps", max(1, scale(params["decay_steps"])), how)]
    # The decay's start (total - decay) is scaled as a count and the decay is what is left of
    # the run. Rounding the three counts each on its own can round warmup and decay up and
    # total down, so that a warmup which ended where the decay began (no stable phase) would
    # overlap it: 25 + 75 of 100 at x 1/2 gives 13 + 38 > 50. Rounding is monotone, so scaled
    # warmup <= scaled start holds whenever warmup <= start did. A decay never scales down to
    # nothing, like a warmup.
    start = scale(params["total_steps"] - params["decay_steps"])
    return [*out, Change("decay_steps", max(1, scale(params["total_steps"]) - start),
                         f"{how}: total_steps minus the scaled decay start "
                         f"{params['total_steps'] - params['decay_steps']} -> {start}")]


TYPES = (
    ScheduleType(
        "wsd", "warmup_steps", ("warmup_steps", "decay_steps", "total_steps"), (), True, False,
        WarmupStableDecayConfig, cross_checks=_cross_checks, scale_counts=_scale_counts,
    ),
)
ALIASES: dict[str, str] = {}
