"""Per-trial convergence summaries: the fields of the summary JSON and the MLflow summaries."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.plan import Plan, PlanRow
from orchestrator.sweep import metric_mode
from trainables import convergence as conv

SUMMARY_METRICS = ("updates_to_target", "samples_to_target", "epochs_to_target",
                   "seconds_to_target", "final_dev_loss", "best_dev_loss", "speedup_vs_baseline",
                   "scaling_efficiency", "train_seconds")


def points(curve: Sequence[Mapping[str, Any]], metric: str) -> list[conv.EvalPoint]:
    return [
        conv.EvalPoint(update=float(r["update"]), samples_seen=float(r["samples_seen"]),
                       epoch=float(r["epoch"]), wall_s=float(r["wall_s"]),
                       value=float(r[metric]))
        for r in curve if r.get(metric) is not None
    ]


def target_for(plan: Plan, row: PlanRow, curves: Mapping[str, Sequence[Mapping[str, Any]]]
               ) -> tuple[float | None, PlanRow | None]:
    """The absolute target for ``row`` (relative targets read its baseline's best) and the
    baseline row; target None when a relative target's baseline never produced a value."""
    spec = plan.sweep.spec.target
    mode = metric_mode(plan.sweep)
    base = plan.baseline_for(row)
    if spec.value is not None:
        return spec.value, base
    if base is None:
        return None, None
    values = [p.value for p in points(curves.get(base.name, []), spec.metric)]
    best = conv.best_value(conv.smooth(values, spec.smoothing), mode) if values else None
    if best is None:
        return None, base
    return conv.resolve_target(mode, relative=spec.relative_to_baseline, baseline_best=best), base


def summarize(plan: Plan, curves: Mapping[str, Sequence[Mapping[str, Any]]]
              ) -> dict[str, dict[str, Any]]:
    """Trial name -> summary fields (None when never reached / not applicable)."""
    spec = plan.sweep.spec.target
    mode = metric_mode(plan.sweep)
    out: dict[str, dict[str, Any]] = {}
    for row in plan.rows:
        curve = curves.get(row.name, [])
        target, base = target_for(plan, row, curves)
        pts = points(curve, spec.metric)
        dev = [float(r["dev_loss"]) for r in curve if r.get("dev_loss") is not None]
        summary: dict[str, Any] = dict.fromkeys(SUMMARY_METRICS)
        if target is not None and pts:
            base_crossing = None
            if base is not None:
                base_crossing = conv.first_crossing(points(curves.get(base.name, []), spec.metric),
                                                    target, mode, spec.smoothing)
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
        out[row.name] = summary
    return out
