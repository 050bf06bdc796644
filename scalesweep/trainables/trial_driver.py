"""The Tune function trainable that runs one trial on its backend.

``run_trial(job)`` with ``job`` a :class:`~scalesweep.trainables.config.TrialJob`: the
``TrialConfig`` and its storage path, retries, resources per worker, the checkpoint to start
from and, for a ``train_loop``, its handover. Tune keeps it as JSON in the trial's config
(``param_space={"trial_config": job.to_config()}``); Ray Train keeps the newest
``CHECKPOINTS_TO_KEEP`` checkpoints of a ddp run.

Backends:

* ``simulate``: the loop runs right here, in the Tune trial's process (P = 1), reporting each
  evaluation with ``ray.tune.report`` and resuming from ``ray.tune.get_checkpoint()``.
* fused seeds (``job.seeds``, ``resources.seeds_per_trial`` > 1; simulate only): the seeds
  train together in this process (:mod:`scalesweep.trainables.seed_fusion`), each report
  naming its seed's trial (``SEED_TRIAL_KEY``), a checkpoint holding each seed's newest; a
  retried one goes on from them (:func:`train_fused`; docs/design.md, "Fused seeds").
* ``ddp``: the Ray Train V2 pattern: this process only drives a ``TorchTrainer`` of P workers
  whose ``TuneReportCallback`` forwards rank 0's reports to Tune. The run is named
  ``<trial name>-<Tune trial id>``, so when Tune retries the trial (its FailureConfig) or the
  experiment is restored, the same name and storage path make Ray Train V2 restore the run
  from its latest checkpoint. A worker that dies is handled inside ``fit()``: V2 restarts the
  group from the latest checkpoint up to ``max_failures`` times. When those are spent, the
  trial reports itself ``failed`` (with the error) and returns instead of raising, so Tune does
  not retry it again: ``max_failures`` is one number of retries per trial, whichever layer
  restarts it (Tune's FailureConfig retries simulate trials, Ray Train's ddp ones). After
  ``fit()`` the trial reports only through :mod:`scalesweep.trainables.ray_train.tune_handover`.

Threads: a simulate trial runs torch with as many intra-op threads as the CPUs Ray reserved for
it (``cpus_per_worker``, at least 1; :func:`use_assigned_cpus`). Ray sets ``OMP_NUM_THREADS``
to that number only where the environment has not set it already (tests/integration/test_threads.py: a
2-CPU task under ``OMP_NUM_THREADS=1`` starts with 1 thread, a 1-CPU task under 8 with 2), so
the trial sets torch's count itself. Ray's reservations are fixed for a trial's life: CPUs
that finished trials free are not lent to the running ones (only Tune's
``ResourceChangingScheduler`` moves them, by pausing a trial and restoring it from a checkpoint
with new resources). A sweep that will run
fewer trials at a time than there are cores should ask for more CPUs per trial
(``resources.cpus_per_worker``); benchmarks/README.md measures what a second thread buys.

Resources (:func:`trial_resources`): a ddp trial's own process takes no CPU, since it only waits
on the worker group, which Ray Train places itself (its placement group, not the trial's). If
the driver took Tune's default 1 CPU, drivers could hold every CPU while their worker groups
waited for CPUs forever (V2 retries the group start without end). The runner must therefore
admit only as many trials at once as can hold their worker groups together:
``max_concurrent_trials <= floor(cluster CPUs / max over trials of P * cpus_per_worker)``
(likewise GPUs and, on CPU clusters, memory: ~0.6 GiB per worker here, so a 16-worker CPU
trial needs ~9-10 GiB), and must not start a trial whose group alone exceeds the cluster.

An elastic ddp trial's process is pinned to the head node (Ray's ``node:__internal_head__``
resource, as Ray Train pins its own state actor). Ray Train V2 places its controller on the
node of the process that calls ``fit()``, and the controller places Ray's autoscaling
coordinator, a detached actor pinned hard to that node, which elastic resizing asks for the
resources it may use. Were that the node that is lost, the coordinator could never come back
and the trial would wait for a resize decision forever, the one loss elasticity is for.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import ray.tune
from ray.tune import PlacementGroupFactory

from scalesweep.mlflow_names import ERROR_TAG, STATUS_TAG
from scalesweep.trainables import checkpointing, disk_full
from scalesweep.trainables.config import SEED_TRIAL_KEY, TrialConfig, TrialJob
from scalesweep.trainables.ray_train import tune_handover

# torch, the loop and the worlds are imported where a trial runs: the sweep driver imports this
# module for the trainable's name, its resources and its checkpoints' files, and needs no torch

CHECKPOINTS_TO_KEEP = 2
#: a ddp driver's whole reservation. Tune refuses a trial whose resources are all zero, and a
#: sliver of CPU would break the arithmetic above (4 CPUs could then host 3 workers, not 4).
DRIVER_MEMORY_BYTES = 256 * 2**20
#: Ray's own resource of the head node; a small share of it pins an actor there.
HEAD_NODE_RESOURCE = "node:__internal_head__"
HEAD_NODE_SHARE = 0.001
#: Ray Train V2's controller takes a worker's report off its one-slot queue only when it polls
#: the workers, every RAY_TRAIN_HEALTH_CHECK_INTERVAL_S (2 s by default), and ``report`` blocks
#: until then: a loop evaluating more often than that waited up to the whole interval at each
#: eval. A poll is one small actor call per worker, so a short interval costs little CPU.
REPORT_POLL_ENV = "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"
REPORT_POLL_S = 0.05


def trainable(config: dict[str, Any]) -> None:
    """What Tune runs (``param_space={"trial_config": ...}``).

    Tune's trial processes import the module of the function they run; this one, unlike the
    sweep runner's modules, pulls in neither MLflow nor the planner (0.9 CPU seconds per trial
    process on 2 cores, benchmarks/README.md), and Ray Train only when the trial is ddp.
    """
    run_trial(TrialJob.model_validate(config["trial_config"]))


def resources(config: dict[str, Any]) -> PlacementGroupFactory:
    """``tune.with_resources``' per-trial resources for :func:`trainable`'s config."""
    job = TrialJob.model_validate(config["trial_config"])
    return trial_resources(job.trial, job.cpus_per_worker, job.gpus_per_worker)


def run_trial(job: TrialJob) -> None:
    """Run ``job``'s trial on its backend (see module docs)."""
    trial = job.trial
    if job.seeds:
        _run_fused(job)
    elif trial.backend == "simulate":
        storage = job.storage_path  # <sweep dir>/train
        _run_simulate(trial, job.resume_from, Path(storage).parent if storage else None)
    else:
        _run_ddp(trial, job)


