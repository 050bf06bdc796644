"""A user's own Ray Train loop as a trial (``workload: {train_loop: "pkg.module:function"}``).

The sweep runs the user's function as Ray Train's ``train_loop_per_worker`` on the trial's P
workers (:func:`loop_worker` wraps it), with ``config`` = the trial's ``plan --json`` row, its
``scheduler`` the resolved schedule spec, plus the resolved ``optimizer``
(``scalesweep.orchestrator.plan.loop_config``). The
loop reports with ``ray.train.report({"update": k, "dev_loss": x, ...})``; every report is
checked on its way to Tune (:class:`ReportChecker`, run by
``scalesweep.trainables.user_loop_callback``) so that what reaches MLflow follows the same
contract as the built-in loop's reports (docs/workloads.md, "Your own Ray Train loop"), and
against the trial's plan: the lr each reported update ran with is the planned schedule's, no
update goes past the planned total, and the loop ends at it (:class:`PlanCheck`).

:func:`loop_worker` brackets the user's function with two marker reports (every worker makes
them, so Ray Train V2's "every worker reports the same number of times" holds): ``start``, which
starts the trial's clock and, after a restart of the worker group, lets the updates begin again
(it carries the plan the loop was given, :func:`plan_of`), and ``end``, which closes the trial
as completed, or fails it when the loop never reported or stopped short of the plan.

Nothing here imports Ray at module level: the planner imports :func:`resolve_train_loop` to
refuse a path that cannot be imported (exit 2) before anything starts.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from scalesweep.errors import ScalesweepError
from scalesweep.mlflow_names import DEV_PREFIX, STATUS_TAG, STEP_KEY, TRAIN_SECONDS_METRIC
from scalesweep.trainables.config import loop_schedule
from scalesweep.trainables.module_path import ModulePathError, import_callable

#: the key of the marker reports :func:`loop_worker` makes around the user's loop; FAIL is
#: the report an adapter makes when it finds the loop cannot report (:func:`fail_trial`)
MARKER_KEY = "_scalesweep_marker"
START, END, FAIL = "start", "end", "fail"
#: the key of a FAIL marker's reason
REASON_KEY = "_scalesweep_reason"
#: the key of the start marker's plan (:func:`plan_of`)
PLAN_KEY = "_scalesweep_plan"
#: the key of a report that names what sent it: "loop_helpers" (loop_helpers.report), "hf" or
#: "lightning" (the adapters' ReportCallback); taken off before the report goes on
SOURCE_KEY = "_scalesweep_source"
#: the keys every report of a user's loop must have
REQUIRED_KEYS = (STEP_KEY, f"{DEV_PREFIX}loss")
#: how close a reported lr must be to the planned one (float32 optimizers, printed values)
LR_REL_TOL, LR_ABS_TOL = 1e-5, 1e-12

#: what to look at when a loop strays from the plan, by what sent the report
LR_HINTS = {
    "hf": "is `optimizers=hf.optimizers(model, config)` passed to the Trainer?",
    "lightning": "does the LightningModule's configure_optimizers return "
                 "`lightning.configure_optimizers(self, config)`?",
    "loop_helpers": "is the optimizer stepped with `scheduler = loop_helpers.lr_scheduler("
                    "optimizer, config)` (scheduler.step() after each optimizer.step()), and is "
                    "the lr reported the one the update ran with (read before scheduler.step())?",
}
COUNT_HINTS = {
    "hf": "are the Trainer's arguments `args=hf.training_arguments(config, model)` (max_steps = "
          "total_updates), not TrainingArguments of the script's own?",
    "lightning": "is the Trainer built with `pl.Trainer(**lightning.trainer_arguments(config))` "
                 "(max_steps = total_updates) and the adapter's ReportCallback?",
    "loop_helpers": "does the loop stop after config['total_updates'] updates, and report the "
                    "last one (loop_helpers.eval_due)?",
}
#: how to report at all, by the adapter the loop used (:attr:`LoopRun.adapter`)
REPORT_HINTS = {
    "hf": "pass `callbacks=[hf.ReportCallback(config)]` to the Trainer",
    "lightning": "pass `callbacks=[lightning.ReportCallback(config)]` to the pl.Trainer",
    "loop_helpers": "report {'update': k, 'dev_loss': x, 'lr': lr} at every evaluation "
                    "(scalesweep.loop_helpers.report)",
}
NO_LR_HINT = ("every report needs the lr its update ran with, to be checked against the plan: "
              "loop_helpers.report(config, update=k, dev_loss=x, lr=lr) with lr = "
              "scheduler.get_last_lr()[0] read before that update's scheduler.step() (or "
              "ray.train.report({'update': k, 'dev_loss': x, 'lr': lr})); the adapters' "
              "ReportCallback reports it")
#: the checked report a checkpoint came with, written into the checkpoint beside the loop's
#: files: a resumed sweep logs it when the driver died before MLflow had it
REPORT_FILE = "scalesweep_report.json"

LoopFunction = Callable[[dict[str, Any]], Any]


class TrainLoopError(ScalesweepError, ValueError):
    """A ``train_loop`` path that names no importable callable."""


class LoopReportError(ScalesweepError, RuntimeError):
    """A report of a user's loop that breaks the contract; ends its trial as failed."""


