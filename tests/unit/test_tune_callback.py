"""SweepCallback in process: its Tune hooks driven by hand with a real tracker on sqlite (and on
MLflow's HTTP handlers for an outage). The trials are stand-ins holding the attributes the
callback reads from Ray's ``Trial`` (config, trial_id, error_file, get_error, error_msg)."""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from scalesweep.orchestrator.tracking.callback import KEEP, SweepCallback
from scalesweep.orchestrator.tracking.tracker import SweepTracker
from scalesweep.science import optimizers, schedules
from scalesweep.trainables.config import TrialConfig, TrialJob
from scalesweep.trainables.user_loop import SHARED_FAILURE_KEY, SharedContractError
from tests.conftest import MlflowHttp

TOTAL = 40


@dataclass
class FakeTrial:
    name: str
    total_updates: int = TOTAL
    trial_id: str = "abc_00000"
    error_file: str | None = None
    error: str | None = None
    error_msg: str | None = None
    config: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        # the config Tune keeps for a trial of a sweep: a TrialJob's JSON form
        trial = TrialConfig(name=self.name, workload="mlp_regression", world_size=1, physical_workers=1,
                            per_worker_batch=4, optimizer=optimizers.resolve({"type": "sgd", "lr": 0.1}),
                            scheduler=schedules.resolve({"type": "constant"}),
                            total_updates=self.total_updates, eval_every=10)
        self.config = {"trial_config": TrialJob(trial=trial).to_config()}

    def get_error(self) -> str | None:
        return self.error


@dataclass
class Sweep:
    tracker: SweepTracker
    callback: SweepCallback
    parent: str
    out: io.StringIO
    client: MlflowClient
    created: list[str]

    def lines(self) -> list[str]:
        """What the callback printed, without the elapsed-time prefix."""
        return [re.sub(r"^\[\s*\d+s\] ", "", ln) for ln in self.out.getvalue().splitlines()]

    def run(self, name: str) -> Any:
        return self.client.get_run(self.callback.run_ids[name])


def _sweep(uri: str, experiment: str, total: int | None = None) -> Sweep:
    tracker = SweepTracker(uri, experiment, flush_every_s=3600)  # flushes only where it must
    parent = tracker.start_parent({}, {})
    created: list[str] = []

    def child_for(name: str) -> str:
        created.append(name)
        return tracker.child(parent, name, {"total_updates": TOTAL})

    out = io.StringIO()
    callback = SweepCallback(tracker, child_for, {}, out=out, progress_every_s=3600, total=total)
    return Sweep(tracker, callback, parent, out, MlflowClient(uri), created)


@pytest.fixture(scope="module")
def sqlite_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One store for the module (creating one costs seconds); one experiment per test."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture
def sweep(sqlite_uri: str, request: pytest.FixtureRequest) -> Sweep:
    return _sweep(sqlite_uri, request.node.name)


def _result(update: int, status: str = "running", **extra: Any) -> dict[str, Any]:
    return {"update": update, "epoch": update / 10, "train_loss": 1 / update,
            "dev_loss": 2 / update, "lr": 0.1, "samples_seen": 8 * update, "status": status,
            "trial_id": "abc_00000", "time_this_iter_s": 0.5, "config": {}, **extra}


def _steps(s: Sweep, name: str, key: str = "dev_loss") -> list[int]:
    return [m.step for m in s.client.get_metric_history(s.callback.run_ids[name], key)]


