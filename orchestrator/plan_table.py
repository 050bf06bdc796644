"""The human-readable plan: one line per trial, the numbers that explain the study."""

from __future__ import annotations

from orchestrator.plan import Plan


def format_plan(plan: Plan, verbose: bool = False) -> str:
    sweep = plan.sweep
    cols = ["trial", "ws", "rule", "warmup", "global_batch", "lr", "peak_lr", "warmup_steps",
            "warmup_epochs", "upd/epoch", "updates", "epochs", "backend", "PxA", "ok"]
    rows = []
    for r in plan.rows:
        rows.append([
            r.name, str(r.world_size), r.scaling_rule, str(r.warmup_rule), str(r.global_batch),
            f"{r.lr:.4g}", f"{r.peak_lr:.4g}", str(r.warmup_steps), f"{r.warmup_epochs:.2f}",
            str(r.updates_per_epoch), str(r.total_updates), f"{r.epochs:.3g}", r.backend,
            f"{r.physical_workers}x{r.world_size // r.physical_workers * r.accum_grad}",
            "yes" if r.feasible else "NO",
        ])
    widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c)
              for i, c in enumerate(cols)]
    lines = [f"study {sweep.spec.name}: {len(plan.rows)} trials, workload {sweep.spec.workload.name} "
             f"({sweep.workload.train_size()} train samples), target {sweep.spec.target.metric} "
             f"{_target(plan)}, on {plan.cluster.where} ({plan.cluster.cpus:g} CPUs, "
             f"{plan.cluster.gpus:g} GPUs)"]
    lines.append("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
    for row in rows:
        lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
    for r in plan.rows:
        if not r.feasible:
            lines.append(f"  {r.name}: cannot run: {r.reason}")
    adjustments = [(r.name, n) for r in plan.rows for n in r.notes]
    if adjustments:
        lines.append("adjustments:")
        lines.extend(f"  {name}: {note}" for name, note in adjustments)
    for note in plan.notes:
        lines.append(f"note: {note}")
    if verbose and sweep.recipe is not None:
        lines.append(f"recipe {sweep.recipe.source} ({sweep.recipe.kind}); ignored sections:")
        lines.extend(f"  {k}" for k in sweep.ignored) if sweep.ignored else lines.append("  (none)")
    elif sweep.ignored:
        lines.append(f"recipe {sweep.recipe.source if sweep.recipe else ''}: "
                     f"{len(sweep.ignored)} sections not used by scalesweep (list them with -v)")
    return "\n".join(lines)


def _target(plan: Plan) -> str:
    t = plan.sweep.spec.target
    if t.value is not None:
        return f"= {t.value:g}"
    return f"within {t.relative_to_baseline:.0%} of the baseline's best"
