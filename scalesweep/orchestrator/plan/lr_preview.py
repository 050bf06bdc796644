"""`scalesweep lr`: the lr (and momentum) a recipe's scheduler gives at every update."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from scalesweep.orchestrator.spec.errors import InputError, Problem
from scalesweep.orchestrator.spec.files import load_mapping
from scalesweep.orchestrator.spec.recipes import read_recipe
from scalesweep.science import optimizers, schedules
from scalesweep.science.batching import updates_per_epoch

MAX_UPDATES = 10_000_000


@dataclass
class Preview:
    source: str
    scheduler: schedules.ScheduleSpec
    base_lr: float
    rows: list[tuple[int, float, float | None]]
    per_worker_batch: int | None
    accum_grad: int
    world_sizes: tuple[int, ...] = ()  # from a sweep file's axes
    dataset_size: int | None = None  # from a sweep file's workload
    #: a sweep file with batch ramps: every arm's lr per epoch as its trials run it
    arms: list[ArmCurve] = field(default_factory=list)
    #: a sweep file with an optimizer rule or a proportional warmup: "arm: change" for each
    #: value they change, which the base schedule's CSV does not show
    rule_notes: list[str] = field(default_factory=list)


@dataclass
class ArmCurve:
    """One arm's lr at every update, against epochs, and where its ramp's stages start."""

    arm: str
    epochs: list[float]
    lrs: list[float]
    stage_starts: list[tuple[float, int]]  # (epoch, world size) of each stage after the first


def preview(path: str | Path, updates: int) -> Preview:
    if not 1 <= updates <= MAX_UPDATES:
        raise InputError("--updates", [Problem("--updates", updates,
                                               f"must be between 1 and {MAX_UPDATES}")])
    src = str(path)
    raw = load_mapping(path)
    world_sizes: tuple[int, ...] = ()
    dataset_size = None
    origins: dict[str, str] = {}
    arms: list[ArmCurve] = []
    rule_notes: list[str] = []
    if "axes" in raw or "workload" in raw:  # a sweep file: its settings before the axes apply
        from scalesweep.orchestrator.spec.load import load_sweep

        sweep = load_sweep(path)
        sched, opt, training = (dict(sweep.base.scheduler), sweep.base.optimizer,
                                sweep.base.training)
        world_sizes = tuple(sweep.spec.axes.world_size)
        dataset_size = sweep.workload.train_size()
        origins = sweep.base.origins
        if sweep.training.batch_ramp or "training.batch_ramp" in sweep.spec.axes.free_axes():
            arms = _arm_curves(sweep)
        rule_notes = _rule_notes(sweep)
    else:
        recipe = read_recipe(path)
        sched = dict(recipe.settings.get("scheduler") or {})
        opt = recipe.settings.get("optimizer") or {}
        training = recipe.settings.get("training") or {}
        origins = recipe.origins
    if not sched:
        raise InputError(src, [Problem("scheduler", None, "the file has no scheduler block")])
    problems = []
    kind = None
    with contextlib.suppress(ValueError):  # resolve names a bad type
        kind = schedules.SCHEDULE_TYPES[schedules.canonical_name(str(sched.get("type")))]
    lr = opt.get("lr")
    if kind is not None and kind.reads_optimizer_lr({k: v for k, v in sched.items() if k != "type"}):
        if lr is None:
            problems.append(Problem("optimizer lr", None,
                                    f"{kind.name} scales the optimizer's lr: the file must give it"))
        elif isinstance(lr, bool) or not isinstance(lr, int | float) or lr <= 0:
            problems.append(Problem(origins.get("optimizer.lr", "lr"), lr, "must be > 0"))
    base_lr = float(lr) if isinstance(lr, int | float) and not isinstance(lr, bool) and lr > 0 else 1.0
    spec = None
    try:  # the one judge of the schedule
        spec = schedules.resolve(sched, base_lr)  # counts: integral as layered or read
    except schedules.ScheduleError as exc:
        problems += [Problem(origins.get(f"scheduler.{p.field}", p.field), p.value, p.rule)
                     for p in exc.problems]
    if problems or spec is None:
        raise InputError(src, problems)
    # a total given as auto is the run's length: here, the updates asked for
    spec = schedules.fill_auto(spec, updates)
    schedule = schedules.build(spec, base_lr)
    rows = schedules.table(schedule, updates)
    if not moves_momentum(opt.get("type")):
        rows = [(k, lr_k, None) for k, lr_k, _ in rows]
    batch = training.get("per_worker_batch")
    return Preview(source=src, scheduler=spec, base_lr=base_lr, rows=rows,
                   per_worker_batch=batch if isinstance(batch, int) else None,
                   accum_grad=int(training.get("accum_grad", 1) or 1),
                   world_sizes=world_sizes, dataset_size=dataset_size, arms=arms,
                   rule_notes=rule_notes)


def _arm_curves(sweep: Any) -> list[ArmCurve]:
    """Each arm's lr per epoch, its rules and ramp applied, from the plan's first trial of it
    (the seed changes neither): what a ramp does to the lr is seen only per trial."""
    from scalesweep.orchestrator.plan.rows import make_plan

    plan = make_plan(sweep)
    size = sweep.workload.train_size()
    curves, seen = [], set()
    for row in plan.rows:
        if row.arm in seen:
            continue
        seen.add(row.arm)
        trial = row.trial
        data = trial.data_plan(size)
        schedule = schedules.build(trial.scheduler, trial.optimizer.lr)
        ks = range(1, trial.total_updates + 1)
        curves.append(ArmCurve(
            arm=row.arm, epochs=[data.epoch(k) for k in ks],
            lrs=[schedule.lr(data.position(k)) * data.segment(k).lr_multiplier for k in ks],
            stage_starts=[(float(s.first_epoch), s.world_size) for s in data.segments[1:]]))
    return curves


def _rule_notes(sweep: Any) -> list[str]:
    """Per arm, what its optimizer rule and a proportional warmup change (beta2, weight decay,
    warmup counts): the plan's own notes, each arm once; none where the sweep uses neither."""
    axes = sweep.spec.axes
    if axes.optimizer_rule is None and "proportional" not in axes.warmup_rule:
        return []
    from scalesweep.orchestrator.plan.rows import make_plan

    seen: set[str] = set()
    out = []
    for row in make_plan(sweep).rows:
        if row.arm in seen or (row.axes.get("optimizer_rule", "none") == "none"
                               and row.warmup_rule != "proportional"):
            continue
        seen.add(row.arm)
        out += [f"{row.arm}: {n}" for n in row.notes
                if n.startswith(("optimizer.betas", "optimizer.weight_decay"))
                or "proportional x" in n]
    return out