def test_completed_trial_logged_once_per_step_with_its_curve(sweep: Sweep) -> None:
    cb, trial = sweep.callback, FakeTrial("ws2")
    cb.on_trial_start(0, [trial], trial)
    run = sweep.run("ws2")
    assert run.data.tags["status"] == "running" and run.data.tags["ray_trial_id"] == "abc_00000"
    assert run.info.status == "RUNNING"
    cb.on_trial_result(1, [trial], trial, {"training_iteration": 1})  # no eval in it: ignored
    for update in (10, 20):
        cb.on_trial_result(1, [trial], trial, _result(update))
    cb.on_trial_start(2, [trial], trial)  # retried from a checkpoint: same run
    cb.on_trial_result(3, [trial], trial, _result(20))  # re-reported after the retry: dropped
    cb.on_trial_result(3, [trial], trial, _result(TOTAL, "completed", noise_scale=12.0))
    assert sweep.created == ["ws2"]
    assert cb.status["ws2"] == "completed"
    curve = cb.curves["ws2"]
    assert [r["update"] for r in curve] == [10, 20, TOTAL]
    assert all(set(r) <= {*KEEP, "dev_loss"} for r in curve)  # nothing of Tune's own keys
    assert curve[-1]["noise_scale"] == 12.0
    assert _steps(sweep, "ws2") == []  # buffered: sent at the close
    cb.on_trial_complete(4, [trial], trial)
    run = sweep.run("ws2")
    assert run.info.status == "FINISHED" and run.data.tags["status"] == "completed"
    for key in ("dev_loss", "train_loss", "epoch", "lr", "samples_seen"):
        assert _steps(sweep, "ws2", key) == [10, 20, TOTAL]
    assert _steps(sweep, "ws2", "noise_scale") == [TOTAL]
    assert sweep.lines() == ["started   ws2", "started   ws2", "completed ws2  dev_loss 0.05 at epoch 4"]


@pytest.mark.parametrize(("status", "mlflow_status"), [("diverged", "FAILED"), ("stopped", "FINISHED")])
def test_a_final_status_reported_by_the_trial_is_kept(sweep: Sweep, status: str,
                                                     mlflow_status: str) -> None:
    cb, trial = sweep.callback, FakeTrial("ws4")
    cb.on_trial_start(0, [trial], trial)
    cb.on_trial_result(1, [trial], trial, _result(10))
    cb.on_trial_result(1, [trial], trial, _result(20, status))
    cb.on_trial_complete(2, [trial], trial)
    assert cb.status["ws4"] == status
    run = sweep.run("ws4")
    assert run.info.status == mlflow_status and run.data.tags["status"] == status
    assert _steps(sweep, "ws4") == [10, 20]
    assert sweep.lines()[-1].startswith(f"{status:<9} ws4  dev_loss 0.1 at epoch 2")


@pytest.mark.parametrize(("last", "status"), [(20, "stopped"), (TOTAL, "completed")])
def test_a_trial_ended_by_the_scheduler_is_stopped_unless_it_reached_the_end(
        sweep: Sweep, last: int, status: str) -> None:
    """ASHA ends a trial without a final report of its own: its last update decides."""
    cb, trial = sweep.callback, FakeTrial("ws8")
    cb.on_trial_start(0, [trial], trial)
    for update in range(10, last + 1, 10):
        cb.on_trial_result(1, [trial], trial, _result(update))
    cb.on_trial_complete(2, [trial], trial)
    assert cb.status["ws8"] == status
    run = sweep.run("ws8")
    assert run.info.status == "FINISHED" and run.data.tags["status"] == status


def test_a_trial_that_never_reported_is_stopped_at_epoch_zero(sweep: Sweep) -> None:
    cb, trial = sweep.callback, FakeTrial("ws8")
    cb.on_trial_start(0, [trial], trial)
    cb.on_trial_complete(1, [trial], trial)
    assert cb.status["ws8"] == "stopped"
    assert sweep.lines()[-1] == "stopped   ws8  at epoch 0"


def test_failed_trial_gets_the_exception_line_of_its_error_file(sweep: Sweep, tmp_path: Path) -> None:
    error_file = tmp_path / "error.txt"
    error_file.write_text(
        "Failure # 1 (occurred at 2026-01-01)\nray::_Inner.train() (pid=1, ip=127.0.0.1)\n"
        "Traceback (most recent call last):\n  File \"loop.py\", line 3, in run\n"
        "    raise ValueError('injected failure for seed 1')\n"
        "ValueError: injected failure for seed 1\n")
    cb = sweep.callback
    trial = FakeTrial("ws2", error_file=str(error_file), error="stale copy: RuntimeError: other")
    cb.on_trial_start(0, [trial], trial)
    cb.on_trial_result(1, [trial], trial, _result(10))
    cb.on_trial_recover(2, [trial], trial)
    cb.on_trial_error(3, [trial], trial)
    assert cb.status["ws2"] == "failed"
    assert cb.errors["ws2"] == "ValueError: injected failure for seed 1"
    run = sweep.run("ws2")
    assert run.info.status == "FAILED" and run.data.tags["status"] == "failed"
    assert run.data.tags["error"] == "ValueError: injected failure for seed 1"
    assert _steps(sweep, "ws2") == [10]  # the evals before the failure are in MLflow
    assert sweep.lines()[1:] == [
        "retrying ws2 from its last checkpoint (ValueError: injected failure for seed 1)",
        "failed    ws2: ValueError: injected failure for seed 1"]


