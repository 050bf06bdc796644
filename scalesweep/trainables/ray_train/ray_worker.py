"""The function every Ray Train worker of a ``ddp`` trial runs (Ray Train V2).

TorchTrainer has already joined the worker to the process group (gloo on CPU, nccl on GPU);
this wraps it in a :class:`~scalesweep.trainables.world.DistributedWorld` and runs the shared loop. V2
requires every worker to call ``ray.train.report`` the same number of times: the loop reports
on every rank at the same updates, and only rank 0 hands over a checkpoint directory.
"""

from __future__ import annotations

from typing import Any

import ray.train
import ray.train.torch

from scalesweep.mlflow_names import STEP_KEY
from scalesweep.trainables import loop
from scalesweep.trainables.config import TrialConfig
from scalesweep.trainables.world import DistributedWorld


def _report(metrics: dict[str, Any], checkpoint_dir: str | None) -> None:
    # the live group's size: an elastic trial may run on fewer workers after a loss, and the
    # MLflow chart of physical_workers shows when
    metrics = {**metrics, "physical_workers": ray.train.get_context().get_world_size()}
    if checkpoint_dir is None:
        ray.train.report(metrics)
        return
    # Named by update so the storage reads checkpoint_000040, ...; unique within a run because
    # a restarted run resumes after the latest checkpoint and never writes an older one again.
    ray.train.report(
        metrics,
        checkpoint=ray.train.Checkpoint.from_directory(checkpoint_dir),
        checkpoint_dir_name=f"checkpoint_{int(metrics[STEP_KEY]):09d}",
    )


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """TorchTrainer's ``train_loop_config``: ``{"trial": TrialConfig.model_dump(),
    "resume_from": <checkpoint directory to start from when Ray has none, or None>,
    "workload": <ObjectRef of the trial's workload, made once by the trial, or None>}``."""
    trial = TrialConfig.model_validate(config["trial"])
    world = DistributedWorld(ray.train.torch.get_device())
    # Fetched from the object store (shared memory on one node) rather than generated again
    # in each of the P workers: 1 CPU second per worker for mini_asr's 4096 utterances.
    shared = config.get("workload")
    workload = ray.get(shared) if shared is not None else None
    # After a worker failure (or a restore of the same run), V2 restarts the whole group and
    # hands every worker the latest reported checkpoint; the loop continues from it without
    # re-reporting the evaluations up to it.
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        loop.train(trial, world, on_report=_report, resume_from=config.get("resume_from"), workload=workload)
        return
    with checkpoint.as_directory() as directory:
        loop.train(trial, world, on_report=_report, resume_from=directory, workload=workload)
