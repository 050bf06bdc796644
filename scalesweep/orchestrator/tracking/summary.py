"""Per-trial convergence summaries: the fields of the summary JSON and the MLflow summaries."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from scalesweep.mlflow_names import BRACKETS, SUMMARY_METRICS
from scalesweep.orchestrator.plan import adaptive
from scalesweep.orchestrator.plan.rows import Plan, PlanRow
from scalesweep.orchestrator.spec.load import metric_mode
from scalesweep.science.stats import arms
from scalesweep.science.stats import convergence as conv


def points(curve: Sequence[Mapping[str, Any]], metric: str) -> list[conv.EvalPoint]:
    return [
        conv.EvalPoint(update=float(r["update"]), samples_seen=float(r["samples_seen"]),
                       epoch=float(r["epoch"]), wall_s=float(r["wall_s"]),
                       value=float(r[metric]))
        for r in curve if r.get(metric) is not None
    ]


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


def summarize(plan: Plan, curves: Mapping[str, Sequence[Mapping[str, Any]]]
              ) -> dict[str, dict[str, Any]]:
    """Trial name -> summary fields (None when never reached / not applicable)."""
    spec = plan.sweep.spec.target
    mode = metric_mode(plan.sweep)
    out: dict[str, dict[str, Any]] = {}
    resolved = targets(plan, curves)
    for row in plan.rows:
        curve = curves.get(row.name, [])
        target, base = resolved[row.name]
        pts = points(curve, spec.metric)
        dev = [float(r["dev_loss"]) for r in curve if r.get("dev_loss") is not None]
        summary: dict[str, Any] = dict.fromkeys((*SUMMARY_METRICS, *BRACKETS, "crossing"))
        if target is not None and pts:
            base_crossing = None
            if base is not None:
                base_crossing = conv.locate(points(curves.get(base.name, []), spec.metric),
                                            target, mode, spec.smoothing).crossing
            s = conv.summarize(pts, target, mode, baseline=base_crossing,
                               smoothing=spec.smoothing, global_batch=row.global_batch,
                               baseline_global_batch=base.global_batch if base else None,
                               dev_loss=dev or None)
            summary.update(s.as_dict())
        elif dev:
            finite = [v for v in dev if math.isfinite(v)]
            summary["final_dev_loss"] = dev[-1] if math.isfinite(dev[-1]) else None
            summary["best_dev_loss"] = min(finite) if finite else None
        last = curve[-1] if curve else {}
        summary["train_seconds"] = last.get("train_seconds", last.get("wall_s"))
        summary["target_value"] = target
        summary["baseline_trial"] = base.name if base else None
        summary["arm"] = row.arm
        summary["baseline_arm"] = base.arm if base else None
        out[row.name] = summary
    return out


def arm_summaries(plan: Plan, curves: Mapping[str, Sequence[Mapping[str, Any]]],
                  rows: Sequence[PlanRow] | None = None) -> list[dict[str, Any]]:
    """One arms.json object per arm: its seeds' medians and intervals, and the paired
    comparison with its baseline arm (:mod:`scalesweep.science.stats.arms`), each interval at
    the design's per-look confidence. ``rows``: the trials that ran (an adaptive sweep runs
    only some of its plan), by default all."""
    spec = plan.sweep.spec.target
    mode = metric_mode(plan.sweep)
    trials, baseline_arm, axes = [], {}, {}
    resolved = targets(plan, curves)
    for row in plan.rows if rows is None else rows:
        target, base = resolved[row.name]
        pts = points(curves.get(row.name, []), spec.metric)
        located = conv.locate(pts, target, mode, spec.smoothing) if target is not None and pts else None
        trials.append(arms.TrialCrossing(row.arm, row.seed, located, pts))
        baseline_arm[row.arm] = base.arm if base else None
        axes[row.arm] = {k: v for k, v in row.axes.items() if k != "seed"}
    headline = {target for target, _ in resolved.values()}
    single = next(iter(headline)) if len(headline) == 1 and not spec.per_seed else None
    rules = arms.Rules(confidence=adaptive.design(plan).per_look, margin=spec.equivalence_margin,
                       levels=tuple(spec.levels), mode=mode, smoothing=spec.smoothing, target=single)
    return [a.as_json(axes[a.arm]) for a in arms.summarize_arms(trials, baseline_arm, rules)]
