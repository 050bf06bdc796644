"""A Tune callback that logs every trial to MLflow from the sweep driver, and shows progress.

Logging from the driver (not from workers) means only the head node needs to reach the tracking
server, and retries/resumes are deduplicated in one place: a step already logged for a run is
never sent again.
"""

from __future__ import annotations

import contextlib
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import IO, Any

from ray import tune

from scalesweep.errors import ScalesweepError
from scalesweep.mlflow_names import (
    CURVE_METRICS,
    DEV_PREFIX,
    ERROR_TAG,
    RAY_TRIAL_ID_TAG,
    STATUS_TAG,
    STEP_KEY,
    TRAIN_SECONDS_METRIC,
)
from scalesweep.orchestrator.tracking.tracker import (
    JournalUnwritable,
    RunsLost,
    SweepTracker,
    curve_metrics,
    fail_fast,
    is_outage,
)
from scalesweep.trainables.config import SEED_TRIAL_KEY, TrialJob
from scalesweep.trainables.disk_full import DISK_FULL_KEY, CheckpointUnwritable, from_text
from scalesweep.trainables.user_loop import SHARED_FAILURE_KEY, SharedContractError

#: a trial's final statuses
FINAL = ("completed", "diverged", "stopped", "failed")
#: what we keep of a Tune result for convergence metrics and the summary
KEEP = (STEP_KEY, STATUS_TAG, TRAIN_SECONDS_METRIC, *CURVE_METRICS)


def kept(result: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k in KEEP or k.startswith(DEV_PREFIX)}