def trial_resources(
    trial: TrialConfig, cpus_per_worker: float, gpus_per_worker: float = 1.0
) -> PlacementGroupFactory:
    """What the Tune trial itself reserves (for ``tune.with_resources``).

    simulate: one worker's share, since the trial's process does all the training.
    ddp: memory only -- the worker group reserves its own resources (see module docs); an
    elastic one also a share of the head node, where it must run.
    """
    bundle: dict[str, float]
    if trial.backend == "simulate":
        bundle = {"CPU": cpus_per_worker, **_memory(trial)}
        if trial.use_gpu:
            bundle["GPU"] = gpus_per_worker
        return PlacementGroupFactory([bundle])
    bundle = {"CPU": 0, "memory": DRIVER_MEMORY_BYTES}
    if trial.min_workers is not None:  # elastic: on the node it must outlive (module docs)
        bundle[HEAD_NODE_RESOURCE] = HEAD_NODE_SHARE
    return PlacementGroupFactory([bundle])


def worker_group_resources(
    trial: TrialConfig,
    cpus_per_worker: float,
    gpus_per_worker: float = 1.0,
) -> dict[str, float]:
    """Ray Train's reservation per worker of a ddp trial (P of them, placed together)."""
    resources = {"CPU": float(cpus_per_worker), **_memory(trial)}
    if trial.use_gpu:
        resources["GPU"] = float(gpus_per_worker)
    return resources


def _memory(trial: TrialConfig) -> dict[str, float]:
    """Ray's ``memory`` resource (bytes) for one worker of ``trial``: what it may hold
    (``resources.memory_per_worker``), so that Ray places no more workers on a node than it
    holds; none asked, none reserved."""
    gib = trial.memory_per_worker_gb
    return {} if gib is None else {"memory": gib * 2**30}


def run_name(trial: TrialConfig, trial_id: str) -> str:
    """The Ray Train run's name: stable across Tune retries and restores, never a time.

    A train_loop trial's run is named by the trial alone: Ray Train V2 restores a run it finds
    under the same name and storage path, so after a Tune retry or ``scalesweep resume`` (a new
    Tune experiment, a new trial id) the user's ``ray.train.get_checkpoint()`` returns the
    latest checkpoint the loop reported. Built-in trials find theirs by trial name
    (:func:`latest_checkpoint`) and keep the trial id in the name.
    """
    return trial.name if trial.train_loop is not None else f"{trial.name}-{trial_id}"