@pytest.mark.parametrize(("trial", "expected"), [
    (FakeTrial("t", error="Traceback:\n  File \"x\"\nRuntimeError: from storage"),
     "RuntimeError: from storage"),
    (FakeTrial("t", error_file="/nonexistent/error.txt", error_msg="The actor died unexpectedly"),
     "The actor died unexpectedly"),
    (FakeTrial("t"), "error"),
])
def test_the_error_falls_back_to_what_the_trial_holds(sweep: Sweep, trial: FakeTrial,
                                                      expected: str) -> None:
    cb = sweep.callback
    cb.on_trial_error(0, [trial], trial)  # failed before it started: no run to close
    assert cb.status["t"] == "failed" and cb.errors["t"] == expected
    assert "t" not in cb.run_ids


def test_results_before_a_start_create_the_run(sweep: Sweep) -> None:
    """A resumed sweep's trial may report before Tune calls on_trial_start for it."""
    cb, trial = sweep.callback, FakeTrial("ws2")
    cb.on_trial_result(0, [trial], trial, _result(10))
    cb.on_trial_start(1, [trial], trial)
    assert sweep.created == ["ws2"] and cb.curves["ws2"][0]["update"] == 10


def test_progress_line_counts_trials_and_shows_the_running(sqlite_uri: str,
                                                           request: pytest.FixtureRequest) -> None:
    s = _sweep(sqlite_uri, request.node.name, total=5)
    cb = s.callback
    a, b = FakeTrial("a"), FakeTrial("b", trial_id="abc_00001")
    for t in (a, b):
        cb.on_trial_start(0, [a, b], t)
    cb.on_trial_result(1, [a, b], a, _result(10))
    cb.on_trial_result(1, [a, b], b, _result(TOTAL, "completed"))
    assert not any("trials done" in ln for ln in s.lines())  # progress_every_s not reached
    cb.progress_every_s = 0
    cb.on_trial_result(2, [a, b], a, _result(20))
    assert s.lines()[-1] == "1/5 trials done; a ep 2.00 dev_loss 0.1"
    cb.total = None  # no total given: Tune's list counts
    cb.on_trial_result(3, [a, b], a, _result(30))
    assert s.lines()[-1] == "1/2 trials done; a ep 3.00 dev_loss 0.06667"


@contextlib.contextmanager
def _outage(mlflow_http: MlflowHttp) -> Iterator[None]:
    """MLflow answers 503 to everything inside the block."""
    mlflow_http.down = True
    try:
        yield
    finally:
        mlflow_http.down = False


def _http_sweep(mlflow_http: MlflowHttp, request: pytest.FixtureRequest) -> Sweep:
    mlflow_http.down = False
    return _sweep(mlflow_http.uri, request.node.name)


def test_an_outage_at_the_close_leaves_the_run_open_and_the_metrics_buffered(
        mlflow_http: MlflowHttp, request: pytest.FixtureRequest) -> None:
    s = _http_sweep(mlflow_http, request)
    cb, trial = s.callback, FakeTrial("ws2")
    cb.on_trial_start(0, [trial], trial)
    cb.on_trial_result(1, [trial], trial, _result(TOTAL, "completed"))
    with _outage(mlflow_http):
        cb.on_trial_complete(2, [trial], trial)
        cb.on_experiment_end([trial])
    assert cb.status["ws2"] == "completed"  # the result stands; the end of the sweep closes it
    assert re.fullmatch(r"could not close ws2 in MLflow yet \(\w+\)", s.lines()[-1])
    assert s.run("ws2").info.status == "RUNNING"
    assert s.tracker.pending() == 5  # epoch, train_loss, dev_loss, lr, samples_seen
    cb.on_experiment_end([trial])
    assert s.tracker.pending() == 0 and _steps(s, "ws2") == [TOTAL]