class SweepCallback(tune.Callback):
    def __init__(self, tracker: SweepTracker, child_for: Callable[[str], str],
                 curves: dict[str, list[dict[str, Any]]], out: IO[str] | None = None,
                 progress_every_s: float = 15.0, total: int | None = None) -> None:
        self.tracker = tracker
        self.child_for = child_for  # trial name -> MLflow run id (created or reused)
        self.curves = curves
        self.run_ids: dict[str, str] = {}
        #: trials whose MLflow run could not be made yet (the server did not answer): their
        #: results (step, metrics, timestamp) and tags wait here until it does
        self.waiting: dict[str, list[tuple[int, dict[str, float], int]]] = {}
        self.deferred_tags: dict[str, dict[str, str]] = {}
        self.status: dict[str, str] = {}
        self.errors: dict[str, str] = {}
        self.out = out  # None: whatever sys.stdout is when we print (it may be rewrapped)
        self.progress_every_s = progress_every_s
        #: trials in this sweep run; Tune creates them lazily (max_concurrent_trials), so its
        #: own list is short of the total until the last ones start
        self.total = total
        self._last_progress = time.monotonic()
        self._started = time.monotonic()
        #: set by the sweep's first Ctrl-C: the trials it stops are left running (open in
        #: MLflow, their checkpoints kept) for resume, never closed as failed or stopped
        self.interrupted = False
        #: what stops the sweep as a Ctrl-C does, raised when Tune's experiment ends, past
        #: Rounds, to the command: the journal could not take an eval (a full disk), or a
        #: trial's loop broke the contract in a way every trial will (SharedContractError)
        self.stopped_by: ScalesweepError | None = None
        #: the trial whose SharedContractError stopped the sweep: left open for resume
        self.stopped_at: str | None = None
        #: asks Tune to stop the experiment gracefully; False where it cannot
        self.stop_tune: Callable[[], bool] = stop_tune
        #: trials whose run was closed (a fused trial's seeds close one by one as they end)
        self.closed: set[str] = set()

    @staticmethod
    def name(trial: Any) -> str:
        return TrialJob.name_in(trial.config)

    @staticmethod
    def seed_names(trial: Any) -> list[str]:
        """The trials (MLflow runs) a Tune trial runs: a fused trial's seeds, else itself."""
        return TrialJob.seed_names_in(trial.config)

    def _say(self, text: str) -> None:
        elapsed = time.monotonic() - self._started
        out = self.out or sys.stdout
        out.write(f"[{elapsed:6.0f}s] {text}\n")
        out.flush()

    def run_for(self, name: str) -> str | None:
        """The trial's MLflow run, made now if it has none; None while the server does not
        answer. MLflow's client would retry for minutes, stalling Tune's loop and with it every
        trial's reports; a trial starting during an outage must not end the sweep either."""
        run_id = self.run_ids.get(name)
        if run_id is not None:
            return run_id
        try:
            with fail_fast():
                run_id = self.child_for(name)
        except Exception as exc:
            if not is_outage(exc):
                raise
            if name not in self.waiting:
                self._say(f"MLflow unreachable: {name}'s run will be made when it answers "
                          f"({type(exc).__name__})")
            self.waiting.setdefault(name, [])
            return None
        self.run_ids[name] = run_id
        for step, metrics, ts in self.waiting.pop(name, []):
            self._add(run_id, step, metrics, ts)
        if name in self.deferred_tags:
            self._send_tags(name, run_id, self.deferred_tags.pop(name))
        return run_id

    def _tag(self, name: str, tags: Mapping[str, str]) -> None:
        """Set tags on the trial's run, or keep them for when MLflow answers again."""
        pending = {**self.deferred_tags.pop(name, {}), **tags}
        run_id = self.run_for(name)  # sends what was kept back, if it makes the run now
        if run_id is None:
            self.deferred_tags[name] = {**self.deferred_tags.pop(name, {}), **pending}
        else:
            self._send_tags(name, run_id, pending)

    def _send_tags(self, name: str, run_id: str, tags: Mapping[str, str]) -> None:
        try:
            with fail_fast():
                self.tracker.set_tags(run_id, tags)
        except Exception as exc:
            if not is_outage(exc):
                raise
            self.deferred_tags[name] = {**tags, **self.deferred_tags.pop(name, {})}

    def settle(self, deadline_s: float = 0.0) -> bool:
        """Make the runs that wait for MLflow and set the tags kept back, trying again with
        backoff for up to ``deadline_s``; whether nothing is left waiting."""
        end, delay = time.monotonic() + deadline_s, 0.5
        while True:
            for name in [*self.waiting, *self.deferred_tags]:
                if name in self.deferred_tags:
                    self._tag(name, {})
                elif name in self.waiting:
                    self.run_for(name)
            if not (self.waiting or self.deferred_tags) or time.monotonic() > end:
                return not (self.waiting or self.deferred_tags)
            time.sleep(delay)
            delay = min(delay * 2, 10.0)

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        names = self.seed_names(trial)
        for name in names:
            if len(names) > 1 and self.status.get(name) in FINAL:  # a retried fused trial's ended seed
                continue
            self.status[name] = "running"
            self._tag(name, {STATUS_TAG: "running", RAY_TRIAL_ID_TAG: trial.trial_id})
            self._say(f"{'started':<9} {name}")

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any,
                        result: dict[str, Any], **info: Any) -> None:
        # a fused trial's result is one seed's, named by it (trainables.seed_fusion)
        name = str(result.get(SEED_TRIAL_KEY) or self.name(trial))
        if result.get(STATUS_TAG) == "failed" and DISK_FULL_KEY in result:
            self._stop_for_disk(name, str(result.get(ERROR_TAG)))
            return
        if result.get(STATUS_TAG) == "failed" and result.get(SHARED_FAILURE_KEY) \
                and not self._contract_kept():
            self._stop_at(name, str(result.get(ERROR_TAG)))
            return
        if result.get(STATUS_TAG) == "failed":  # a ddp trial whose Ray Train retries are spent
            self.status[name] = "failed"
            error = str(result.get(ERROR_TAG) or "failed")
            self.errors[name] = memory_note(error, error, trial_resources(trial))
            return
        if "update" not in result:
            return
        run_id = self.run_for(name)
        step = int(result[STEP_KEY])
        metrics = curve_metrics(result)
        if run_id is None:  # kept in order, a step once, as the tracker would
            waiting = self.waiting[name]
            fresh = not waiting or step > waiting[-1][0]
            if fresh:
                waiting.append((step, metrics, int(time.time() * 1000)))
        else:
            fresh = self._add(run_id, step, metrics)
        if fresh:
            self.curves.setdefault(name, []).append(kept(result))
        status = result.get(STATUS_TAG)
        if status in ("completed", "diverged", "stopped"):
            ended = self.status.get(name) in FINAL
            self.status[name] = str(status)
            if SEED_TRIAL_KEY in result and not ended:  # a fused seed ends now, the others go on
                self._complete(name, trial)
        self._maybe_flush()
        self._progress(trials)

    def _add(self, run_id: str, step: int, metrics: dict[str, float], ts: int | None = None) -> bool:
        """The tracker's add_result; a journal that cannot take it stops the sweep (the eval
        is buffered for MLflow all the same)."""
        try:
            return self.tracker.add_result(run_id, step, metrics, ts)
        except JournalUnwritable as exc:
            self._stop_for(exc)
            return True

    def _why_paused(self) -> str:
        if isinstance(self.stopped_by, JournalUnwritable):
            return "the journal's disk"
        if isinstance(self.stopped_by, CheckpointUnwritable):
            return "a full disk"
        if isinstance(self.stopped_by, RunsLost):
            return "MLflow's store lost the runs"
        return "the loop's contract" if self.stopped_by is not None else "Ctrl-C"

    def _contract_kept(self) -> bool:
        """Whether a trial of this run has ended with its reports accepted: then the loop can
        keep the contract, and a trial that breaks it fails alone."""
        return any(s in ("completed", "diverged", "stopped") for s in self.status.values())

    def _stop_at(self, name: str, error: str) -> None:
        """Trial ``name`` broke the loop's contract as every trial will: stop the sweep, leave
        the trial open in MLflow (resume runs it again once the loop is fixed), and say why once,
        when the sweep ends (the error the command prints)."""
        if self.stopped_by is not None:  # stopping already: left open as the others are
            return
        self.stopped_at = name
        where = (f"`scalesweep resume {self.tracker.journal.parent}`" if self.tracker.journal
                 else "`scalesweep resume` with the sweep's directory")
        self._say(f"{'stopped':<9} {name}: its loop breaks the contract every trial shares; no "
                  "more trials start")
        self._stop_for(SharedContractError(
            f"{error}\nEvery trial of the sweep runs this loop and would fail the same way, so the "
            "sweep stopped at this first failure: the finished trials are kept. Fix the loop, "
            f"then {where} runs the rest, this trial too."), say=False)

    def _stop_for_disk(self, name: str, line: str) -> None:
        """Trial ``name`` could not write to a full disk (its checkpoint, ``line`` says where):
        every trial writes there, so stop the sweep and leave the trial open in MLflow; resume
        runs it from its last whole checkpoint once there is space. Said once, at the end."""
        if self.stopped_by is not None:
            return
        self.stopped_at = name
        self._say(f"{'stopped':<9} {name}: the disk is full; no more trials start")
        sweep_dir = self.tracker.journal.parent if self.tracker.journal else None
        self._stop_for(CheckpointUnwritable(line, name, sweep_dir), say=False)

    def stopper(self, inner: tune.Stopper | None = None) -> tune.Stopper:
        """The experiment's stopper (``inner``'s decisions, if any, and this callback's): once
        :meth:`_stop_for` is asked, Tune stops every trial and ends the experiment at its next
        step. Unlike the SIGUSR1 handler (the Ctrl-C path) this is no signal, so Tune does not
        warn of one ("Stop signal received (e.g. via SIGINT/Ctrl+C)")."""
        self.stop_tune = lambda: True  # the stopper reads stopped_by at Tune's next step
        return _StopWhenAsked(self, inner)

    def _stop_for(self, error: ScalesweepError, say: bool = True) -> None:
        """Stop the sweep as a Ctrl-C does: the trials stop at their last checkpoint, stay open
        in MLflow for resume, and no trial starts; ``say``: print the error now (else the
        command prints it when the sweep ends). Without a way to stop Tune (no
        :meth:`stopper` installed, and fit() in another thread), raise: Tune ends the
        experiment on it, with a traceback."""
        if self.stopped_by is not None:
            return
        self.stopped_by = error
        self.interrupted = True
        if say:
            self._say(f"error: {error}")
        if not self.stop_tune():
            raise error

    def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        """The tracker's timed flush; a store that lost the sweep's runs stops the sweep."""
        try:
            self.tracker.maybe_flush()
        except RunsLost as exc:
            self._stop_for(exc)

    def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._say(f"retrying {self.name(trial)} from its last checkpoint ({_error(trial)})")

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        fused = len(self.seed_names(trial)) > 1
        for name in self.seed_names(trial):
            if not (fused and name in self.closed):  # a fused seed is closed when it ends
                self._complete(name, trial)

    def _complete(self, name: str, trial: Any) -> None:
        """Trial ``name`` (a fused trial's seed) ended: say so, close its run."""
        if name == self.stopped_at:  # said when it stopped the sweep
            return
        if self.interrupted and self.status.get(name) in (None, "running"):
            self._say(f"{'paused':<9} {name} ({self._why_paused()}): resume goes on from its last checkpoint")
            return
        if self.status.get(name) == "failed":  # reported as failed by the trial itself
            self._say(f"{'failed':<9} {name}: {self.errors.get(name, '')}")
            self._close(name)
            return
        last = self.curves.get(name, [{}])[-1]
        if self.status.get(name) in (None, "running"):
            # ended without a final status of its own: a scheduler (ASHA) stopped it early
            total = TrialJob.model_validate(trial.config["trial_config"]).trial.total_updates
            self.status[name] = "completed" if last.get(STEP_KEY, 0) >= total else "stopped"
        dev = last.get("dev_loss")
        shown = f"dev_loss {dev:.4g} " if isinstance(dev, float) else ""
        self._say(f"{self.status[name]:<9} {name}  {shown}at epoch {last.get('epoch', 0):.3g}")
        self._close(name)

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        text = _error_text(trial)
        for name in self.seed_names(trial):
            if name not in self.closed:  # a fused trial's seeds that had ended stay as they ended
                self._error(name, trial, text)

    def _error(self, name: str, trial: Any, text: str) -> None:
        if self.interrupted:  # the Ctrl-C reached the trial's process too: not a failure
            self._say(f"{'paused':<9} {name} ({self._why_paused()}): resume goes on from its last checkpoint")
            return
        if from_text(text) is not None:  # a full disk Tune failed the trial on: stop, as above
            self._stop_for_disk(name, _error_line(text))
            return
        self.status[name] = "failed"
        self.errors[name] = memory_note(_error_line(text), text, trial_resources(trial))
        self._say(f"{'failed':<9} {name}: {self.errors[name]}")
        self._close(name)

    def _close(self, name: str) -> None:
        """End the trial's run now, so a sweep killed later leaves it finished (and a resume
        leaves it alone). Summary metrics follow at the end of the sweep."""
        if name not in self.run_ids and name not in self.waiting:
            return  # never started nor reported: nothing in MLflow to close
        self.closed.add(name)
        status = self.status[name]
        tags = {**self.deferred_tags.pop(name, {}), STATUS_TAG: status,
                **({ERROR_TAG: self.errors[name]} if name in self.errors else {})}
        try:
            run_id = self.run_for(name)
            if run_id is None:
                raise ConnectionError("its run is not made yet")
            with fail_fast():
                self.tracker.flush(raise_on_error=True)
                self.tracker.set_tags(run_id, tags)
                self.tracker.end_run(run_id, run_status(status))
        except RunsLost as exc:  # the store lost its runs: stop, nothing dropped
            self.deferred_tags[name] = tags
            self._stop_for(exc)
        except Exception as exc:  # tracking outage: the end of the sweep retries
            if not is_outage(exc):
                raise
            self.deferred_tags[name] = tags
            self._say(f"could not close {name} in MLflow yet ({type(exc).__name__})")

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        self.settle()
        self.tracker.flush()
        if self.stopped_by is not None:  # out of fit() as it is: no later round starts
            raise self.stopped_by

    def _progress(self, trials: list[Any]) -> None:
        if time.monotonic() - self._last_progress < self.progress_every_s:
            return
        self._last_progress = time.monotonic()
        done = sum(1 for s in self.status.values() if s not in ("running",))
        running = [n for n, s in self.status.items() if s == "running"]
        parts = []
        for n in running[:4]:
            last = self.curves.get(n, [{}])[-1]
            if "epoch" in last:
                parts.append(f"{n} ep {last['epoch']:.2f} dev_loss {last.get('dev_loss', 0):.4g}")
        total = max(self.total or 0, len(trials))
        self._say(f"{done}/{total} trials done; " + "; ".join(parts))