def latest_checkpoint(storage_path: str | Path, trial: TrialConfig) -> str | None:
    """The newest checkpoint any earlier ddp run of this trial left under ``storage_path``.

    Checkpoints are ``<storage_path>/<run name>/checkpoint_<update, 9 digits>``; the newest is
    the one with the most updates.
    """
    root = Path(storage_path)
    found = sorted((p for p in root.glob(f"{trial.name}-*/checkpoint_*")
                    if p.parent.name.startswith(f"{trial.name}-")), key=lambda p: p.name, reverse=True)
    # newest first; a torn one (a copy cut short) is passed over with a warning
    newest = checkpointing.newest_complete(found, label=trial.name)
    return None if newest is None else str(newest)


# -- backends ------------------------------------------------------------------------------


def use_assigned_cpus() -> int:
    """Set torch's intra-op threads to the CPUs Ray assigned to this process (at least 1, and
    left alone outside a Ray task or actor); returns the count in use."""
    import torch

    cpus = None
    if ray.is_initialized():
        # Ray answers only inside a task or actor; a driver (mode 0) gets an AssertionError
        with contextlib.suppress(AssertionError):
            cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
    if cpus:
        torch.set_num_threads(max(1, int(cpus)))
    return torch.get_num_threads()


def simulate_checkpoints(sweep_dir: Path, name: str) -> list[Path]:
    """The checkpoints Tune kept for a simulate trial in every round of the sweep
    (``tune*/<name>/checkpoint_*``, and a fused trial's ``tune*/<fused name>/checkpoint_*/<name>``),
    newest first."""
    found = [*sweep_dir.glob(f"tune*/{name}/checkpoint_*"), *sweep_dir.glob(f"tune*/*/checkpoint_*/{name}")]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def _run_simulate(trial: TrialConfig, fallback: str | None, sweep_dir: Path | None) -> None:
    stop_on_full_disk(lambda: _simulate(trial, fallback, sweep_dir), sweep_dir, ray.tune.report)


def stop_on_full_disk(train: Callable[[], None], sweep_dir: Path | None,
                      tune_report: Callable[[dict[str, Any]], None]) -> None:
    """Run a simulate trial's ``train``; a checkpoint the disk refused ends it with
    :func:`disk_full.failed_result` reported (``tune_report``), not an error. Every trial
    checkpoints to this disk: the sweep stops on this result (the callback), rather than Tune
    retrying this trial and then failing the next ones alike. The result names no seed, so a
    fused trial's stops the sweep as a solo trial's does and its running seeds are paused."""
    try:
        train()
    except Exception as exc:
        full = disk_full.disk_full(exc)
        if full is None:
            raise
        tune_report(disk_full.failed_result(full, _tune_trial_dir() or sweep_dir))


def _tune_trial_dir() -> str | None:
    """Where Tune persists this trial's checkpoints (its storage), when Tune says."""
    with contextlib.suppress(Exception):
        from ray.train._internal.session import get_session

        session = get_session()
        return None if session is None else str(session.storage.trial_fs_path)
    return None


def _simulate(trial: TrialConfig, fallback: str | None, sweep_dir: Path | None) -> None:
    from scalesweep.trainables import loop
    from scalesweep.trainables.world import LocalWorld

    use_assigned_cpus()  # the whole trial runs in this process: use every CPU it holds
    def report(metrics: dict[str, Any], checkpoint_dir: str | None) -> None:
        # tune.report persists the checkpoint before it returns; the loop deletes it after.
        checkpoint = ray.tune.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        ray.tune.report(metrics, checkpoint=checkpoint)

    world = LocalWorld("cuda" if trial.use_gpu else "cpu")
    checkpoint = ray.tune.get_checkpoint()
    if checkpoint is None:
        loop.train(trial, world, on_report=report, resume_from=fallback)
        return
    with checkpoint.as_directory() as directory:
        why = checkpointing.incomplete(directory)
        if why is not None and sweep_dir is not None:  # Tune's latest is torn: the newest whole one
            print(f"warning: {trial.name}: torn checkpoint {directory} ({why})", file=sys.stderr,
                  flush=True)
            found = checkpointing.newest_complete(simulate_checkpoints(sweep_dir, trial.name),
                                                  label=trial.name)
            fallback = None if found is None else str(found)
        loop.train(trial, world, on_report=report, resume_from=directory if why is None else fallback)


