"""The human-readable plan: one line per trial, the numbers that explain the study."""

from __future__ import annotations

from scalesweep.orchestrator.plan import adaptive
from scalesweep.orchestrator.plan.regime import format_regime
from scalesweep.orchestrator.plan.rows import Plan
from scalesweep.science import scaling


def format_plan(plan: Plan, verbose: bool = False) -> str:
    sweep = plan.sweep
    cols = ["trial", "ws", "rule", "warmup", "global_batch", "lr", "peak_lr", "warmup_steps",
            "warmup_epochs", "upd/epoch", "updates", "epochs", "backend", "PxA", "ok"]
    ramps = any(r.batch_ramp != "none" for r in plan.rows)
    if ramps:
        cols.insert(4, "ramp")
    rows = []
    for r in plan.rows:
        rows.append([
            r.name, str(r.world_size), scaling.rule_label(r.scaling_rule), str(r.warmup_rule),
            str(r.global_batch),
            f"{r.lr:.4g}", f"{r.peak_lr:.4g}", str(r.warmup_steps), f"{r.warmup_epochs:.2f}",
            str(r.updates_per_epoch), str(r.total_updates), f"{r.epochs:.3g}", r.backend,
            _workers(r.world_size, r.physical_workers, r.accum_grad),
            "yes" if r.feasible else "NO",
        ])
        if ramps:  # before global_batch: the stages that come before the trial's own batch
            rows[-1].insert(4, r.batch_ramp)
    widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c)
              for i, c in enumerate(cols)]
    lines = [f"study {sweep.spec.name}: {len(plan.rows)} trials, workload {sweep.spec.workload.label} "
             f"({sweep.workload.train_size()} train samples), target {sweep.spec.target.metric} "
             f"{_target(plan)}, on {plan.cluster.where} ({plan.cluster.cpus:g} CPUs, "
             f"{plan.cluster.gpus:g} GPUs)"]
    lines.append("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
    for row in rows:
        lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
    for r in plan.rows:
        if not r.feasible:
            lines.append(f"  {r.name}: cannot run: {r.reason}")
    lines.extend(format_regime(plan))
    adjustments = [(r.name, n) for r in plan.rows for n in r.notes]
    if adjustments:
        lines.append("adjustments:")
        lines.extend(f"  {name}: {note}" for name, note in adjustments)
    for note in plan.notes:
        lines.append(f"note: {note}")
    if (seeds := adaptive.describe(plan)) is not None:
        lines.append(f"note: {seeds}")
    if (power := adaptive.describe_power(plan)) is not None:
        lines.append(power if power.startswith("warning:") else f"note: {power}")
    if (fusion := adaptive.describe_fusion(plan)) is not None:
        lines.append(f"note: {fusion}")
    if sweep.recipe is not None:
        lines.extend(_recipe_settings(plan))
    if verbose and sweep.recipe is not None:
        lines.append(f"recipe {sweep.recipe.source} ({sweep.recipe.kind}); ignored sections:")
        lines.extend(f"  {k}" for k in sweep.ignored) if sweep.ignored else lines.append("  (none)")
    elif sweep.ignored:
        lines.append(f"recipe {sweep.recipe.source if sweep.recipe else ''}: "
                     f"{len(sweep.ignored)} sections not used by scalesweep (list them with -v)")
    return "\n".join(lines)


#: training settings worth showing beside a recipe's optimizer and schedule
_TRAINING_SHOWN = ("per_worker_batch", "accum_grad", "grad_clip", "epochs", "max_updates")


def _recipe_settings(plan: Plan) -> list[str]:
    """What the trials run before the axes apply, each value with where it came from: the
    recipe's own key, the rule the framework derives it by, the sweep or a default."""
    sweep = plan.sweep
    assert sweep.recipe is not None
    base = sweep.base
    lines = [f"settings from recipe {sweep.recipe.source} ({sweep.recipe.kind}), before the axes:"]
    rows: list[tuple[str, str, str]] = []
    for section in ("optimizer", "scheduler", "training"):
        values: dict[str, object] = getattr(base, section)
        keys = [k for k in values if section != "training" or k in _TRAINING_SHOWN]
        for key in keys:
            path = f"{section}.{key}"
            rows.append((path, repr(values[key]), base.origins.get(path, "?")))
    if plan.rows:
        ref_gb = plan.rows[0].reference_global_batch
        spec_ref = sweep.spec.reference
        if spec_ref is not None and spec_ref.global_batch is not None:
            how = "sweep: reference.global_batch"
        else:
            batch, accum = sweep.training.per_worker_batch, sweep.training.accum_grad
            how = (f"reference world size {sweep.reference_world_size} * per_worker_batch {batch} "
                   f"* accum_grad {accum}")
            ds = sweep.deepspeed_batch
            if ds is not None and ds.train_batch == ref_gb:
                given = ds.how["train_batch_size"]
                how += (f" = {sweep.recipe.source}: train_batch_size"
                        + ("" if given == "given" else f" ({given})"))
        rows.append(("reference global batch", str(ref_gb), how))
    width = max(len(f"{p} = {v}") for p, v, _ in rows)
    lines.extend(f"  {f'{p} = {v}'.ljust(width)}  <- {o}" for p, v, o in rows)
    return lines


def _workers(ws: int, workers: int, accum: int) -> str:
    """The PxA column: P workers x micro-batches per worker and update ("2x4"); where P does
    not divide ws, the two shares, the first ws mod P workers' first ("3x12/10" for ws 16,
    accum 2: 6, 5, 5 virtual ranks; the row's note says who plays what)."""
    q, r = divmod(ws, workers)
    if not r:
        return f"{workers}x{q * accum}"
    return f"{workers}x{(q + 1) * accum}/{q * accum}"


def _target(plan: Plan) -> str:
    t = plan.sweep.spec.target
    if t.value is not None:
        return f"= {t.value:g}"
    text = f"within {t.relative_to_baseline:.0%} of the baseline's best"
    base = next((r for r in plan.rows if plan.baseline_for(r) is r), None)
    if base is None:
        return text
    # docs/design.md §4, "Target": the best is read within H / (1 + d), so that an arm that
    # never meets the target by H is at least about (1 + d)x slower: "never" decides
    d = plan.rules.margin
    return (f"{text} within its first {base.epochs / (1 + d):.3g} of {base.epochs:.3g} epochs "
            f"(horizon / (1 + margin {d:g}): a seed that never reaches it by the end is about "
            f"{1 + d:g}x slower or more), cross-fitted, frozen at the first look")
