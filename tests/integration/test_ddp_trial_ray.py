"""How a ddp trial uses Ray, on a real Ray (the session's 4-CPU head):

* a Tune trial whose results come through Ray Train V2's hand-off queue ends, with every result
  in order (scalesweep.trainables.ray_train.tune_handover): on Ray 2.60 a trial that reports its own last
  result, or just returns, right after such results deadlocks with its main thread;
* its Ray Train run starts no helper process it does not use (scalesweep.trainables.ray_train.lean_trainer).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ray import tune

from scalesweep.trainables.ray_train import lean_trainer, tune_handover

pytestmark = pytest.mark.slow
HANDED = 3  # results "Train's callback" hands over before the trial's own last one
BUDGET_S = 120  # ends a deadlocked experiment; a sound one takes seconds


def _handing_trial(config: dict[str, Any]) -> None:
    from ray.train._internal.session import get_session

    # what TuneReportCallback does in the Train controller, from here: the same queue
    session = get_session()
    assert session is not None
    handoff = session._get_or_create_inter_actor_queue()
    for step in range(HANDED):
        handoff.put({"step": step, "trial": config["i"]})
    tune_handover.hand_over({"step": HANDED, "trial": config["i"], "status": "failed"})


class _Seen(tune.Callback):
    def __init__(self) -> None:
        self.results: dict[int, list[int]] = {}
        self.ended: dict[int, str] = {}

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                        **info: Any) -> None:
        self.results.setdefault(trial.config["i"], []).append(result["step"])

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.ended[trial.config["i"]] = "complete"

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.ended[trial.config["i"]] = "error"


def test_handed_over_results_all_reach_tune_and_every_trial_ends(
        ray_cluster: None, tmp_path: Path) -> None:
    seen = _Seen()
    # one trial at a time on a reused actor: the second trial starts on the actor the first
    # one's training thread has just left
    tune.Tuner(
        _handing_trial,
        param_space={"i": tune.grid_search([0, 1])},
        tune_config=tune.TuneConfig(max_concurrent_trials=1, reuse_actors=True,
                                    time_budget_s=BUDGET_S),
        run_config=tune.RunConfig(name="handover", storage_path=str(tmp_path), callbacks=[seen],
                                  verbose=0),
    ).fit()
    assert seen.ended == {0: "complete", 1: "complete"}
    assert seen.results == {0: [0, 1, 2, 3], 1: [0, 1, 2, 3]}


def _worker(config: dict[str, Any]) -> None:
    import ray.train

    ray.train.report({"rank": ray.train.get_context().get_world_rank()})


def test_a_ddp_run_starts_no_dataset_manager_and_no_preemption_watcher(
        ray_cluster: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ray
    from ray._private import state
    from ray.train.torch import TorchConfig
    from ray.train.v2.api.config import RunConfig, ScalingConfig

    monkeypatch.delenv(lean_trainer.PREEMPTION_WATCHER_ENV, raising=False)
    assert lean_trainer.use_no_preemption_watcher() == "0"
    lean_trainer.LeanTorchTrainer(
        _worker, scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
        torch_config=TorchConfig(backend="gloo"),
        run_config=RunConfig(name="lean", storage_path=str(tmp_path)),
    ).fit()
    job = ray.get_runtime_context().get_job_id()
    started = {a["ActorClassName"].rsplit(".", 1)[-1] for a in state.actors().values()
               if a["JobID"] == job}
    assert {"TrainController", "RayTrainWorker"} <= started, started  # the run did start here
    assert not started & {"DatasetManager", "PreemptionWatcher"}, started