def _run_fused(job: TrialJob) -> None:
    """Fused seeds (simulate, this process): each seed's reports go to Tune as its solo
    trial's would, with the seed's trial name (``SEED_TRIAL_KEY``), from which the sweep's
    callback logs each seed to its own MLflow run. A seed that stops or diverges leaves the
    others training. A checkpoint holds every seed's newest solo checkpoint under its name
    (:func:`simulate_checkpoints` finds it there). A fused trial that Tune retries goes on
    from its seeds' newest whole checkpoints (:func:`train_fused`); steps already logged are
    not logged again (the callback's tracker keeps each run's last step)."""
    use_assigned_cpus()
    storage = job.storage_path  # <sweep dir>/train
    run_fused(job, ray.tune.report, own=ray.tune.get_checkpoint(),
              sweep_dir=Path(storage).parent if storage else None)


def run_fused(job: TrialJob, tune_report: Callable[..., None], *, own: ray.tune.Checkpoint | None,
              sweep_dir: Path | None) -> None:
    """:func:`train_fused` reporting to ``tune_report`` (``ray.tune.report``'s signature): each
    seed's report under its trial's name; a full disk stops the sweep (:func:`stop_on_full_disk`)."""
    name_of = {t.seed: t.name for t in job.seeds}

    def report(seed: int, metrics: dict[str, Any], checkpoint_dir: str | None) -> None:
        # tune.report persists the checkpoint before it returns; train_seeds deletes it after
        checkpoint = ray.tune.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        tune_report({**metrics, SEED_TRIAL_KEY: name_of[seed]}, checkpoint=checkpoint)

    stop_on_full_disk(lambda: train_fused(job, report, own=own, sweep_dir=sweep_dir), sweep_dir,
                      tune_report)


def train_fused(job: TrialJob, report: Callable[[int, dict[str, Any], str | None], None], *,
                own: ray.tune.Checkpoint | None, sweep_dir: Path | None) -> None:
    """Train ``job``'s seeds fused, each from its newest whole checkpoint: the one in ``own``
    (Tune's latest of this trial, on a retry) or any the sweep kept in ``sweep_dir``, whichever
    is after more updates.

    * A seed whose checkpoint says it ended (its final report was made, so logged) is not
      trained again.
    * The others go on fused from their checkpoints, one ``train_seeds`` per checkpoint update,
      the groups one after another, the furthest first: fused seeds step together, and a seed
      held back to another's older update would train steps twice, one sent back to update 0
      would lose its work. The seeds' updates differ only where a seed's newest checkpoint is
      torn (a copy cut short); then its group just trains later, none trains a step twice.
    * Every checkpoint reported holds each seed's newest checkpoint (:class:`_Carried`): one
      taken when a seed ends between the others' checkpoints holds the others' too, so Tune
      keeping only the trial's newest checkpoints drops none of a seed's work, nor the record
      that a seed ended.
    """
    from scalesweep.trainables import seed_fusion

    name_of = {t.seed: t.name for t in job.seeds}
    with tempfile.TemporaryDirectory(prefix="scalesweep-seeds-carried-") as tmp:
        carried = _Carried(Path(tmp))
        with own.as_directory() if own is not None else contextlib.nullcontext(None) as directory:
            found = fused_checkpoints(name_of, None if directory is None else Path(directory), sweep_dir)
            for seed, path in found.items():  # taken now: Tune may delete the trial's older ones
                carried.keep(path, name_of[seed])

        def on_report(seed: int, metrics: dict[str, Any], checkpoint_dir: str | None) -> None:
            if checkpoint_dir is not None:
                carried.fill(Path(checkpoint_dir))
            report(seed, metrics, checkpoint_dir)

        for seeds, update in fused_groups(found, list(name_of)):
            resume = {s: carried.path(name_of[s]) for s in seeds} if update else None
            seed_fusion.train_seeds(job.trial, seeds, on_report=on_report, names=name_of,
                                    resume_from=resume)


