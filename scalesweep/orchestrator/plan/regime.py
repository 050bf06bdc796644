"""A study's regime in dimensionless numbers, beside the real job it stands in for
(docs/design.md §4.3, "Regime").

A small study answers for a long real job only where the two share their proportions: the
warmup's share of the run, the lr left at the end relative to the peak, how many updates there
are and how many samples are seen. `plan` computes them per arm, for the study and, given a
``reference_job:`` block, for the job at the GPUs each world size stands for, with the same
warmup rules applied to the job's own warmup; nothing is typed in by hand.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from scalesweep.orchestrator.plan.rows import Plan, PlanRow
from scalesweep.orchestrator.spec.load import job_recipe
from scalesweep.orchestrator.spec.reference_job import ReferenceJob
from scalesweep.science import schedules
from scalesweep.science.batching import updates_per_epoch

#: schedule params that count the whole run: set to the job's own total for the job's lr curve
_TOTALS = ("total_num_steps", "total_steps")


@dataclass(frozen=True)
class Regime:
    updates_per_epoch: int
    total_updates: int
    warmup_updates: int
    warmup_epochs: float
    #: the warmup's epochs over the run's (above 1: the run ends still warming up)
    warmup_share: float
    #: the lr of the last update over the schedule's peak
    lr_end_over_peak: float
    samples_seen: int

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _lr_end_over_peak(sched: schedules.ScheduleSpec, position: int) -> float:
    peak = schedules.peak_lr(sched, 1.0)
    return schedules.build(sched, 1.0).lr(max(1, position)) / peak if peak > 0 else 0.0


def study_regime(plan: Plan, row: PlanRow) -> Regime:
    """The trial's own regime, on its data plan (a batch ramp included)."""
    data = row.trial.data_plan(plan.sweep.workload.train_size())
    total = row.total_updates
    return Regime(updates_per_epoch=row.updates_per_epoch, total_updates=total,
                  warmup_updates=row.warmup_steps, warmup_epochs=row.warmup_epochs,
                  warmup_share=row.warmup_epochs / row.epochs if row.epochs else 0.0,
                  lr_end_over_peak=_lr_end_over_peak(row.trial.scheduler, round(data.position(total))),
                  samples_seen=data.samples(total))


def job_regime(plan: Plan, row: PlanRow, job: ReferenceJob) -> Regime | None:
    """The job's regime at the GPUs the row's world size stands for, the row's warmup rule
    applied to the job's warmup (fixed: as it is; scaled: x the reference GPUs over these;
    proportional: x the job's updates here over its updates at the reference; a number: the
    same fraction of the job's warmup as of the study's)."""
    sweep = plan.sweep
    if job.missing or row.world_size not in job.gpus:
        return None
    assert job.epochs is not None and job.per_gpu_batch is not None and job.warmup_steps is not None
    gpus = job.gpus[row.world_size]
    upe = updates_per_epoch(job.dataset_size, gpus, job.per_gpu_batch, job.accum_grad)
    total = max(1, round(upe * job.epochs))
    rule = row.warmup_rule
    if rule == "fixed":
        warmup = job.warmup_steps
    elif rule == "scaled":
        ref_gpus = job.gpus.get(sweep.reference_world_size or row.world_size, gpus)
        warmup = max(1, round(job.warmup_steps * ref_gpus / gpus))
    elif rule == "proportional":  # the same share of the job's run as at its reference
        ref_gpus = job.gpus.get(sweep.reference_world_size or row.world_size, gpus)
        ref_upe = updates_per_epoch(job.dataset_size, ref_gpus, job.per_gpu_batch, job.accum_grad)
        warmup = max(1, round(job.warmup_steps * total / max(1, round(ref_upe * job.epochs))))
    else:
        study_warmup = schedules.warmup_steps(sweep.scheduler) or 1
        warmup = max(1, round(job.warmup_steps * int(rule) / study_warmup))
    trial = row.trial.scheduler
    param = trial.kind.warmup_param
    # the job's own schedule: another one than the trial's, so judged on its own
    sched = schedules.resolve(trial.with_params(
        {**({} if param is None else {param: warmup}),
         **{key: total for key in _TOTALS if key in trial.params}}))
    batch = gpus * job.per_gpu_batch * job.accum_grad
    return Regime(updates_per_epoch=upe, total_updates=total, warmup_updates=warmup,
                  warmup_epochs=warmup / upe if upe else float("inf"),
                  warmup_share=warmup / total, lr_end_over_peak=_lr_end_over_peak(sched, total),
                  samples_seen=total * batch)


def regimes(plan: Plan) -> dict[str, dict[str, Any]]:
    """Trial name -> ``{"study": ..., "reference_job": ... or None}`` (plan --json's
    ``regime``)."""
    job = job_recipe(plan.sweep)
    return {r.name: {"study": study_regime(plan, r).as_json(),
                     "reference_job": None if job is None or (j := job_regime(plan, r, job)) is None
                     else j.as_json()}
            for r in plan.rows}


def format_regime(plan: Plan) -> list[str]:
    """One line per arm: each dimensionless number as job / study (the study alone without a
    reference job)."""
    job = job_recipe(plan.sweep)
    seen: set[str] = set()
    head = ("regime per arm" + ("" if job is None else f", reference job ({job.label}) / this study")
            + ": updates/epoch, total updates, warmup epochs, warmup share of the run, lr at the "
            "end / peak, samples seen")
    lines = [head]
    if job is not None and job.missing:
        lines.append(f"  (the reference job's regime is unknown: neither reference_job nor the recipe "
                     f"gives {', '.join(job.missing)})")
    elif job is not None and (off := sorted(set(plan.sweep.spec.axes.world_size) - set(job.gpus))):
        lines.append(f"  (reference_job.gpus gives no GPUs for world size {off}: — there)")
    for row in plan.rows:
        if row.arm in seen:
            continue
        seen.add(row.arm)
        s = study_regime(plan, row)
        j = None if job is None else job_regime(plan, row, job)

        def both(attr: str, fmt: str, s: Regime = s, j: Regime | None = j) -> str:
            mine = format(getattr(s, attr), fmt)
            if job is None:
                return mine
            return f"— / {mine}" if j is None else f"{format(getattr(j, attr), fmt)} / {mine}"

        lines.append(f"  {row.arm}: {both('updates_per_epoch', 'd')}, {both('total_updates', 'd')}, "
                     f"{both('warmup_epochs', '.3g')}, {both('warmup_share', '.0%')}, "
                     f"{both('lr_end_over_peak', '.2g')}, {both('samples_seen', '.3g')}")
    return lines