def moves_momentum(optimizer_type: Any) -> bool:
    """Whether the schedule's momentum reaches the optimizer: only one with ``betas`` (DeepSpeed's
    OneCycle turns ``cycle_momentum`` off when ``betas`` is not in the optimizer's defaults, and
    the loop sets beta1 only where a group has betas); an unknown optimizer (a DeepSpeed JSON
    without an optimizer block: the client's own) is taken to have betas."""
    return optimizer_type is None or optimizer_type in optimizers.BETAS_TYPES


def write_csv(p: Preview, out: IO[str] | None = None) -> None:
    out = out if out is not None else sys.stdout  # looked up now: callers may redirect it
    with_mom = any(m is not None for _, _, m in p.rows)
    out.write("update,lr,momentum\n" if with_mom else "update,lr\n")
    for k, lr, mom in p.rows:
        out.write(f"{k},{lr!r},{mom!r}\n" if with_mom else f"{k},{lr!r}\n")


def plot(p: Preview, png: str | Path, world_sizes: Sequence[int] = (),
         dataset_size: int | None = None) -> None:
    """lr against update and, when the data size is known, against epoch for each world size
    (the WeNet analysis plot: the same schedule stretched over 4x the epochs at 4x the GPUs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    world_sizes = tuple(world_sizes) or p.world_sizes
    dataset_size = dataset_size or p.dataset_size
    by_epoch = bool(world_sizes and dataset_size and p.per_worker_batch)
    panels = 1 + by_epoch + bool(p.arms)
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels if panels > 1 else 7, 4.2),
                             squeeze=False)
    ks = [k for k, _, _ in p.rows]
    lrs = [lr for _, lr, _ in p.rows]
    moms = [m for _, _, m in p.rows]
    ax = axes[0][0]
    ax.plot(ks, lrs, color="tab:blue", label="lr")
    ax.set_xlabel("optimizer update")
    ax.set_ylabel("lr")
    ax.set_title(f"{p.scheduler.type} ({Path(p.source).name})")
    if any(m is not None for m in moms):
        ax2 = ax.twinx()
        ax2.plot(ks, moms, color="tab:orange", label="momentum")
        ax2.set_ylabel("momentum (beta1)", color="tab:orange")
    if by_epoch:
        assert dataset_size is not None and p.per_worker_batch is not None
        ax = axes[0][1]
        for ws in world_sizes:
            upe = updates_per_epoch(dataset_size, ws, p.per_worker_batch, p.accum_grad)
            if upe:
                ax.plot([k / upe for k in ks], lrs, label=f"{ws} workers ({upe} updates/epoch)")
        ax.set_xlabel("epoch")
        ax.set_ylabel("lr")
        ax.set_title(f"same schedule per epoch; {dataset_size} samples, batch "
                     f"{p.per_worker_batch} x accum {p.accum_grad}")
        ax.legend()
    if p.arms:
        ax = axes[0][-1]
        for i, curve in enumerate(p.arms):
            color = f"C{i}"
            ax.plot(curve.epochs, curve.lrs, color=color, label=curve.arm)
            for epoch, ws in curve.stage_starts:
                ax.axvline(epoch, color=color, linestyle=":", linewidth=1)
                ax.annotate(f"-> {ws}", (epoch, 0), xycoords=("data", "axes fraction"),
                            xytext=(2, 4), textcoords="offset points", color=color, fontsize=8)
        ax.set_xlabel("epoch")
        ax.set_ylabel("lr")
        ax.set_title("each arm as it runs: rules and batch ramp applied (stages dotted)",
                     fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
