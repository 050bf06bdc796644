"""One trial's convergence summary (docs/design.md §4.4), computed here once for the driver
(the summary JSON, the MLflow summary metrics, `run`'s table), the report and `advise`.
Pure: no torch, no Ray, no MLflow.

Its inputs are what the trial logged (:class:`TrialEvals`), the target it is measured against
and the same seed of its baseline arm. Which target and which baseline belong to a trial is
the caller's to say: the plan knows them in the driver, the logged params in the report.

A trial that never reached the target still has a summary: ``crossing`` is ``never``, its
``*_to_target`` are None and its bracket starts at its last eval. It is censored, never
dropped: :mod:`scalesweep.science.stats.arms` counts it as +inf in every median.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from scalesweep.mlflow_names import (
    BASELINE_ARM_PARAM,
    BASELINE_TRIAL_PARAM,
    BRACKETS,
    CROSSING_TAG,
    SUMMARY_METRICS,
    TARGET_BEST_METRIC,
    TARGET_METRIC,
    TARGET_VALUE_PARAM,
)
from scalesweep.science.stats.convergence import (
    Axis,
    Crossing,
    EvalPoint,
    Located,
    Mode,
    best_value,
    locate,
    scaling_efficiency,
    speedup,
)
from scalesweep.science.stats.replicates import CrossingKind

#: the summary JSON's convergence fields, in its order (docs/design.md §4.4); each is an
#: attribute of :class:`TrialSummary` of the same name
JSON_FIELDS = (*SUMMARY_METRICS, CROSSING_TAG, *BRACKETS, TARGET_VALUE_PARAM, BASELINE_TRIAL_PARAM,
               BASELINE_ARM_PARAM)
#: the summary metrics a trial's MLflow run holds (docs/design.md §4.5), attributes likewise
METRIC_FIELDS = (*SUMMARY_METRICS, *BRACKETS, TARGET_METRIC, TARGET_BEST_METRIC)


@dataclass(frozen=True)
class TrialEvals:
    """What one trial logged, as its summary reads it."""

    name: str
    arm: str
    seed: int
    #: None when unknown: then there is no scaling efficiency
    global_batch: float | None
    #: its evaluations of the target metric, in update order
    curve: tuple[EvalPoint, ...] = ()
    #: its dev_loss at each evaluation, in update order (non-finite where it diverged)
    dev_loss: tuple[float, ...] = ()
    #: the loop's own training time, as reported (None: not reported)
    train_seconds: float | None = None


@dataclass(frozen=True)
class Reading:
    """How a study reads every crossing: the metric's direction and its smoothing (§1.4)."""

    mode: Mode = "min"
    smoothing: float = 0.0


@dataclass(frozen=True)
class TrialSummary:
    """The §4.4 fields of one trial; None where undefined.

    ``*_to_target`` are set only for an ``interpolated`` crossing: one at the first eval is a
    bound (``*_to_target_hi``), not a measurement, and its speedups are unresolved (None). The
    brackets hold the evals around the crossing (lo = 0 at the first eval; hi None when never
    reached, lo then the last eval). ``crossing`` is None without a target or evals.
    """

    name: str
    arm: str
    seed: int
    target_value: float | None
    baseline_trial: str | None
    baseline_arm: str | None
    crossing: CrossingKind | None
    updates_to_target: float | None
    samples_to_target: float | None
    epochs_to_target: float | None
    seconds_to_target: float | None
    updates_to_target_lo: float | None
    updates_to_target_hi: float | None
    epochs_to_target_lo: float | None
    epochs_to_target_hi: float | None
    final_dev_loss: float | None
    best_dev_loss: float | None
    #: baseline / trial on the updates clock (Shallue et al.), and on the epochs clock (the
    #: WeNet question; the report's table shows it)
    speedup_vs_baseline: float | None
    speedup_by_epochs: float | None
    scaling_efficiency: float | None
    train_seconds: float | None
    #: the baseline best its target was loosened from, which every level loosens too
    #: (:mod:`scalesweep.science.stats.targets`); None for an absolute target
    target_reference_best: float | None = None
    #: what the arms read (:mod:`scalesweep.science.stats.arms`): the crossing with its bracket
    #: (None without a target or evals) and the target metric's evals
    located: Located | None = field(default=None, compare=False, repr=False)
    curve: tuple[EvalPoint, ...] = field(default=(), compare=False, repr=False)

    def as_json(self) -> dict[str, float | str | None]:
        """The summary JSON's convergence fields (the output edge: nothing else is a dict)."""
        return {name: getattr(self, name) for name in JSON_FIELDS}

    def metrics(self) -> dict[str, float | None]:
        """The summary metrics to log on the trial's run (None: not defined, not logged)."""
        return {name: getattr(self, name) for name in METRIC_FIELDS}


