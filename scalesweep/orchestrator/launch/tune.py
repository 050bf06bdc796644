"""Ray Tune wiring: one Tune trial per plan row, resources sized so nothing waits forever."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ray import tune

from scalesweep.mlflow_names import STEP_KEY
from scalesweep.orchestrator.plan import adaptive
from scalesweep.orchestrator.plan.loop_config import loop_config
from scalesweep.orchestrator.plan.rows import Plan, PlanRow
from scalesweep.orchestrator.tracking.callback import SweepCallback
from scalesweep.orchestrator.tracking.tracker import SweepTracker
from scalesweep.trainables import checkpointing, trial_driver
from scalesweep.trainables.config import LoopHandover, TrialJob
from scalesweep.trainables.trial_driver import latest_checkpoint, simulate_checkpoints


def max_concurrent(plan: Plan, rows: list[PlanRow]) -> int:
    """How many trials may run at once. Tune would start a trial whenever its own (driver)
    resources fit, and a ddp driver's worker group then waits for CPUs other drivers hold; so
    for ddp we admit only as many trials as can hold their whole worker groups at once."""
    res = plan.sweep.spec.resources
    if res.max_concurrent_trials:
        return res.max_concurrent_trials
    cpus = max(plan.cluster.cpus, 1.0)
    per_trial = max(r.physical_workers * res.cpus_per_worker if r.backend == "ddp"
                    else res.cpus_per_worker for r in rows)
    return max(1, math.floor(cpus / per_trial + 1e-9))


def launch(plan: Plan, rows: list[PlanRow], sweep_dir: Path, tracker: SweepTracker,
           child_for: Callable[[str], str], curves: dict[str, list[dict[str, Any]]],
           callback: SweepCallback | None = None,
           interrupted: Callable[[], bool] = lambda: False,
           stopper: tune.Stopper | None = None) -> SweepCallback:
    """Run ``rows`` as one Tune experiment (``tune``, ``tune1``, ... in the sweep directory);
    ``callback``: the one an earlier round of the same sweep used, which goes on counting;
    ``stopper``: ends trials early (curtailment), asked at every result."""
    spec = plan.sweep.spec
    if callback is None:
        callback = SweepCallback(tracker, child_for, curves, total=len(rows))
    else:
        callback.total = (callback.total or 0) + len(rows)
    callback.interrupted = interrupted()
    if not rows:
        return callback
    res = spec.resources
    resume = {r.name: resume_checkpoint(sweep_dir, r) for r in rows}
    # fused seeds: a seed with a checkpoint (a fused trial's holds one per seed) goes on from it
    # alone; the others are fused again
    groups = [[r] for r in rows]
    if res.seeds_per_trial > 1:
        groups = (adaptive.fused_trials([r for r in rows if resume[r.name] is None], res.seeds_per_trial)
                  + [[r] for r in rows if resume[r.name] is not None])
    configs = []
    for group in groups:
        r, storage = group[0], str(sweep_dir / "train")
        if len(group) == 1:
            job = TrialJob(trial=r.trial, storage_path=storage, max_failures=spec.max_failures,
                           cpus_per_worker=res.cpus_per_worker, gpus_per_worker=res.gpus_per_worker,
                           resume_from=resume[r.name], loop=_loop_handover(plan, r, curves.get(r.name, [])))
        else:
            job = TrialJob(trial=r.trial.model_copy(update={"name": adaptive.fused_name(group)}),
                           storage_path=storage, max_failures=spec.max_failures,
                           cpus_per_worker=res.cpus_per_worker, gpus_per_worker=res.gpus_per_worker,
                           seeds=tuple(x.trial for x in group))
        configs.append(job.to_config())

    scheduler = None
    if spec.search.trial_scheduler == "asha":
        from scalesweep.orchestrator.spec.load import metric_mode

        scheduler = tune.schedulers.ASHAScheduler(
            metric=spec.target.metric, mode=metric_mode(plan.sweep), time_attr="epoch",
            max_t=math.ceil(max(r.epochs for r in rows)),
            grace_period=max(1, math.floor(min(r.epochs for r in rows) / 4)))
    run_index = len(list(sweep_dir.glob("tune*")))
    tuner = tune.Tuner(
        tune.with_resources(trial_driver.trainable, trial_driver.resources),
        param_space={"trial_config": tune.grid_search(configs)},
        tune_config=tune.TuneConfig(
            max_concurrent_trials=max_concurrent(plan, rows), reuse_actors=True,
            scheduler=scheduler,
            trial_name_creator=_trial_name, trial_dirname_creator=_trial_name),
        run_config=tune.RunConfig(
            name=f"tune{run_index}" if run_index else "tune", storage_path=str(sweep_dir),
            callbacks=[callback], verbose=0, stop=callback.stopper(stopper),
            failure_config=tune.FailureConfig(max_failures=spec.max_failures),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2)),
    )
    tuner.fit()
    return callback


def _loop_handover(plan: Plan, row: PlanRow, logged: list[dict[str, Any]]) -> LoopHandover | None:
    """A train_loop trial's ``loop_config`` (what its train_loop_per_worker receives) and
    ``wall_offset``: the training seconds its evals already in MLflow reached (a resumed trial's
    clock goes on from there)."""
    if row.trial.train_loop is None:
        return None
    walls = [float(e["wall_s"]) for e in logged if e.get("wall_s") is not None]
    # the furthest eval already logged: a trial resumed from its last checkpoint may have nothing
    # left to train, and ends with that report rather than with none
    evals = [e for e in logged if isinstance(e.get(STEP_KEY), int | float)]
    last = max(evals, key=lambda e: float(e[STEP_KEY]), default=None)
    resumed = None if last is None else {**{k: float(v) for k, v in last.items()
                                            if isinstance(v, int | float) and not isinstance(v, bool)},
                                         STEP_KEY: int(last[STEP_KEY])}
    return LoopHandover(loop_config=loop_config(row, plan.sweep.workload.train_size()),
                        wall_offset=max(walls, default=0.0), resumed_report=resumed)


def _trial_name(trial: Any) -> str:
    return TrialJob.name_in(trial.config)


def resume_report(sweep_dir: Path, row: PlanRow) -> dict[str, Any] | None:
    """The report of the checkpoint the resumed trial goes on from, or None: the built-in
    loop's is in the checkpoint's meta.json; a train_loop's beside the loop's files (the trial
    driver's callback wrote it)."""
    if row.trial.train_loop is not None:
        from scalesweep.trainables.user_loop import newest_report

        return newest_report(sweep_dir / "train" / trial_driver.run_name(row.trial, ""))
    checkpoint = resume_checkpoint(sweep_dir, row)
    return None if checkpoint is None else _meta_report(Path(checkpoint))


def _meta_report(checkpoint: Path) -> dict[str, Any] | None:
    """The metrics reported together with a built-in checkpoint (its meta.json), if readable."""
    try:
        meta = json.loads((checkpoint / "meta.json").read_text())
        report = meta["progress"]["last_report"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return report if isinstance(report, dict) and STEP_KEY in report else None


def resume_checkpoint(sweep_dir: Path, row: PlanRow) -> str | None:
    """The checkpoint an earlier (killed) run of this sweep left for ``row``, if any: simulate
    trials checkpoint through Tune (``tune*/<name>/``), ddp ones through Ray Train. None for a
    train_loop: Ray Train restores its run by name (``trial_driver.run_name``), and the loop
    gets its own latest checkpoint from ``ray.train.get_checkpoint()``; steps already logged
    stay logged once."""
    if row.trial.train_loop is not None:
        return None
    if row.backend == "ddp":
        return latest_checkpoint(sweep_dir / "train", row.trial)
    # newest first; a torn one (a copy a killed driver cut short) is passed over with a warning
    found = checkpointing.newest_complete(simulate_checkpoints(sweep_dir, row.name), label=row.name)
    return None if found is None else str(found)