class SharedContractError(LoopReportError):
    """A break of the report contract that the trial's plan has no part in: a report without
    ``update``, ``dev_loss`` or ``lr``, a value that is not a number, an update that is not a
    count, a loop that never reports or trains without its adapter's report callback. Every
    trial runs the same loop and will break it the same way, so the sweep stops at the first
    (``scalesweep.orchestrator.tracking.callback``; the trial's result says so with
    :data:`SHARED_FAILURE_KEY`). A diverged loss, an lr or an update count off the plan stay
    failures of their own trial."""


#: the key of a failed trial's last result whose failure is a :class:`SharedContractError`
SHARED_FAILURE_KEY = "_scalesweep_shared_failure"


def shared_failure(exc: BaseException) -> SharedContractError | None:
    """The :class:`SharedContractError` behind Ray Train's failure ``exc``, if that is what it
    is: the controller's error (the report checker runs there), a worker's, or a cause."""
    todo, seen = [exc], set()
    while todo:
        error = todo.pop()
        if isinstance(error, SharedContractError):
            return error
        if id(error) in seen:  # a chain of causes that loops
            continue
        seen.add(id(error))
        failures = getattr(error, "worker_failures", None)
        todo.extend(e for e in (getattr(error, "controller_failure", None), error.__cause__,
                                getattr(error, "cause", None),
                                *(failures.values() if isinstance(failures, Mapping) else ()))
                    if isinstance(e, BaseException))
    return None


def plan_of(config: Mapping[str, Any]) -> dict[str, Any]:
    """What a train_loop's reports are checked against, from the config the loop receives: the
    planned schedule (``scheduler``, with the lr after the lr rule) and ``total_updates``."""
    return {"scheduler": loop_schedule(config).as_dict(), "lr": float(config["optimizer"]["lr"]),
            "total_updates": int(config["total_updates"])}


@dataclass
class PlanCheck:
    """A trial's plan as its reports are checked against it (:func:`plan_of`)."""

    plan: Mapping[str, Any]
    schedule: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        from scalesweep.science import schedules  # the planner's own; no torch, no Ray

        self.schedule = schedules.build(loop_schedule(self.plan), float(self.plan["lr"]))

    @property
    def total_updates(self) -> int:
        return int(self.plan["total_updates"])

    def lr(self, update: int) -> float:
        return float(self.schedule.lr(update))

    def stray(self, update: int, lr: float, source: str | None) -> str | None:
        """What is wrong with a report of ``update`` at ``lr`` (None: nothing)."""
        if update > self.total_updates:
            return (f"reported update {update}, past the plan's {self.total_updates} updates: "
                    f"{_hint(COUNT_HINTS, source)}")
        planned = self.lr(update)
        if not math.isclose(lr, planned, rel_tol=LR_REL_TOL, abs_tol=LR_ABS_TOL):
            return (f"update {update} ran at lr {lr:.6g}, the plan says {planned:.6g}: "
                    f"{_hint(LR_HINTS, source)}")
        return None


def _hint(hints: Mapping[str, str], source: str | None) -> str:
    """The hint for the report's sender; a loop of its own (loop_helpers.report, or
    ray.train.report, which names no sender) gets the plain loop's."""
    return hints.get(source or "loop_helpers", hints["loop_helpers"])


def resolve_train_loop(path: str) -> LoopFunction:
    """The function ``"package.module:function"`` names; :class:`TrainLoopError` when the
    module cannot be imported or has no callable of that name (with the import hint every
    module path gets, :mod:`scalesweep.trainables.module_path`)."""
    try:
        return import_callable(path, "train_loop_per_worker(config)")
    except ModulePathError as exc:
        raise TrainLoopError(str(exc)) from None