def fused_checkpoints(names: Mapping[int, str], own: Path | None, sweep_dir: Path | None
                      ) -> dict[int, Path]:
    """Each seed's (by its trial name) newest whole checkpoint, by update: in ``own`` (a fused
    checkpoint: ``<own>/<name>``) or in any round of the sweep (:func:`simulate_checkpoints`);
    a seed with none is left out. A torn one is passed over with a warning."""
    found = {}
    for seed, name in names.items():
        candidates = [own / name] if own is not None and (own / name).is_dir() else []
        if sweep_dir is not None:
            candidates += simulate_checkpoints(sweep_dir, name)
        # stable: of equal updates (a seed's checkpoint carried into later ones) own's first
        candidates.sort(key=_update_of, reverse=True)
        newest = checkpointing.newest_complete(candidates, label=name)
        if newest is not None:
            found[seed] = newest
    return found


def fused_groups(found: Mapping[int, Path], seeds: Sequence[int]) -> list[tuple[list[int], int]]:
    """What :func:`train_fused` trains, in order: the seeds (in ``seeds``' order) that go on
    from the checkpoints of one update (0: from the start, no checkpoint), furthest first. A
    seed whose checkpoint says it ended is in none."""
    by_update: dict[int, list[int]] = {}
    for seed in seeds:
        progress = (checkpointing.read_progress(found[seed]) if seed in found else None) \
            or checkpointing.Progress()
        if progress.status == checkpointing.Progress().status:  # a fresh one's: not ended
            by_update.setdefault(progress.update, []).append(seed)
    return [(by_update[u], u) for u in sorted(by_update, reverse=True)]


def _update_of(checkpoint: Path) -> int:
    progress = checkpointing.read_progress(checkpoint)
    return -1 if progress is None else progress.update


class _Carried:
    """Each seed's newest checkpoint, under its trial name in ``root``, put into every
    checkpoint a fused trial reports that lacks it (files linked, not copied, where the file
    system allows: checkpoint files are written once and never changed in place)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, name: str) -> Path:
        return self.root / name

    def keep(self, checkpoint: Path, name: str | None = None) -> None:
        """``checkpoint`` becomes its seed's newest (named by its directory unless ``name``)."""
        target = self.root / (name or checkpoint.name)
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(checkpoint, target, copy_function=_link_or_copy)

    def fill(self, checkpoint_dir: Path) -> None:
        """A fused checkpoint about to be reported: its seeds' checkpoints become their newest,
        and every other seed's newest goes into it."""
        for sub in checkpoint_dir.iterdir():
            self.keep(sub)
        for kept in self.root.iterdir():
            if not (checkpoint_dir / kept.name).exists():
                shutil.copytree(kept, checkpoint_dir / kept.name, copy_function=_link_or_copy)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system, or one without hard links
        shutil.copy2(src, dst)


def _run_ddp(trial: TrialConfig, job: TrialJob) -> None:
    # Imported here: simulate trials never need Ray Train. Explicitly V2 (the default since Ray
    # 2.5x): ``ray.train.RunConfig`` & co. resolve to V1 or V2 by an environment variable,
    # which neither mypy nor a reader can see.
    from ray.train.torch import TorchConfig
    from ray.train.v2.api.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig

    from scalesweep.trainables.ray_train.lean_trainer import LeanTorchTrainer, use_no_preemption_watcher

    storage_path = job.storage_path
    name = run_name(trial, ray.tune.get_context().get_trial_id())
    worker, worker_config, callback = _workers(trial, job)
    use_report_poll()
    use_no_preemption_watcher()
    trainer = LeanTorchTrainer(
        worker,
        train_loop_config=worker_config,
        scaling_config=ScalingConfig(
            # elastic: V2 asks for P workers, starts with min_workers if that is all there is,
            # and after a loss restarts the group from the latest checkpoint on what is left
            num_workers=(trial.physical_workers if trial.min_workers is None
                         else (trial.min_workers, trial.physical_workers)),
            use_gpu=trial.use_gpu,
            resources_per_worker=worker_group_resources(trial, job.cpus_per_worker, job.gpus_per_worker),
        ),
        torch_config=TorchConfig(backend="nccl" if trial.use_gpu else "gloo"),
        run_config=RunConfig(
            name=name,
            storage_path=storage_path,
            failure_config=FailureConfig(max_failures=job.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=CHECKPOINTS_TO_KEEP),
            callbacks=[callback],
        ),
    )
    from ray.train.v2.api.exceptions import TrainingFailedError

    final: dict[str, Any] | None = None
    try:
        trainer.fit()
    except TrainingFailedError as exc:
        # Ray Train spent this trial's retries: report the failure and end, so Tune's own
        # FailureConfig does not start max_failures more rounds of them ((m + 1)^2 tries)
        final = failed_result(exc, Path(storage_path) / name if storage_path else None)
    # never ray.tune.report here, nor a plain return: either can deadlock the trial (module docs)
    tune_handover.hand_over(final)