def summarize_trial(trial: TrialEvals, target: float | None, baseline: TrialEvals | None,
                    reading: Reading = Reading(), reference_best: float | None = None) -> TrialSummary:
    """``trial`` against ``target``, its speedups against ``baseline`` (the same seed of its
    baseline arm, whose crossing is located on its own evals against the same target);
    ``reference_best``: the baseline best a relative target was loosened from."""
    located = _locate(trial, target, reading)
    crossing = None if located is None else located.crossing
    base = None if baseline is None else _locate(baseline, target, reading)
    base_crossing = None if base is None else base.crossing
    up = speedup(crossing, base_crossing, "updates")
    final, best = _losses(trial.dev_loss)
    return TrialSummary(
        name=trial.name, arm=trial.arm, seed=trial.seed, target_value=target,
        baseline_trial=None if baseline is None else baseline.name,
        baseline_arm=None if baseline is None else baseline.arm,
        crossing=None if located is None else located.kind,
        updates_to_target=_on(crossing, "updates"), samples_to_target=_on(crossing, "samples"),
        epochs_to_target=_on(crossing, "epochs"), seconds_to_target=_on(crossing, "seconds"),
        updates_to_target_lo=_end(located, "updates", 0), updates_to_target_hi=_end(located, "updates", 1),
        epochs_to_target_lo=_end(located, "epochs", 0), epochs_to_target_hi=_end(located, "epochs", 1),
        final_dev_loss=final, best_dev_loss=best,
        speedup_vs_baseline=up, speedup_by_epochs=speedup(crossing, base_crossing, "epochs"),
        scaling_efficiency=_efficiency(up, trial, baseline), train_seconds=trial.train_seconds,
        target_reference_best=reference_best, located=located, curve=trial.curve,
    )  # fmt: skip


def _locate(trial: TrialEvals, target: float | None, reading: Reading) -> Located | None:
    if target is None or not trial.curve:
        return None
    return locate(trial.curve, target, reading.mode, reading.smoothing)


def _on(crossing: Crossing | None, axis: Axis) -> float | None:
    return None if crossing is None else crossing.on(axis)


def _end(located: Located | None, axis: Axis, end: int) -> float | None:
    """One end of the bracket on ``axis``; an infinite hi (never reached) is None."""
    if located is None:
        return None
    value = located.bracket(axis)[end]
    return None if end == 1 and not math.isfinite(value) else value


def _losses(dev_loss: Sequence[float]) -> tuple[float | None, float | None]:
    """The final and the best dev loss; a non-finite final (divergence) is None, so the summary
    stays valid JSON."""
    if not dev_loss:
        return None, None
    final = dev_loss[-1] if math.isfinite(dev_loss[-1]) else None
    return final, best_value(dev_loss, "min")


def _efficiency(up: float | None, trial: TrialEvals, baseline: TrialEvals | None) -> float | None:
    if baseline is None or not trial.global_batch or not baseline.global_batch:
        return None
    return scaling_efficiency(up, trial.global_batch, baseline.global_batch)