class _StopWhenAsked(tune.Stopper):
    """Ends the experiment once the callback has a reason to stop the sweep; per trial, what
    ``inner`` (curtailment, a solve's out-of-reach rule) says."""

    def __init__(self, callback: SweepCallback, inner: tune.Stopper | None) -> None:
        self.callback = callback
        self.inner = inner

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return bool(self.inner is not None and self.inner(trial_id, result))

    def stop_all(self) -> bool:
        return self.callback.stopped_by is not None or bool(
            self.inner is not None and self.inner.stop_all())


def stop_tune() -> bool:
    """Tune's graceful stop: the SIGUSR1 handler its fit() installs while it runs in the main
    thread (what launch/ctrl_c.py calls on a Ctrl-C); False where there is none."""
    if not hasattr(signal, "SIGUSR1") or threading.current_thread() is not threading.main_thread():
        return False
    handler = signal.getsignal(signal.SIGUSR1)
    if not callable(handler) or getattr(handler, "__name__", "") != "signal_interrupt_tune_run":
        return False
    handler(signal.SIGUSR1, None)
    return True


def run_status(status: str) -> str:
    """MLflow run status for our trial status (the `status` tag keeps the detail)."""
    return "FINISHED" if status in ("completed", "stopped") else "FAILED"


def _error(trial: Any) -> str:
    """The last line of the trial's error (Tune keeps the traceback in its error file)."""
    return _error_line(_error_text(trial))


