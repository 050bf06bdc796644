"""The driver's summaries: each trial's curve and plan row handed to the pure summary
(:mod:`scalesweep.science.stats.trial_summary`, the code the report and `advise` run too), and
its seeds' arms (:mod:`scalesweep.science.stats.arms`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from scalesweep.mlflow_names import STEP_KEY, TRAIN_SECONDS_METRIC
from scalesweep.orchestrator.plan import adaptive
from scalesweep.orchestrator.plan.rows import Plan, PlanRow
from scalesweep.science.stats import arms
from scalesweep.science.stats import convergence as conv
from scalesweep.science.stats.targets import ReferenceBests, reference_bests, target_of
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


@dataclass(frozen=True)
class TrialTarget:
    """The target one trial is measured against, the best it was loosened from (None for an
    absolute target) and its baseline row (the same seed of its baseline arm)."""

    value: float | None
    reference_best: float | None
    baseline: PlanRow | None


def references(plan: Plan, curves: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, ReferenceBests]:
    """Baseline arm -> the bests its seeds give (:mod:`scalesweep.science.stats.targets`):
    cross-fitted, from the first look's seeds only, so later rounds never move them."""
    spec = plan.sweep.spec.target
    first = {(r.arm, r.seed) for r in adaptive.first_round(plan)}
    by_arm: dict[str, dict[int, list[conv.EvalPoint]]] = {}
    for row in plan.rows:
        base = plan.baseline_for(row)
        if base is not None:
            by_arm.setdefault(base.arm, {})
    for row in plan.rows:
        if row.arm in by_arm:
            by_arm[row.arm][row.seed] = points(curves.get(row.name, []), spec.metric)
    rules = plan.rules
    return {arm: reference_bests(seeds, mode=rules.mode, smoothing=rules.smoothing, margin=rules.margin,
                                 first_look={s for (a, s) in first if a == arm})
            for arm, seeds in by_arm.items()}


Refs = Mapping[str, ReferenceBests]


def _refs(plan: Plan, curves: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, ReferenceBests]:
    return references(plan, curves) if plan.sweep.spec.target.value is None else {}


def targets(plan: Plan, curves: Mapping[str, Sequence[Mapping[str, Any]]], refs: Refs | None = None
            ) -> dict[str, TrialTarget]:
    """Trial name -> its target; the value is None when a relative target's baseline gave no
    best. A relative target is the best of the baseline arm's first-look seeds other than the
    trial's own seed, loosened by ``relative_to_baseline`` (docs/design.md §4, "Target").
    ``refs``: :func:`references` of these curves, when the caller has them already."""
    spec = plan.sweep.spec.target
    mode = plan.rules.mode
    refs = _refs(plan, curves) if refs is None else refs
    out: dict[str, TrialTarget] = {}
    for row in plan.rows:
        base = plan.baseline_for(row)
        if spec.value is not None or base is None:
            out[row.name] = TrialTarget(spec.value, None, base)
            continue
        assert spec.relative_to_baseline is not None
        best = refs[base.arm].best(row.seed)
        out[row.name] = TrialTarget(target_of(best, spec.relative_to_baseline, mode), best, base)
    return out


def headline_target(plan: Plan, curves: Mapping[str, Sequence[Mapping[str, Any]]],
                    refs: Refs | None = None) -> float | None:
    """The study's one target to show: the absolute one, or the pooled first-look best of its
    baseline arm loosened (each pair's own is cross-fitted around it); None with several
    baseline arms or no best."""
    spec = plan.sweep.spec.target
    if spec.value is not None:
        return spec.value
    refs = _refs(plan, curves) if refs is None else refs
    if len(refs) != 1:
        return None
    assert spec.relative_to_baseline is not None
    return target_of(next(iter(refs.values())).pooled, spec.relative_to_baseline, plan.rules.mode)


def summarize(plan: Plan, curves: Mapping[str, Sequence[Mapping[str, Any]]], refs: Refs | None = None
              ) -> dict[str, TrialSummary]:
    """Trial name -> its summary, for every row of the plan (a trial that has not run has no
    evals: no crossing, never a made-up one)."""
    spec = plan.sweep.spec.target
    reading = Reading(plan.rules.mode, plan.rules.smoothing)
    evals = {row.name: _evals(row, curves.get(row.name, []), spec.metric) for row in plan.rows}
    out = {}
    for name, t in targets(plan, curves, refs).items():
        base = None if t.baseline is None else evals[t.baseline.name]
        out[name] = summarize_trial(evals[name], t.value, base, reading, t.reference_best)
    return out


def arm_summaries(plan: Plan, curves: Mapping[str, Sequence[Mapping[str, Any]]],
                  rows: Sequence[PlanRow] | None = None) -> list[arms.ArmSummary]:
    """One summary per arm: its seeds' medians and intervals, and the paired comparison with
    its baseline arm (:mod:`scalesweep.science.stats.arms`), each interval at the design's
    per-look confidence. ``rows``: the trials that ran (an adaptive sweep runs only some of
    its plan), by default all."""
    refs = _refs(plan, curves)  # once: every target and note below reads the same bests
    summaries = summarize(plan, curves, refs)
    ran = [summaries[row.name] for row in (plan.rows if rows is None else rows)]
    axes = {row.arm: {k: v for k, v in row.axes.items() if k != "seed"}
            for row in (plan.rows if rows is None else rows)}
    notes = tuple(w for r in refs.values() for w in r.warnings())
    rules = replace(plan.rules, target=headline_target(plan, curves, refs), notes=notes)
    return arms.summarize_arms(ran, {s.arm: s.baseline_arm for s in ran}, rules, axes)
