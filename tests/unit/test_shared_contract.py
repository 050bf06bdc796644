"""Which breaks of a train_loop's report contract every trial shares
(scalesweep.trainables.user_loop.SharedContractError: the sweep stops at the first) and which
stay a trial's own (a plain LoopReportError: the others go on); and how the trial driver finds
the shared one behind Ray Train's failure, as it crosses from Ray Train's controller (pickled,
as an actor's error is) into the trial's last result. The sweep callback's side is
test_tune_callback.py; a real sweep, tests/integration/test_contract_stop_e2e.py."""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable
from typing import Any

import pytest
from ray.train.v2.api.exceptions import ControllerError, WorkerGroupError

from scalesweep.loop_helpers import planned_schedule
from scalesweep.mlflow_names import ERROR_TAG, STATUS_TAG
from scalesweep.orchestrator.plan.loop_config import loop_config
from scalesweep.orchestrator.plan.rows import make_plan
from scalesweep.orchestrator.spec.load import load_sweep
from scalesweep.trainables.trial_driver import failed_result
from scalesweep.trainables.user_loop import (
    SHARED_FAILURE_KEY,
    LoopReportError,
    ReportChecker,
    SharedContractError,
    fail_trial,
    plan_of,
    shared_failure,
)
from tests.support.helpers import SWEEPS

#: the own-loop example's plan at world size 1
CONFIG = loop_config(next(r for r in make_plan(load_sweep(SWEEPS / "own_loop.yaml")).rows
                          if r.world_size == 1), 2048)


def _checker() -> ReportChecker:
    checker = ReportChecker(trial="ws1-s0", train_loop="pkg.loops:train",
                            updates_per_epoch=int(CONFIG["updates_per_epoch"]),
                            global_batch=int(CONFIG["global_batch"]))
    checker.start(0.0, plan=plan_of(CONFIG))  # what loop_worker's start marker carries
    return checker


def _report(at: int, **changes: Any) -> dict[str, Any]:
    """A report of update ``at`` as the contract wants it, with ``changes`` (None: left out)."""
    report = {"update": at, "dev_loss": 0.5, "lr": planned_schedule(CONFIG).lr(at)}
    report.update(changes)
    return {k: v for k, v in report.items() if v is not None}


def _first_report(**changes: Any) -> Callable[[ReportChecker], object]:
    return lambda c: c.check(_report(8, **changes), clock=1.0)


def _after_a_good_one(**changes: Any) -> Callable[[ReportChecker], object]:
    def act(c: ReportChecker) -> object:
        c.check(_report(8), clock=1.0)
        return c.check(_report(16, **changes), clock=2.0)
    return act


def _ended_at(update: int) -> Callable[[ReportChecker], object]:
    def act(c: ReportChecker) -> object:
        c.check(_report(update), clock=1.0)
        return c.finish()
    return act


SHARED: dict[str, Callable[[ReportChecker], object]] = {
    "no update": _first_report(update=None),
    "no dev_loss": _first_report(dev_loss=None),
    "no lr": _first_report(lr=None),
    "a value that is no number": _first_report(dev_loss="0.5"),
    "update 0": _first_report(update=0),
    "an update that is no count": _after_a_good_one(update=16.5),
    "never reported": lambda c: c.finish(),
    "the adapter's callback missing (a FAIL marker)": lambda c: c.fail("trains without it"),
}
ALONE: dict[str, Callable[[ReportChecker], object]] = {
    "a non-finite dev_loss (diverged)": _after_a_good_one(dev_loss=math.nan),
    "an update going back": _after_a_good_one(update=8),
    "an lr off the plan": _first_report(lr=1.0),
    "an update past the plan": _first_report(update=10**6),
    "an end short of the plan": _ended_at(8),
}


@pytest.mark.parametrize("act", SHARED.values(), ids=SHARED.keys())
def test_a_break_the_plan_has_no_part_in_is_shared(act: Callable[[ReportChecker], object]) -> None:
    with pytest.raises(SharedContractError, match=r"^trial ws1-s0: train_loop pkg.loops:train "):
        act(_checker())


@pytest.mark.parametrize("act", ALONE.values(), ids=ALONE.keys())
def test_a_break_that_depends_on_the_trial_is_its_own(act: Callable[[ReportChecker], object]) -> None:
    with pytest.raises(LoopReportError) as info:
        act(_checker())
    assert not isinstance(info.value, SharedContractError), info.value


def test_the_workers_own_fail_trial_is_shared() -> None:
    with pytest.raises(SharedContractError, match=r"^no callback$"):
        fail_trial("no callback")


def _crossed(error: BaseException) -> BaseException:
    """As the trial driver gets it from Ray Train: pickled by the actor that raised it."""
    crossed: BaseException = pickle.loads(pickle.dumps(error))
    return crossed


def test_the_trial_driver_finds_the_shared_break_behind_ray_trains_failure() -> None:
    message = "trial ws1-s0: train_loop pkg.loops:train reported update 8 without 'lr': " + "x" * 400
    for failure in (ControllerError(SharedContractError(message)),
                    WorkerGroupError("rank 0 failed", {0: SharedContractError(message)})):
        crossed = _crossed(failure)
        assert str(shared_failure(crossed)) == message
        # the whole message (the sweep stops with it), not the 300-character line of others
        assert failed_result(crossed) == {STATUS_TAG: "failed", ERROR_TAG: message,
                                          SHARED_FAILURE_KEY: True}


def test_a_trials_own_failure_is_not_taken_for_a_shared_one() -> None:
    for failure in (ControllerError(LoopReportError("trial ws1-s0: update 16 ran at lr 1")),
                    WorkerGroupError("rank 0 failed", {0: RuntimeError("CUDA out of memory")})):
        crossed = _crossed(failure)
        assert shared_failure(crossed) is None
        result = failed_result(crossed)
        assert result[STATUS_TAG] == "failed" and SHARED_FAILURE_KEY not in result