@dataclass
class ReportChecker:
    """Checks and completes the reports of one trial's loop (rank 0's, as Ray Train hands
    them to its callbacks), in order.

    A report must carry ``update`` (an integer >= 1, larger than the previous report's since
    the last start of the worker group) and ``dev_loss``, every value must be a finite number,
    and ``wall_s`` must not go back. With the trial's ``plan`` (:class:`PlanCheck`, from the
    start marker) it must also carry ``lr``, the planned schedule's lr of that update, its
    update must not pass the planned total, and the last report must be of the last update.
    Missing clocks are filled in: ``epoch`` = update /
    updates_per_epoch, ``samples_seen`` = update x global_batch, ``wall_s`` = the trial's
    training seconds: ``wall_offset`` (what earlier starts of the trial trained, as their last
    report says) plus the seconds since the loop last started (``clock``: the caller's monotonic
    time in seconds, so the checker stays pure). A restarted or resumed trial's clock thus goes
    on, as the built-in loop's does from its checkpoint, and wall-time crossings stay ordered.
    """

    trial: str
    train_loop: str
    updates_per_epoch: int
    global_batch: int
    wall_offset: float = 0.0
    started: float | None = None
    last_update: int | None = None
    last: dict[str, float] = field(default_factory=dict)
    reports: int = 0
    plan: PlanCheck | None = None
    #: what sent the last report (SOURCE_KEY), for the hint of finish()
    source: str | None = None

    def start(self, clock: float, plan: Mapping[str, Any] | None = None) -> None:
        """The worker group (re)started the loop: the clock goes on from the last report's
        wall_s, updates may begin again (steps already logged are not logged twice by the
        tracker). ``plan``: what the start marker carried (:func:`plan_of`)."""
        self.wall_offset = max(self.wall_offset, self.last.get("wall_s", 0.0))
        self.started, self.last_update = clock, None
        if plan is not None:
            self.plan = PlanCheck(plan)

    def check(self, metrics: Mapping[str, Any], clock: float) -> dict[str, float]:
        """The report as it goes to Tune, or :class:`LoopReportError` naming what is wrong."""
        metrics = dict(metrics)
        source = metrics.pop(SOURCE_KEY, None)
        self.source = source if isinstance(source, str) else None
        for key in REQUIRED_KEYS:
            if key not in metrics:
                self._fail(f"reported without {key!r} (keys: {sorted(metrics)}); every report "
                           f"needs {' and '.join(map(repr, REQUIRED_KEYS))}", shared=True)
        out: dict[str, float] = {}
        for key, value in metrics.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                self._fail(f"reported {key}={value!r}: every value must be a number", shared=True)
            if not math.isfinite(value):
                self._fail(f"reported {key}={value!r} at update {metrics[STEP_KEY]!r}: every value "
                           "must be finite")
            out[key] = value
        update = out[STEP_KEY]
        if update != int(update) or update < 1:
            self._fail(f"reported update={update!r}: must be an integer >= 1 (the optimizer "
                       "updates made so far)", shared=True)
        if self.last_update is not None and update <= self.last_update:
            self._fail(f"reported update={int(update)} after update={self.last_update}: updates "
                       "must increase from report to report")
        self.last_update = int(update)
        out[STEP_KEY] = int(update)
        if self.plan is not None:
            if "lr" not in out:
                self._fail(f"reported update {int(update)} without 'lr': {NO_LR_HINT}", shared=True)
            stray = self.plan.stray(int(update), out["lr"], self.source)
            if stray is not None:
                self._fail(stray)
        out.setdefault("epoch", update / self.updates_per_epoch)
        out.setdefault("samples_seen", float(update * self.global_batch))
        since = 0.0 if self.started is None else max(0.0, clock - self.started)
        out.setdefault("wall_s", self.wall_offset + since)
        previous = self.last.get("wall_s", self.wall_offset)
        if out["wall_s"] < previous:
            self._fail(f"reported wall_s={out['wall_s']!r} after wall_s={previous!r}: the trial's "
                       "training seconds must not go back (a loop that reports its own wall_s "
                       "restores it from its checkpoint)")
        self.last, self.reports = out, self.reports + 1
        return out

    def finish(self, adapter: str | None = None) -> dict[str, Any]:
        """The loop returned: its last report again, now ``completed`` (the tracker does not
        log its step twice), or :class:`LoopReportError` when it never reported. ``adapter``:
        the framework adapter the loop used (the end marker says), for the hint."""
        # a trial resumed past its last update reports nothing new: its last logged eval stands
        if not self.reports and STEP_KEY not in self.last:
            self._fail(f"returned without ever calling ray.train.report: "
                       f"{_hint(REPORT_HINTS, adapter)}", shared=True)
        if self.plan is not None and self.last[STEP_KEY] != self.plan.total_updates:
            self._fail(f"ended at update {int(self.last[STEP_KEY])}, the plan says "
                       f"{self.plan.total_updates} updates: {_hint(COUNT_HINTS, self.source)}")
        return {**self.last, STATUS_TAG: "completed",
                TRAIN_SECONDS_METRIC: self.last.get("wall_s", 0.0)}

    def fail(self, what: str) -> NoReturn:
        """The loop's own worker found what is wrong (a FAIL marker, :func:`fail_trial`): the
        trial fails by name, a failure every trial shares."""
        self._fail(what, shared=True)

    def _fail(self, what: str, shared: bool = False) -> NoReturn:
        error = SharedContractError if shared else LoopReportError
        raise error(f"trial {self.trial}: train_loop {self.train_loop} {what}")