def use_report_poll() -> str:
    """Have the Ray Train controller this process starts poll its workers every
    :data:`REPORT_POLL_S` (module docs), unless the environment already names an interval;
    returns the interval in force. V2 reads the variable in the controller actor, which it
    starts with the variables of this process that it propagates (``fit()`` runs here)."""
    return os.environ.setdefault(REPORT_POLL_ENV, f"{REPORT_POLL_S:g}")


def _workers(trial: TrialConfig, job: TrialJob) -> tuple[Any, dict[str, Any], Any]:
    """What the worker group runs, its config, and the callback that forwards rank 0's
    reports to Tune: the built-in loop, or a train_loop checked report by report."""
    if trial.train_loop is not None:
        from scalesweep.trainables.user_loop import ReportChecker, loop_worker
        from scalesweep.trainables.user_loop_callback import LoopReportCallback

        if job.loop is None:
            raise ValueError(f"trial {trial.name} runs a train_loop but its job has no loop handover")
        loop_config = dict(job.loop.loop_config)
        checker = ReportChecker(trial=trial.name, train_loop=trial.train_loop,
                                updates_per_epoch=int(loop_config["updates_per_epoch"]),
                                global_batch=int(loop_config["global_batch"]),
                                wall_offset=job.loop.wall_offset,
                                last=dict(job.loop.resumed_report or {}))
        return (loop_worker, {"train_loop": trial.train_loop, "config": loop_config},
                LoopReportCallback(checker))
    from ray.tune.integration.ray_train import TuneReportCallback

    from scalesweep.trainables.ray_train.ray_worker import train_loop_per_worker

    # V2 restores a run by its name and storage path; a checkpoint from an earlier sweep (a new
    # Tune experiment, so a new trial id) is handed to the workers instead.
    storage_path = job.storage_path
    resume_from = job.resume_from
    if resume_from is None and storage_path is not None:
        resume_from = latest_checkpoint(storage_path, trial)
    return (train_loop_per_worker,
            {"trial": trial.model_dump(mode="json"), "resume_from": resume_from,
             "workload": shared_workload(trial)},
            TuneReportCallback())


def failed_result(exc: BaseException, run_dir: str | Path | None = None) -> dict[str, Any]:
    """The last result of a trial Ray Train failed with ``exc``: its error's line; for a break
    of the loop's contract every trial shares, the whole message (the sweep stops with it) and
    the key that says so; for a checkpoint the disk refused, where (the file, else
    ``run_dir``, the run's storage) and why, with its own key (the sweep stops on it too)."""
    from scalesweep.trainables.user_loop import SHARED_FAILURE_KEY, shared_failure

    full = disk_full.disk_full(exc)
    if full is not None:
        return disk_full.failed_result(full, run_dir)
    shared = shared_failure(exc)
    if shared is None:
        return {STATUS_TAG: "failed", ERROR_TAG: failure_line(exc)}
    return {STATUS_TAG: "failed", ERROR_TAG: str(shared), SHARED_FAILURE_KEY: True}


def failure_line(exc: BaseException) -> str:
    """The line of a Ray Train failure that names the error (the workers' own exception); one
    that names memory first, since the driver can only say "out of memory" (with the trial's
    resources) when the line it gets says so, and a worker the memory monitor killed is often
    reported under a later, more generic line."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    useful = [ln for ln in lines if "Error" in ln and not ln.startswith(("ray::", "File "))]
    memory = [ln for ln in lines if "memory" in ln.lower() and not ln.startswith("File ")]
    return (memory or useful or lines or [type(exc).__name__])[-1][:300]


def shared_workload(trial: TrialConfig) -> Any:
    """The trial's workload, made once here and put in Ray's object store for its workers, or
    None when it cannot be pickled (a user's workload holding a lambda, a file handle): then
    each worker makes its own, as the contract allows (data depends on the options only)."""
    from scalesweep.trainables import workloads

    workload = workloads.make(trial.workload, trial.workload_options)
    prepare = getattr(workload, "prepare", None)
    if callable(prepare):  # lazily generated data: make it now, once, not once per worker
        prepare()
    try:
        return ray.put(workload)
    except Exception:  # whatever pickling raised: let the workers make it
        return None
