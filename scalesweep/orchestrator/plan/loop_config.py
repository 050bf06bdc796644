"""The ``config`` a train_loop trial's ``train_loop_per_worker`` receives (docs/workloads.md,
"Your own Ray Train loop"): its row of ``scalesweep plan --json``, plus what the loop needs to
train as planned."""

from __future__ import annotations

from typing import Any

from scalesweep.orchestrator.plan.rows import PlanRow


def loop_config(row: PlanRow, train_size: int) -> dict[str, Any]:
    """Every field of the row's plan JSON (``world_size``, ``global_batch``, ``per_worker_batch``,
    ``accum_grad``, ``seed``, ``epochs``, ``base_lr``, ``peak_lr``, ``lr``, ``warmup_steps``,
    ``updates_per_epoch``, ``total_updates``, ``eval_every``, ...), but ``scheduler``: the
    resolved spec (type and every parameter after the lr and warmup rules) in place of the
    row's name of it; plus ``optimizer`` (resolved too), ``train_size``, ``options`` (the
    sweep's ``workload.options``) and ``grad_clip``. Plain JSON values: it is a Tune config.
    One key holds the schedule: ``schedule``, its old duplicate, is gone (docs/workloads.md);
    ``loop_schedule`` still reads it in a config an older version made."""
    trial = row.trial
    return {
        **row.to_json(),
        "scheduler": trial.scheduler.as_dict(),
        "optimizer": trial.optimizer.as_dict(),
        "train_size": train_size,
        "options": dict(trial.workload_options),
        "grad_clip": trial.grad_clip,
    }