def test_a_trial_started_during_an_outage_gets_one_run_with_every_eval_when_mlflow_answers(
        mlflow_http: MlflowHttp, request: pytest.FixtureRequest) -> None:
    s = _http_sweep(mlflow_http, request)
    cb, trial = s.callback, FakeTrial("ws2")
    with _outage(mlflow_http):
        cb.on_trial_start(0, [trial], trial)  # no run can be made: the sweep goes on
        cb.on_trial_result(1, [trial], trial, _result(10))
        cb.on_trial_result(2, [trial], trial, _result(20))
        cb.on_trial_result(3, [trial], trial, _result(20))  # a retried trial's repeat
    assert re.fullmatch(r"MLflow unreachable: ws2's run will be made when it answers \(\w+\)",
                        s.lines()[0]), s.lines()
    assert s.lines()[1:] == ["started   ws2"]
    assert cb.run_ids == {} and [u for u, _, _ in cb.waiting["ws2"]] == [10, 20]
    assert [r["update"] for r in cb.curves["ws2"]] == [10, 20]
    cb.on_trial_result(4, [trial], trial, _result(30))  # MLflow answers: the run, then the evals
    assert cb.waiting == {} and cb.deferred_tags == {}
    cb.on_trial_result(5, [trial], trial, _result(TOTAL, "completed"))
    cb.on_trial_complete(6, [trial], trial)
    assert _steps(s, "ws2") == [10, 20, 30, TOTAL]
    run = s.run("ws2")
    assert run.info.status == "FINISHED" and run.data.tags["status"] == "completed"
    assert run.data.tags["ray_trial_id"] == "abc_00000"  # the start's tags, kept back till now
    children = s.client.search_runs([run.info.experiment_id],
                                    filter_string=f"tags.`mlflow.parentRunId` = '{s.parent}'")
    assert [r.data.tags["trial_name"] for r in children] == ["ws2"]  # one run, however many tries


def test_a_run_still_waiting_at_the_end_is_made_with_its_evals_and_final_tags(
        mlflow_http: MlflowHttp, request: pytest.FixtureRequest) -> None:
    s = _http_sweep(mlflow_http, request)
    cb, trial = s.callback, FakeTrial("ws4")
    with _outage(mlflow_http):
        cb.on_trial_start(0, [trial], trial)
        cb.on_trial_result(1, [trial], trial, _result(TOTAL, "completed"))
        cb.on_trial_complete(2, [trial], trial)
        assert not cb.settle()  # still down: nothing made, nothing lost
    assert re.fullmatch(r"could not close ws4 in MLflow yet \(\w+\)", s.lines()[-1])
    assert cb.status["ws4"] == "completed" and cb.deferred_tags["ws4"]["status"] == "completed"
    cb.on_experiment_end([trial])  # the end of the sweep: MLflow answers again
    assert cb.waiting == {} and cb.deferred_tags == {}
    assert _steps(s, "ws4") == [TOTAL]
    tags = s.run("ws4").data.tags
    assert (tags["status"], tags["ray_trial_id"]) == ("completed", "abc_00000")


def test_a_refused_run_is_an_error_not_an_outage(sweep: Sweep) -> None:
    def refused(name: str) -> str:  # MLflow's answer to a bad request: 4xx, never retried
        return str(sweep.tracker.client.get_run("0" * 32).info.run_id)

    cb = SweepCallback(sweep.tracker, refused, {}, out=io.StringIO())
    with pytest.raises(MlflowException, match=r"Run with id=0+ not found"):
        cb.on_trial_start(0, [], FakeTrial("ws8"))
    assert cb.waiting == {}


# -- a break of the loop's contract every trial shares --------------------------------------

SHARED_ERROR = "trial t0: train_loop pkg.loops:train reported update 4 without 'lr': see the docs"