def newest_report(run_dir: Path) -> dict[str, Any] | None:
    """The report of the furthest checkpoint of a train_loop trial's Ray Train run (its
    ``checkpoint_*`` directories under ``run_dir``), or None: the eval its restarted loop will
    not report again."""
    reports = []
    for path in run_dir.glob(f"checkpoint_*/{REPORT_FILE}"):
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):  # a write cut short by the kill: an older one will do
            continue
        if isinstance(report, dict) and isinstance(report.get(STEP_KEY), int):
            reports.append(report)
    return max(reports, key=lambda r: int(r[STEP_KEY]), default=None)


@dataclass
class LoopRun:
    """What this worker's loop has shown of itself while it runs, for the adapters' checks and
    the end marker's hint: the adapter whose arguments it built (``adapter``), and the adapters
    whose ReportCallback saw training begin (``callbacks``)."""

    train_loop: str
    #: how the FAIL marker goes out: ``ray.train.report`` in a Ray Train worker
    send: Callable[[dict[str, Any]], Any] | None = None
    adapter: str | None = None
    callbacks: set[str] = field(default_factory=set)


#: the loop this process runs now (:func:`loop_worker`), None outside a trial
CURRENT: LoopRun | None = None


def current() -> LoopRun | None:
    return CURRENT


@contextlib.contextmanager
def running(train_loop: str, send: Callable[[dict[str, Any]], Any] | None = None
            ) -> Iterator[LoopRun]:
    """This process runs ``train_loop`` as a trial's loop for the duration; ``send`` makes
    its FAIL marker report (:func:`fail_trial`)."""
    global CURRENT
    CURRENT = run = LoopRun(train_loop, send)
    try:
        yield run
    finally:
        CURRENT = None


def fail_trial(reason: str) -> NoReturn:
    """Fail the trial now with ``reason``, a break of the contract every trial of the loop
    shares (:class:`SharedContractError`): a FAIL marker report (every worker of the loop
    finds the same at the same update, so each makes it, as Ray Train wants), which the
    trial's checker raises in Ray Train's controller, a final error (no restart of the group:
    the same loop would fail the same way); then the error here, which ends this worker's
    loop. Outside a trial, the error alone."""
    if CURRENT is not None and CURRENT.send is not None:
        CURRENT.send({MARKER_KEY: FAIL, REASON_KEY: reason})
    raise SharedContractError(reason)


def loop_worker(config: dict[str, Any]) -> None:
    """What each Ray Train worker of a train_loop trial runs: ``config`` =
    ``{"train_loop": "pkg.module:function", "config": <the loop's config>}``."""
    import ray.train  # a Ray Train worker has it; the planner, which imports this module, not

    function = resolve_train_loop(str(config["train_loop"]))
    ray.train.report({MARKER_KEY: START, PLAN_KEY: plan_of(config["config"])})
    with running(str(config["train_loop"]), ray.train.report) as run:
        function(dict(config["config"]))
    end: dict[str, Any] = {MARKER_KEY: END}
    if run.adapter is not None:  # for the hint of a loop that never reported
        end[SOURCE_KEY] = run.adapter
    ray.train.report(end)
