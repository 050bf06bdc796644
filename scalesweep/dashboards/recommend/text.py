"""`scalesweep recommend`'s text: the recipe at M (lr factor and lr, warmup), each number with
its interval or range and the model it came from, the epochs ratio M over N with its interval
and method, and the notes (docs/beyond.md, "recommend")."""

from __future__ import annotations

import math

from scalesweep.science.recommend.recommendation import Recommendation


def _g(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else "inf"


def band(ci: tuple[float, float], confidence: float | None) -> str:
    """``[lo, hi] (90%)`` for a confidence interval; a range says it is not one."""
    text = f"[{_g(ci[0])}, {_g(ci[1])}]"
    return f"{text} ({confidence:.0%})" if confidence is not None else \
        f"{text} (a range, not a confidence interval)"


def render(rec: Recommendation) -> str:
    r = rec.recipe
    lr, w, e = r.lr, r.warmup, r.epochs_ratio
    lines = [f"study {rec.experiment} (parent run {rec.parent_run_id}): recipe at {rec.world_size_m} "
             f"workers (global batch {rec.batch_m:g}) from N = {rec.world_size_n} workers "
             f"({rec.batch_n:g}); reference {rec.reference_world_size} workers "
             f"({rec.reference_batch:g})",
             f"lr factor: {lr.factor:.3g} {band(lr.ci, lr.confidence)} x the reference's lr"]
    lr_ci = rec.lr_ci
    if rec.lr is not None and rec.reference_lr is not None and lr_ci is not None:
        lines[-1] += f" {rec.reference_lr:.4g} = lr {rec.lr:.4g} {band(lr_ci, lr.confidence)}"
    lines.append(f"  model: {lr.source}")
    lines.append(f"warmup: {rec.warmup_steps} updates (rule {w.rule}: {w.updates:.4g} from the "
                 f"reference's {rec.reference_warmup:g})")
    lines.append(f"  model: {w.source}")
    if e is None:
        lines.append("epochs ratio M/N: none (see the notes)")
    else:
        lines.append(f"epochs ratio M/N: {e.median:.3g} {band(e.ci, e.confidence)}, against N's "
                     f"best arm {rec.n_arm} ({rec.n_epochs_median:.3g} epochs to target)")
        lines.append(f"  method: {e.source}")
        if e.lr_penalty > 1.0:
            lines.append(f"  upper end raised {e.lr_penalty:.4g}x for the lr interval (the bowl at N)")
    if rec.lr_arms:
        lines.append("lr arms at N, median epochs ratio to the baseline: "
                     + "; ".join(f"x{a.factor:.3g} {_g(a.median_ratio)} ({a.seeds} seeds)"
                                 for a in rec.lr_arms))
    if lr.bowl is not None and lr.bowl.factor is not None:
        lines.append(f"  best factor at N: {lr.bowl.factor:.3g} {band(lr.bowl.ci, lr.bowl.confidence)}"
                     f" (best measured {lr.bowl.best_measured:.3g})")
    lines.append("noise scale (late training, median): "
                 + ("not measured" if rec.noise_scale is None else f"{rec.noise_scale:.4g} samples"))
    notes = [*lr.notes, *w.notes, *(e.notes if e is not None else ()), *r.notes]
    if notes:
        lines.append("notes:")
        lines += [f"  - {n}" for n in notes]
    return "\n".join(lines)