def _shared_failure(trial: FakeTrial) -> dict[str, Any]:
    """The last result of a trial whose loop broke the contract as every trial will (what
    trial_driver.failed_result makes of Ray Train's failure)."""
    return {"status": "failed", "error": SHARED_ERROR.replace("t0", trial.name),
            SHARED_FAILURE_KEY: True}


def _stops(cb: SweepCallback) -> list[str]:
    """Tune's graceful stop, asked and granted, recorded (the CtrlC path asks the same)."""
    asked: list[str] = []
    cb.stop_tune = lambda: asked.append("stop") is None
    return asked


def test_a_break_every_trial_shares_stops_the_sweep_and_leaves_the_trial_for_resume(
        sweep: Sweep, tmp_path: Path) -> None:
    sweep.tracker.journal = tmp_path / "sweep-dir" / "metrics.journal.jsonl"
    cb, t0, t1 = sweep.callback, FakeTrial("t0"), FakeTrial("t1")
    asked = _stops(cb)
    cb.on_trial_start(0, [t0, t1], t0)
    cb.on_trial_start(0, [t0, t1], t1)  # running beside it: stopped, not failed
    cb.on_trial_result(1, [t0, t1], t0, _shared_failure(t0))
    cb.on_trial_result(1, [t0, t1], t1, _shared_failure(t1))  # the same break, while stopping
    cb.on_trial_complete(2, [t0, t1], t0)
    cb.on_trial_complete(2, [t0, t1], t1)
    assert asked == ["stop"] and cb.interrupted
    for name in ("t0", "t1"):  # open in MLflow, as a Ctrl-C leaves them: resume runs them
        run = sweep.run(name)
        assert run.info.status == "RUNNING" and run.data.tags["status"] == "running", name
        assert "error" not in run.data.tags and name not in cb.errors
    # one line for it now; the error itself once, from the command, when the sweep ends
    assert sweep.lines() == [
        "started   t0", "started   t1",
        "stopped   t0: its loop breaks the contract every trial shares; no more trials start",
        "paused    t1 (the loop's contract): resume goes on from its last checkpoint"]
    with pytest.raises(SharedContractError) as info:
        cb.on_experiment_end([t0, t1])
    assert str(info.value) == (
        f"{SHARED_ERROR}\nEvery trial of the sweep runs this loop and would fail the same way, "
        "so the sweep stopped at this first failure: the finished trials are kept. Fix the "
        f"loop, then `scalesweep resume {tmp_path / 'sweep-dir'}` runs the rest, this trial too.")


def test_after_a_trial_kept_the_contract_a_break_fails_its_trial_alone(sweep: Sweep) -> None:
    cb, t0, t1 = sweep.callback, FakeTrial("t0"), FakeTrial("t1")
    asked = _stops(cb)
    cb.on_trial_start(0, [t0], t0)
    cb.on_trial_result(1, [t0], t0, _result(TOTAL, "completed"))
    cb.on_trial_complete(2, [t0], t0)
    cb.on_trial_start(3, [t0, t1], t1)
    cb.on_trial_result(4, [t0, t1], t1, _shared_failure(t1))
    cb.on_trial_complete(5, [t0, t1], t1)
    assert asked == [] and not cb.interrupted and cb.stopped_by is None
    assert cb.status == {"t0": "completed", "t1": "failed"}
    run = sweep.run("t1")
    assert run.info.status == "FAILED" and run.data.tags["error"] == SHARED_ERROR.replace("t0", "t1")
    cb.on_experiment_end([t0, t1])  # nothing to raise: the sweep ends as any other


def test_without_tunes_graceful_stop_the_break_is_raised_at_once(sweep: Sweep) -> None:
    cb, t0 = sweep.callback, FakeTrial("t0")
    cb.stop_tune = lambda: False  # fit() in another thread: no SIGUSR1 handler of Tune's
    cb.on_trial_start(0, [t0], t0)
    with pytest.raises(SharedContractError, match=r"(?s)^trial t0: .*`scalesweep resume` with "
                                                  r"the sweep's directory runs the rest"):
        cb.on_trial_result(1, [t0], t0, _shared_failure(t0))


class _EveryOther:
    """An inner stopper (curtailment's place): stops trial "b" alone, never the experiment."""

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return trial_id == "b"

    def stop_all(self) -> bool:
        return False