def _error_text(trial: Any) -> str:
    """The trial's whole error: Tune's traceback, or what the trial holds."""
    text = ""
    # Tune writes the error file in the driver's staging directory (``error_file``) and copies
    # it to storage (what ``get_error`` reads) only at its next sync, which may come minutes
    # later when no trial checkpoints in between: read the local copy first.
    with contextlib.suppress(Exception):
        local = getattr(trial, "error_file", None)
        if local:
            with open(local, encoding="utf-8", errors="replace") as f:
                text = f.read()
    with contextlib.suppress(Exception):  # storage unreadable: use what the trial holds
        text = text or str(trial.get_error() or "")
    return text or str(getattr(trial, "error_msg", None) or "error")


def _error_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    # the exception line, not Ray's framing ("ray::...", "The actor died ...")
    useful = [ln for ln in lines if "Error" in ln and not ln.startswith(("ray::", "File "))]
    return (useful or lines or ["error"])[-1][:300]


#: what a trial's error says when it ran out of memory: Ray's memory monitor killed a worker
#: ("... killed due to the node running low on memory", OutOfMemoryError), Python could not
#: allocate (MemoryError), torch's allocator could not (CPU "can't allocate memory", "CUDA out
#: of memory", torch.OutOfMemoryError), or the kernel's OOM killer ended the process
MEMORY_FAILURE = re.compile(
    r"OutOfMemoryError|\bMemoryError\b|out of memory|low on memory|memory pressure"
    r"|can(?:'|no)t allocate memory|\bOOM\b", re.IGNORECASE)
