"""Curtailment: when a trial may stop because no later evaluation can change any decision it
takes part in (issue 33). Pure: no torch, no Ray, no MLflow.

A trial of an arm enters every decision through one number per level: its seed's paired
epochs ratio against the same seed of the baseline arm, as a bracket [lo, hi]
(:func:`scalesweep.science.stats.replicates.ratio`). Every decision (the headline's, each
level's, in the family or alone, at any confidence, and the adaptive looks that follow
from them) reads the seeds' brackets only through order statistics compared with 1/(1+d), 1
and 1+d (:mod:`scalesweep.science.stats.decisions`), and the counts of brackets wholly above
or below 1. So a trial's bracket may change without changing a decision as long as each of its
ends stays on the same side of each of those three thresholds.

At a level the trial has reached, its bracket is fixed: the crossing is the first eval that
meets the target (smoothing is causal), so later evals cannot move it. At a level it has not
reached by epoch e, stopping there records "never, after e" ([e, +inf)), while the full run
would record a bracket with both ends at e or later. With the baseline seed's bracket [b_lo,
b_hi] the two agree on every side once

    e / b_hi > 1        (lo above 1, so above 1/(1+d) too, however late it crosses), and
    e / b_lo > 1 + d    (hi above the band, so above 1, however early after e it crosses).

Past that epoch the level is *settled*: the seed counts as slower beyond the band either way.
A trial may stop once every level is reached or settled; with a baseline seed that never
reached a level (b_hi = +inf) that level never settles, so such a trial runs on. A curtailed
trial's censoring is therefore exactly as informative as its full run for every decision; its
own medians and interval ends may differ (a bound where the full run had a number), never a
decision. The baseline arm is never curtailed: its curves set the targets, the horizon and the
conditioning check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scalesweep.science.stats.convergence import EvalPoint, Mode, locate
from scalesweep.science.stats.decisions import band
from scalesweep.science.stats.levels import level_target
from scalesweep.science.stats.replicates import Observation, observe, ratio


@dataclass(frozen=True)
class Gate:
    """One level of one trial: its target, and its baseline seed's epochs bracket there (None:
    the baseline seed has no evals, so nothing is ever settled)."""

    level: float
    target: float
    baseline: Observation | None
    margin: float

    def settled_at(self, epoch: float) -> bool:
        """Whether "not reached by ``epoch``" already decides this level's pair the way any
        later crossing would: both ends of a crossing at ``epoch`` over the baseline's bracket
        lie above 1 and above the band (a later crossing only raises both)."""
        if self.baseline is None:
            return False
        at = ratio(observe("interpolated", before=epoch, at=epoch, estimate=epoch), self.baseline)
        return at.lo > 1.0 and at.hi > band(self.margin)[1]


def gates(baseline: Sequence[EvalPoint], best: float, levels: Sequence[float], mode: Mode,
          smoothing: float, margin: float) -> tuple[Gate, ...]:
    """A trial's gates: at each level (the headline's ``relative_to_baseline`` among them),
    the target its pair meets (``best``: its cross-fitted baseline best) and where its baseline
    seed's curve crosses it, in epochs."""
    out = []
    for level in sorted(set(levels)):
        target = level_target(best, level, mode)
        obs = locate(baseline, target, mode, smoothing).observation("epochs") if baseline else None
        out.append(Gate(level, target, obs, margin))
    return tuple(out)


def _reached(curve: Sequence[EvalPoint], gate: Gate, mode: Mode, smoothing: float) -> int | None:
    """The index of the eval at which the curve meets the gate's target, else None."""
    where = locate(curve, gate.target, mode, smoothing)
    if where.kind == "never":
        return None
    return 0 if where.at is None else next(i for i, p in enumerate(curve) if p is where.at)


def may_stop(curve: Sequence[EvalPoint], gate_list: Sequence[Gate], mode: Mode,
             smoothing: float = 0.0) -> bool:
    """Whether a trial whose evals so far are ``curve`` may stop now: each gate reached, or
    settled at its last eval's epoch. An empty curve or no gates: no (nothing is known)."""
    if not curve or not gate_list:
        return False
    last = curve[-1].epoch
    return all(_reached(curve, g, mode, smoothing) is not None or g.settled_at(last) for g in gate_list)


def stop_index(curve: Sequence[EvalPoint], gate_list: Sequence[Gate], mode: Mode,
               smoothing: float = 0.0) -> int | None:
    """The index of the first eval after which the trial may stop, on its whole curve (what
    :func:`may_stop` says eval after eval); None when it runs to its last eval anyway."""
    for i in range(len(curve) - 1):
        if may_stop(curve[: i + 1], gate_list, mode, smoothing):
            return i
    return None


@dataclass(frozen=True)
class Saving:
    """Trial-epochs trained with curtailment against every trial run to its end."""

    full: float
    curtailed: float
    n_trials: int
    n_curtailed: int

    @property
    def saved(self) -> float:
        return self.full - self.curtailed

    @property
    def share(self) -> float:
        return self.saved / self.full if self.full > 0 else 0.0

    def text(self) -> str:
        return (f"curtailment: {self.n_curtailed} of {self.n_trials} trials stopped once no later "
                f"eval could change a decision; {self.curtailed:.4g} trial-epochs trained against "
                f"{self.full:.4g} run to the end ({self.saved:.4g} saved, {self.share:.0%})")


def saving(trained: Sequence[tuple[float, float]]) -> Saving:
    """``trained``: per trial, (the epochs it trained, the epochs its plan runs to the end)."""
    return Saving(full=sum(full for _, full in trained), curtailed=sum(done for done, _ in trained),
                  n_trials=len(trained),
                  n_curtailed=sum(done < full * (1.0 - 1e-9) for done, full in trained))