def test_the_callbacks_stopper_ends_the_experiment_once_the_sweep_must_stop(sweep: Sweep) -> None:
    """The stop a full journal or a shared break asks for goes through the experiment's
    stopper (Tune reads stop_all at each step), not through Tune's SIGUSR1 handler, which
    warns of a Ctrl-C that never happened; the inner stopper's decisions stand."""
    cb, t0 = sweep.callback, FakeTrial("t0")
    stopper = cb.stopper(_EveryOther())  # type: ignore[arg-type]
    cb.on_trial_start(0, [t0], t0)
    assert not stopper.stop_all()
    assert stopper("b", {}) and not stopper("a", {})
    cb.on_trial_result(1, [t0], t0, _shared_failure(t0))  # no signal handler here: no raise
    assert stopper.stop_all() and cb.interrupted
    assert isinstance(cb.stopped_by, SharedContractError)
    assert not stopper("a", {})  # per trial, still the inner stopper's word


def _fused_trial(seeds: tuple[str, ...]) -> FakeTrial:
    """A Tune trial of fused seeds (resources.seeds_per_trial): its job names each seed's trial."""
    trial = FakeTrial("arm-seeds0+1")
    job = TrialJob.model_validate(trial.config["trial_config"])
    one = [job.trial.model_copy(update={"name": name, "seed": i}) for i, name in enumerate(seeds)]
    trial.config = {"trial_config": job.model_copy(update={"seeds": tuple(one)}).to_config()}
    return trial


def test_a_fused_trial_logs_each_seed_to_its_own_run_and_closes_it_when_it_ends(sweep: Sweep) -> None:
    cb, trial = sweep.callback, _fused_trial(("arm-s0", "arm-s1"))
    cb.on_trial_start(0, [trial], trial)
    assert sweep.created == ["arm-s0", "arm-s1"] and "arm-seeds0+1" not in cb.run_ids
    for seed in ("arm-s0", "arm-s1"):
        cb.on_trial_result(1, [trial], trial, _result(10, seed_trial=seed))
    cb.on_trial_result(1, [trial], trial, _result(20, "diverged", seed_trial="arm-s0"))
    # the diverged seed is closed now, while the other goes on
    run = sweep.run("arm-s0")
    assert run.info.status == "FAILED" and run.data.tags["status"] == "diverged"
    assert sweep.run("arm-s1").info.status == "RUNNING" and cb.status["arm-s1"] == "running"
    cb.on_trial_result(1, [trial], trial, _result(20, seed_trial="arm-s1"))
    cb.on_trial_result(1, [trial], trial, _result(TOTAL, "completed", seed_trial="arm-s1"))
    cb.on_trial_complete(2, [trial], trial)
    run = sweep.run("arm-s1")
    assert run.info.status == "FINISHED" and run.data.tags["status"] == "completed"
    assert _steps(sweep, "arm-s0") == [10, 20] and _steps(sweep, "arm-s1") == [10, 20, TOTAL]
    assert [r["update"] for r in cb.curves["arm-s1"]] == [10, 20, TOTAL]
    assert sweep.lines() == ["started   arm-s0", "started   arm-s1",
                             "diverged  arm-s0  dev_loss 0.1 at epoch 2",
                             "completed arm-s1  dev_loss 0.05 at epoch 4"]


def test_a_fused_trial_that_fails_fails_only_the_seeds_still_running(sweep: Sweep) -> None:
    cb, trial = sweep.callback, _fused_trial(("arm-s0", "arm-s1"))
    trial.error = "Traceback ...\nRuntimeError: boom"
    cb.on_trial_start(0, [trial], trial)
    cb.on_trial_result(1, [trial], trial, _result(10, "stopped", seed_trial="arm-s0"))
    cb.on_trial_result(1, [trial], trial, _result(10, seed_trial="arm-s1"))
    cb.on_trial_error(2, [trial], trial)
    assert cb.status == {"arm-s0": "stopped", "arm-s1": "failed"}
    assert sweep.run("arm-s0").data.tags["status"] == "stopped"
    run = sweep.run("arm-s1")
    assert run.info.status == "FAILED" and run.data.tags["error"] == "RuntimeError: boom"