MEMORY_HINT = "out of memory"


def trial_resources(trial: Any) -> str:
    """The resources a trial asked for, as the sweep file names them (``resources``)."""
    with contextlib.suppress(Exception):
        job = TrialJob.model_validate(trial.config["trial_config"])
        workers = job.trial.physical_workers
        parts = [f"{workers} worker{'s' if workers != 1 else ''}" if job.trial.backend == "ddp"
                 else "1 process (simulate)", f"cpus_per_worker {job.cpus_per_worker:g}"]
        if job.trial.use_gpu:
            parts.append(f"gpus_per_worker {job.gpus_per_worker:g}")
        if job.trial.memory_per_worker_gb is not None:
            parts.append(f"memory_per_worker {job.trial.memory_per_worker_gb:g} GiB")
        return ", ".join(parts)
    return "unknown"


def memory_note(line: str, text: str, resources: str) -> str:
    """``line`` (a failed trial's error), with what to do when ``text`` (its whole error) says
    the trial ran out of memory; ``line`` unchanged otherwise."""
    if not MEMORY_FAILURE.search(text) or line.startswith(MEMORY_HINT):
        return line
    gpu = "CUDA" in text
    if not gpu and "memory_per_worker" in resources:  # its own limit, which Ray reserved
        return (f"{MEMORY_HINT} ({line[:200]}): the trial's resources were {resources}: raise "
                "resources.memory_per_worker (Ray then places fewer workers on a node) or lower "
                "training.per_worker_batch (accum_grad keeps the global batch)")
    return (f"{MEMORY_HINT} ({line[:200]}): the trial's resources were {resources}, and Ray "
            + ("reserves no GPU memory for it" if gpu else "places trials by CPU, not memory")
            + ": lower training.per_worker_batch (accum_grad keeps the global batch), or run "
            "fewer trials at once (resources.max_concurrent_trials)"
            + ("" if gpu else " or give each worker more CPUs (resources.cpus_per_worker), or "
               "reserve memory for each (resources.memory_per_worker)"))
