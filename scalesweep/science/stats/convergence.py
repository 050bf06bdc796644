"""Convergence speed: "steps to result" (Shallue et al. 2019). Pure: no torch, no Ray, no MLflow.

A *curve* is the sequence of a trial's dev evaluations, each an :class:`EvalPoint` that carries
the metric value and the four clocks it can be read on: optimizer updates, samples seen, epochs
and wall seconds. The *crossing* is where the (optionally smoothed) metric first reaches the
target, read on all four clocks at once.

Conventions, kept in one place because the trial driver, the summary JSON and the report must
agree on them to the digit:

* Smoothing is an exponential moving average over evaluations, TensorBoard-style:
  ``s[0] = x[0]``, ``s[i] = alpha * s[i-1] + (1 - alpha) * x[i]``; ``alpha`` is the weight of
  the past, so ``alpha = 0`` means no smoothing. A non-finite value (a diverged eval) never
  meets a target; with smoothing it also makes every later smoothed value non-finite.
* "Reaches" is ``<=`` for ``mode="min"`` and ``>=`` for ``mode="max"``.
* The crossing lies between the last eval that misses the target and the first eval that meets
  it, placed linearly in the (smoothed) metric between those two evals; each clock is then
  interpolated linearly with the same fraction. If the very first eval already meets the
  target, the crossing is that eval's own coordinates.
* Where a crossing lies is known only to the evaluations around it (:func:`locate`): between
  the eval that missed and the one that met the target (``interpolated``); before the first
  eval, if that one already meets it (``at_first_eval``: left-censored, "<= first eval", never
  a plain number: its speedups and ratios are bounds); or after the last eval (``never``:
  right-censored). :mod:`scalesweep.science.stats.replicates` carries these brackets into the intervals.
* Speedup is ``baseline / trial`` on one clock; the default clock is optimizer **updates**
  (Shallue et al.; docs/design.md §4.4's ``speedup_vs_baseline``). ``by="epochs"`` answers the WeNet
  question (per-epoch convergence). Scaling efficiency is the updates speedup divided by the
  batch ratio ``k = B / B0``; it equals the samples speedup, and 1.0 is perfect scaling.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from scalesweep.science.stats.replicates import CrossingKind, Observation, observe

Mode = Literal["min", "max"]
Axis = Literal["updates", "samples", "epochs", "seconds"]
MODES: tuple[Mode, ...] = ("min", "max")
AXES: tuple[Axis, ...] = ("updates", "samples", "epochs", "seconds")


@dataclass(frozen=True)
class EvalPoint:
    """One dev evaluation, with the clocks it happened at."""

    update: float
    samples_seen: float
    epoch: float
    wall_s: float
    value: float


@dataclass(frozen=True)
class Crossing:
    """Where a curve first reaches its target, on every clock."""

    updates_to_target: float
    samples_to_target: float
    epochs_to_target: float
    seconds_to_target: float

    def on(self, axis: Axis) -> float:
        _check_axis(axis)
        return float(getattr(self, f"{axis}_to_target"))


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, but got {mode=}")


def _check_axis(axis: str) -> None:
    if axis not in AXES:
        raise ValueError(f"by must be one of {AXES}, but got {axis=}")


def _reaches(value: float, target: float, mode: Mode) -> bool:
    # NaN compares false either way, so a diverged eval never counts as reaching.
    return value <= target if mode == "min" else value >= target


def smooth(values: Sequence[float], alpha: float) -> list[float]:
    """EMA with weight ``alpha`` on the past (``alpha=0``: values unchanged), seeded with x[0]."""
    if not 0.0 <= alpha < 1.0:
        raise ValueError(f"alpha must be in [0, 1), but got {alpha=}")
    if alpha == 0.0:
        return [float(x) for x in values]  # 0 * nan is nan: a NaN must not poison what follows
    out: list[float] = []
    for x in values:
        out.append(float(x) if not out else alpha * out[-1] + (1.0 - alpha) * float(x))
    return out


def _scan(curve: Sequence[EvalPoint], target: float, mode: Mode, smoothing: float
          ) -> tuple[int, float] | None:
    """The index of the first eval whose smoothed value reaches ``target`` and the fraction of
    the way from the eval before it at which the line between them crosses; None if never."""
    _check_mode(mode)
    if not math.isfinite(target):
        raise ValueError(f"target must be finite, but got {target=}")
    for prev, cur in itertools.pairwise(curve):
        if cur.update < prev.update:
            raise ValueError(
                f"curve must be ordered by update, but got update {cur.update} after {prev.update}"
            )
    values = smooth([p.value for p in curve], smoothing)
    for i, value in enumerate(values):
        if not _reaches(value, target, mode):
            continue
        if i == 0:
            return 0, 1.0
        before = values[i - 1]
        # before misses and value meets, so before != value and frac lies in (0, 1]; after a
        # non-finite eval there is no line to interpolate on, so take the meeting eval itself.
        return i, (before - target) / (before - value) if math.isfinite(before) else 1.0
    return None


def first_crossing(
    curve: Sequence[EvalPoint], target: float, mode: Mode = "min", smoothing: float = 0.0
) -> Crossing | None:
    """First point where the smoothed metric reaches ``target``, interpolated; None if never.

    Interpolation is linear in the metric between the last eval before the crossing and the
    first eval at/after it (see the module docstring); an empty curve never reaches.
    """
    found = _scan(curve, target, mode, smoothing)
    if found is None:
        return None
    i, frac = found
    return _crossing_at(curve[max(i - 1, 0)], curve[i], frac)


@dataclass(frozen=True)
class Located:
    """Where a curve reaches its target as far as its evaluations can tell.

    ``before`` is the last eval that missed (None when the first eval met it, or there is
    none), ``at`` the first that met it (None when never); ``crossing`` is the interpolated
    crossing, only for ``interpolated``.
    """

    kind: CrossingKind
    crossing: Crossing | None
    before: EvalPoint | None
    at: EvalPoint | None

    def bracket(self, axis: Axis) -> tuple[float, float]:
        """[lo, hi] on ``axis`` that certainly holds the crossing (hi = inf: never reached)."""
        _check_axis(axis)
        lo = 0.0 if self.before is None else _clock(self.before, axis)
        hi = math.inf if self.at is None else _clock(self.at, axis)
        return lo, hi

    def observation(self, axis: Axis) -> Observation | None:
        """The crossing on ``axis`` as one seed's observation; None when that clock was not
        recorded (NaN) at the evals around it, or went back between them (a trial whose own
        loop restarted its clock): no reading on that clock, rather than a wrong one."""
        lo, hi = self.bracket(axis)
        if math.isnan(lo) or math.isnan(hi) or lo > hi:
            return None
        if self.kind == "interpolated":
            assert self.crossing is not None
            return observe("interpolated", before=lo, at=hi, estimate=self.crossing.on(axis))
        return observe(self.kind, before=lo, at=hi)


def _clock(point: EvalPoint, axis: Axis) -> float:
    return float({"updates": point.update, "samples": point.samples_seen, "epochs": point.epoch,
                  "seconds": point.wall_s}[axis])


def locate(curve: Sequence[EvalPoint], target: float, mode: Mode = "min", smoothing: float = 0.0
           ) -> Located:
    """:func:`first_crossing` with its bracket: interpolated, at the first eval, or never."""
    found = _scan(curve, target, mode, smoothing)
    if found is None:
        return Located("never", None, curve[-1] if curve else None, None)
    i, frac = found
    if i == 0:
        return Located("at_first_eval", None, None, curve[0])
    return Located("interpolated", _crossing_at(curve[i - 1], curve[i], frac), curve[i - 1], curve[i])


def _crossing_at(a: EvalPoint, b: EvalPoint, frac: float) -> Crossing:
    def lerp(x: float, y: float) -> float:
        return float(x + frac * (y - x))

    return Crossing(
        updates_to_target=lerp(a.update, b.update),
        samples_to_target=lerp(a.samples_seen, b.samples_seen),
        epochs_to_target=lerp(a.epoch, b.epoch),
        seconds_to_target=lerp(a.wall_s, b.wall_s),
    )


def best_value(values: Sequence[float], mode: Mode = "min") -> float | None:
    """Best finite value (lowest for min, highest for max); None if there is none."""
    _check_mode(mode)
    finite = [float(v) for v in values if math.isfinite(v)]
    if not finite:
        return None
    return min(finite) if mode == "min" else max(finite)


def resolve_target(
    mode: Mode,
    *,
    value: float | None = None,
    relative: float | None = None,
    baseline_best: float | None = None,
) -> float:
    """The absolute target: ``value`` as given, or ``relative`` slack on the baseline's best.

    Relative targets loosen the baseline's best by a fraction of its magnitude:
    ``best + relative * |best|`` for min metrics, ``best - relative * |best|`` for max metrics
    (``best * (1 + relative)`` for a positive loss). Take ``baseline_best`` from the baseline
    curve smoothed the same way as the crossings, or the baseline may never reach its own target.
    """
    _check_mode(mode)
    if (value is None) == (relative is None):
        raise ValueError(f"give exactly one of value and relative, but got {value=}, {relative=}")
    if value is not None:
        if not math.isfinite(value):
            raise ValueError(f"value must be finite, but got {value=}")
        return float(value)
    assert relative is not None
    if not (math.isfinite(relative) and relative >= 0.0):
        raise ValueError(f"relative must be finite and at least 0, but got {relative=}")
    if baseline_best is None or not math.isfinite(baseline_best):
        raise ValueError(f"a relative target needs a finite baseline_best, but got {baseline_best=}")
    slack = relative * abs(baseline_best)
    return float(baseline_best + slack if mode == "min" else baseline_best - slack)


def speedup(trial: Crossing | None, baseline: Crossing | None, by: Axis = "updates") -> float | None:
    """``baseline / trial`` on clock ``by`` (default updates, Shallue et al.); >1 means faster.

    None when either never reached the target, or when the trial's coordinate is 0 (it met the
    target before training, so no ratio is meaningful).
    """
    _check_axis(by)
    if trial is None or baseline is None:
        return None
    t, b = trial.on(by), baseline.on(by)
    if t <= 0.0:
        return None
    return b / t


def scaling_efficiency(
    speedup: float | None, global_batch: float, baseline_global_batch: float
) -> float | None:
    """``speedup / (B / B0)``; pass the **updates** speedup, then 1.0 is perfect scaling.

    (On the samples or epochs clock perfect scaling is a speedup of 1 already, so dividing
    those by k would double-count the batch.) None when ``speedup`` is None.
    """
    for name, batch in (
        ("global_batch", global_batch),
        ("baseline_global_batch", baseline_global_batch),
    ):
        if not batch > 0:
            raise ValueError(f"{name} must be positive, but got {name}={batch}")
    if speedup is None:
        return None
    return speedup / (global_batch / baseline_global_batch)
