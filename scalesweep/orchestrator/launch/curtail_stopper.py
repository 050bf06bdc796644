"""``curtail: true``: a Tune stopper that ends a trial once no later eval can change any of its
decisions (:mod:`scalesweep.science.stats.curtail` has the rule and why it is exact).

A trial's gates need its pair's target and its baseline seed's whole curve, and the target is
cross-fitted from every first-look baseline seed: so the rounds run the baseline trials first
(:func:`split_round`), and a trial is judged only once every baseline trial its target and
pair read has ended. Until then it trains on, which is always safe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ray import tune

from scalesweep.mlflow_names import STATUS_TAG, STEP_KEY
from scalesweep.orchestrator.plan import adaptive
from scalesweep.orchestrator.plan.rows import Plan, PlanRow
from scalesweep.orchestrator.tracking.summary import points, references
from scalesweep.science.stats import curtail
from scalesweep.trainables.config import TrialJob


def baseline_names(plan: Plan) -> set[str]:
    """Every trial that is some trial's baseline: never curtailed."""
    return {b.name for r in plan.rows if (b := plan.baseline_for(r)) is not None}


def split_round(plan: Plan, rows: Sequence[PlanRow]) -> tuple[list[PlanRow], list[PlanRow]]:
    """A round's trials as (baselines, the rest): the rest are judged against the first."""
    bases = baseline_names(plan)
    return [r for r in rows if r.name in bases], [r for r in rows if r.name not in bases]


def trial_gates(plan: Plan, curves: Mapping[str, Sequence[Mapping[str, Any]]], row: PlanRow,
                ended: Callable[[str], bool]) -> tuple[curtail.Gate, ...] | None:
    """The row's gates once what they read is final (None before, or for a row that is never
    curtailed): its baseline seed and every first-look seed of its baseline arm have ended."""
    base = plan.baseline_for(row)
    spec = plan.sweep.spec.target
    if base is None or base.name == row.name or spec.relative_to_baseline is None:
        return None
    first = [r for r in adaptive.first_round(plan) if r.arm == base.arm]
    if not all(ended(r.name) for r in [*first, base]):
        return None
    best = references(plan, curves)[base.arm].best(row.seed)
    if best is None:
        return None
    rules = plan.rules
    return curtail.gates(points(curves.get(base.name, []), spec.metric), best,
                         [spec.relative_to_baseline, *rules.levels], rules.mode, rules.smoothing,
                         rules.margin)


class CurtailStopper(tune.Stopper):
    """Stops a trial when :func:`scalesweep.science.stats.curtail.may_stop` says so. Tune asks
    it before the callbacks see the result, so the trial's curve is what the callback has
    logged (``curves``, which a resumed trial's earlier evals are in too) plus this result."""

    def __init__(self, plan: Plan, curves: Mapping[str, Sequence[Mapping[str, Any]]],
                 ended: Callable[[str], bool]) -> None:
        self.plan, self.curves, self.ended = plan, curves, ended
        self.rows = {r.name: r for r in plan.rows}
        self.never = baseline_names(plan)
        self.gates: dict[str, tuple[curtail.Gate, ...]] = {}
        #: trial name -> the epoch it was stopped at
        self.stopped: dict[str, float] = {}

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        name = _name(result)
        row = self.rows.get(name or "")
        if row is None or row.name in self.never or STEP_KEY not in result:
            return False
        if result.get(STATUS_TAG) in ("completed", "diverged", "stopped"):
            return False  # it ends by itself
        gate_list = self.gates.get(row.name)
        if gate_list is None:
            found = trial_gates(self.plan, self.curves, row, self.ended)
            if found is None:
                return False
            gate_list = self.gates[row.name] = found
        spec = self.plan.sweep.spec.target
        logged = list(self.curves.get(row.name, []))
        if not logged or float(logged[-1][STEP_KEY]) < float(result[STEP_KEY]):
            logged.append(result)
        curve = points(logged, spec.metric)
        stop = curtail.may_stop(curve, gate_list, self.plan.rules.mode, self.plan.rules.smoothing)
        if stop:
            self.stopped[row.name] = curve[-1].epoch
        return stop

    def stop_all(self) -> bool:
        return False


def _name(result: Mapping[str, Any]) -> str | None:
    """The trial's name, from the config Tune puts into every result."""
    try:
        return TrialJob.name_in(result["config"])
    except (KeyError, TypeError):
        return None
