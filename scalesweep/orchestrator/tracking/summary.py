"""The driver's summaries: each trial's curve and plan row handed to the pure summary
(:mod:`scalesweep.science.stats.trial_summary`, the code the report and `advise` run too), and
its seeds' arms (:mod:`scalesweep.science.stats.arms`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scalesweep.mlflow_names import STEP_KEY, TRAIN_SECONDS_METRIC
from scalesweep.orchestrator.plan import adaptive
from scalesweep.orchestrator.plan.rows import Plan, PlanRow
from scalesweep.orchestrator.spec.load import metric_mode
from scalesweep.science.stats import arms
from scalesweep.science.stats import convergence as conv
from scalesweep.science.stats.trial_summary import Reading, TrialEvals, TrialSummary, summarize_trial


def points(curve: Sequence[Mapping[str, Any]], metric: str) -> list[conv.EvalPoint]:
    return [
        conv.EvalPoint(update=float(r[STEP_KEY]), samples_seen=float(r["samples_seen"]),
                       epoch=float(r["epoch"]), wall_s=float(r["wall_s"]), value=float(r[metric]))
        for r in curve if r.get(metric) is not None
    ]


def _evals(row: PlanRow, curve: Sequence[Mapping[str, Any]], metric: str) -> TrialEvals:
    """What the trial reported: its evals of the target metric, its dev losses, and the loop's
    training time (its last report's; else that report's wall clock)."""
    last = curve[-1] if curve else {}
    return TrialEvals(
        name=row.name, arm=row.arm, seed=row.seed, global_batch=row.global_batch,
        curve=tuple(points(curve, metric)),
        dev_loss=tuple(float(r["dev_loss"]) for r in curve if r.get("dev_loss") is not None),
        train_seconds=last.get(TRAIN_SECONDS_METRIC, last.get("wall_s")),
    )


def _baseline_arm_rows(plan: Plan, base: PlanRow) -> list[PlanRow]:
    return [r for r in plan.rows if r.arm == base.arm]


def targets(plan: Plan, curves: Mapping[str, Sequence[Mapping[str, Any]]]
            ) -> dict[str, tuple[float | None, PlanRow | None]]:
    """Trial name -> (its absolute target, its baseline row with the same seed); target None
    when a relative target's baseline never produced a value.

    A relative target is resolved once per baseline arm: the mean of its seeds' curves
    (:func:`scalesweep.science.stats.arms.mean_curve_target`), so every seed meets the same target; with
    ``target.per_seed`` each seed uses its own baseline seed's best instead."""
    spec = plan.sweep.spec.target
    mode = metric_mode(plan.sweep)
    resolved: dict[tuple[str, ...], float | None] = {}  # baseline trials -> their target
    out: dict[str, tuple[float | None, PlanRow | None]] = {}
    for row in plan.rows:
        base = plan.baseline_for(row)
        if spec.value is not None or base is None:
            out[row.name] = (spec.value, base)
            continue
        assert spec.relative_to_baseline is not None
        sources = (base.name,) if spec.per_seed else tuple(r.name for r in _baseline_arm_rows(plan, base))
        if sources not in resolved:
            seed_curves = [pts for name in sources if (pts := points(curves.get(name, []), spec.metric))]
            resolved[sources] = arms.mean_curve_target(seed_curves, mode, spec.relative_to_baseline,
                                                       spec.smoothing)
        out[row.name] = (resolved[sources], base)
    return out


def summarize(plan: Plan, curves: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, TrialSummary]:
    """Trial name -> its summary, for every row of the plan (a trial that has not run has no
    evals: no crossing, never a made-up one)."""
    spec = plan.sweep.spec.target
    reading = Reading(metric_mode(plan.sweep), spec.smoothing)
    evals = {row.name: _evals(row, curves.get(row.name, []), spec.metric) for row in plan.rows}
    out = {}
    for name, (target, base) in targets(plan, curves).items():
        out[name] = summarize_trial(evals[name], target, None if base is None else evals[base.name], reading)
    return out


def arm_summaries(plan: Plan, curves: Mapping[str, Sequence[Mapping[str, Any]]],
                  rows: Sequence[PlanRow] | None = None) -> list[arms.ArmSummary]:
    """One summary per arm: its seeds' medians and intervals, and the paired comparison with
    its baseline arm (:mod:`scalesweep.science.stats.arms`), each interval at the design's
    per-look confidence. ``rows``: the trials that ran (an adaptive sweep runs only some of
    its plan), by default all."""
    spec = plan.sweep.spec.target
    summaries = summarize(plan, curves)
    ran = [summaries[row.name] for row in (plan.rows if rows is None else rows)]
    axes = {row.arm: {k: v for k, v in row.axes.items() if k != "seed"}
            for row in (plan.rows if rows is None else rows)}
    headline = {s.target_value for s in summaries.values()}
    single = next(iter(headline)) if len(headline) == 1 and not spec.per_seed else None
    rules = arms.Rules(confidence=adaptive.design(plan).per_look, margin=spec.equivalence_margin,
                       levels=tuple(spec.levels), mode=metric_mode(plan.sweep), smoothing=spec.smoothing,
                       target=single)
    return arms.summarize_arms(ran, {s.arm: s.baseline_arm for s in ran}, rules, axes)
