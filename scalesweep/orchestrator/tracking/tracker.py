"""MLflow bookkeeping for a sweep, all from the driver (only the head needs to reach the server).

Layout (docs/design.md §4.5): experiment = study name; one parent run per sweep invocation; one child
run per trial (tag ``mlflow.parentRunId``), named from its axes. Metrics are buffered and sent
with ``log_batch`` (one request per flush, not one per value), and a step is never sent twice
for a run: a retried trial or a resumed sweep re-reports evals the run already has.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from scalesweep.errors import ScalesweepError
from scalesweep.mlflow_names import (
    CURVE_METRICS,
    DEV_PREFIX,
    PARENT_TAG,
    ROLE_TAG,
    STATUS_TAG,
    TRIAL_NAME_TAG,
    store_uri_for_mlflow,
)
from scalesweep.orchestrator.tracking import atomic_file, sqlite_template

log = logging.getLogger(__name__)


def experiment_id_for(client: MlflowClient, name: str) -> str:
    """The experiment ``name``, made if it does not exist. Create first, look up on "already
    exists": two sweeps of one study starting together then both get it, where look-then-create
    would fail the one that loses the race."""
    try:
        return str(client.create_experiment(name))
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    exp = client.get_experiment_by_name(name)
    if exp is None:  # deleted between the two calls: say so rather than guess
        raise RuntimeError(f"MLflow experiment {name!r} exists but cannot be read back (deleted?)")
    return str(exp.experiment_id)

#: what a trial reports per eval that goes to MLflow as a metric (plus every dev_* key)
CURVE_KEYS = CURVE_METRICS
MAX_BATCH = 1000  # MLflow's limit of metrics per log_batch request
MAX_PARAM_LEN = 6000
FAIL_FAST = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
#: after a flush the server did not answer, the next automatic one waits BACKOFF_S, doubling
#: with each failure up to MAX_BACKOFF_S: a server that accepts connections and never answers
#: then costs one request timeout per backoff, not one per run per flush
BACKOFF_S = 5.0
MAX_BACKOFF_S = 60.0


class JournalUnwritable(ScalesweepError, RuntimeError):
    """The journal could not take an eval (a full disk, a quota): the sweep stops, to be
    resumed once there is space, rather than train on with evals a killed driver would lose."""

    def __init__(self, journal: Path, error: OSError) -> None:
        self.journal = journal
        self.error = error
        code = errno.errorcode.get(error.errno or 0, str(error.errno))
        super().__init__(
            f"{journal}: cannot append an eval ({error.strerror or error}, {code}); the journal "
            "must hold every eval the driver accepted, so the sweep stops: finished trials are "
            "kept, the others go on from their last checkpoint. Free space, then "
            f"`scalesweep resume {journal.parent}`")


class RunsLost(ScalesweepError, RuntimeError):
    """The store no longer has runs the sweep writes to: the server came back on another store,
    or on an empty one. Every metric would be refused (404) and dropped name by name, so the
    sweep stops instead, its evals kept (buffered, journaled) for a resume against the right
    store."""

    def __init__(self, uri: str, runs: Mapping[str, str], sweep_dir: Path | None) -> None:
        self.runs = dict(runs)  # run id -> trial name (or the run id)
        named = ", ".join(f"{name} ({run_id})" if name != run_id else run_id
                          for run_id, name in sorted(self.runs.items(), key=lambda kv: kv[1]))
        where = (f"`scalesweep resume {sweep_dir}`" if sweep_dir
                 else "`scalesweep resume` with the sweep's directory")
        super().__init__(
            f"the MLflow store at {uri} no longer has the sweep's runs {named}: the server came "
            "back on another or an empty store (a database lost in a restart, another "
            "--backend-store-uri), where every metric would be refused and dropped. The sweep "
            "stops instead: finished trials are kept, and the journal holds every eval MLflow "
            f"did not take. Start the server on the sweep's store again, then {where}")


def curve_metrics(result: Mapping[str, Any]) -> dict[str, float]:
    """The metrics of one eval report that belong on the run's charts."""
    out = {}
    for key, value in result.items():
        if (key in CURVE_KEYS or key.startswith(DEV_PREFIX)) and isinstance(value, int | float) \
                and not isinstance(value, bool) and value is not None:
            out[key] = float(value)
    return out


@dataclass
class _Buffer:
    metrics: list[Metric] = field(default_factory=list)
    last_step: int = -1  # highest step already accepted for this run


class SweepTracker:
    def __init__(self, tracking_uri: str, experiment: str, flush_every_s: float = 2.0,
                 journal: Path | None = None) -> None:
        self.uri = tracking_uri
        # Write-ahead log of every accepted eval: a driver killed between two flushes loses
        # nothing, because `resume` replays what MLflow did not get (trials resume from
        # checkpoints that may be newer than the last flush).
        self.journal = journal
        sqlite_template.seed_new_store(tracking_uri)  # a new SQLite store without its migrations
        self.client = MlflowClient(store_uri_for_mlflow(tracking_uri))
        self.experiment = experiment
        self.flush_every_s = flush_every_s
        self._experiment_id: str | None = None
        self._buffers: dict[str, _Buffer] = {}
        self._made: dict[str, str] = {}  # trial name -> the child run made for it here
        self._create_tried: set[str] = set()  # trial names whose create_run was sent
        self._last_flush = time.monotonic()
        self._failing_since: float | None = None
        self._failed_flushes = 0  # in a row: each doubles the wait before the next automatic one
        #: (run id, metric name) -> the server's message, for metrics it refused (4xx)
        self.rejected: dict[tuple[str, str], str] = {}
        #: run id -> trial name, for the runs this tracker writes to (to name a lost one)
        self.names: dict[str, str] = {}
        #: runs the store no longer has (RunsLost): their metrics stay buffered, never dropped
        self.lost: dict[str, str] = {}

    # -- runs -------------------------------------------------------------------------------
    @property
    def experiment_id(self) -> str:
        if self._experiment_id is None:
            self._experiment_id = experiment_id_for(self.client, self.experiment)
        return self._experiment_id

    def start_parent(self, params: Mapping[str, Any], tags: Mapping[str, str]) -> str:
        run = self.client.create_run(self.experiment_id, run_name=self.experiment,
                                     tags={ROLE_TAG: "parent", **tags})
        self.log_params(run.info.run_id, params)
        return str(run.info.run_id)

    def children(self, parent_id: str) -> dict[str, Any]:
        """Existing child runs of a parent by trial name (for resume)."""
        runs = self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{parent_id}'",
            max_results=5000)
        return {r.data.tags.get(TRIAL_NAME_TAG, r.info.run_name): r for r in runs}

    def child(self, parent_id: str, name: str, params: Mapping[str, Any],
              existing: Mapping[str, Any] | None = None) -> str:
        """The child run of trial ``name``: reused when it exists, so a trial keeps one run."""
        found = (existing or {}).get(name)
        if found is not None:
            run_id = self.adopt(str(found.info.run_id))
            self.names[run_id] = name
            if found.info.status != "RUNNING":
                self.client.update_run(run_id, status="RUNNING")
            return run_id
        made = self._made.get(name)
        if made is None:
            made = self._made[name] = self._create_child(parent_id, name)
            self._buffers[made] = _Buffer()
            self.names[made] = name
        # again after an outage cut this short: MLflow takes a param logged twice with one value
        self.log_params(made, params)
        return made

    def _create_child(self, parent_id: str, name: str) -> str:
        """A new child run for trial ``name``, or the one an earlier try made. A server (or its
        database) that restarts after committing ``create_run`` and before replying leaves a
        run the caller never heard of: a second create would give the trial two runs, one of
        them empty, so a try after a failed one looks for that run first."""
        if name in self._create_tried:
            found = self._child_named(parent_id, name)
            if found is not None:
                return found
        self._create_tried.add(name)  # before the call: it may fail after the commit
        run = self.client.create_run(
            self.experiment_id, run_name=name, tags={PARENT_TAG: parent_id, ROLE_TAG: "trial",
                                                     TRIAL_NAME_TAG: name, STATUS_TAG: "pending"})
        return str(run.info.run_id)

    def _child_named(self, parent_id: str, name: str) -> str | None:
        """The id of ``parent_id``'s child run named ``name`` (the oldest, should there be
        several), None when there is none. The name is matched here, not in the filter,
        where a quote in it would need escaping."""
        runs = [r for r in self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{parent_id}'",
            max_results=5000) if r.info.run_name == name]
        return str(min(runs, key=lambda r: r.info.start_time).info.run_id) if runs else None

    def adopt(self, run_id: str) -> str:
        """Take over an existing run: later results at steps it already has are dropped."""
        buf = self._buffers.setdefault(run_id, _Buffer())
        buf.last_step = max(buf.last_step, self._max_step(run_id))
        return run_id

    def _max_step(self, run_id: str) -> int:
        hist = self.client.get_metric_history(run_id, "epoch")
        return max((m.step for m in hist), default=-1)

    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        items = [Param(k, _param_str(v)) for k, v in params.items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(run_id, params=items[i : i + 100])

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        self.client.log_batch(run_id, tags=[RunTag(k, str(v)[:5000]) for k, v in tags.items()])

    # -- metrics ----------------------------------------------------------------------------
    def add_result(self, run_id: str, step: int, metrics: Mapping[str, float],
                   timestamp_ms: int | None = None) -> bool:
        """Buffer one eval's metrics at ``step``; False if the run already has that step."""
        buf = self._buffers.setdefault(run_id, _Buffer())
        if step <= buf.last_step:
            return False
        buf.last_step = step
        ts = timestamp_ms or int(time.time() * 1000)
        buf.metrics.extend(Metric(k, v, ts, step) for k, v in metrics.items())
        if self.journal is not None:
            line = json.dumps({"run_id": run_id, "step": step, "ts": ts, "metrics": dict(metrics)})
            try:
                atomic_file.append_line(self.journal, line)
            except OSError as exc:  # buffered all the same: MLflow gets it at the next flush
                raise JournalUnwritable(self.journal, exc) from exc
        return True

    def replay_journal(self) -> list[dict[str, Any]]:
        """Buffer the journal's evals that MLflow does not have yet; returns them (in order)."""
        if self.journal is None or not self.journal.exists():
            return []
        replayed = []
        for line in self.journal.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by the kill
                continue
            buf = self._buffers.get(entry["run_id"])
            if buf is None or entry["step"] <= buf.last_step:
                continue
            journal, self.journal = self.journal, None  # do not journal the replay again
            try:
                self.add_result(entry["run_id"], entry["step"], entry["metrics"], entry["ts"])
            finally:
                self.journal = journal
            replayed.append(entry)
        return replayed

    def add_summary(self, run_id: str, metrics: Mapping[str, float | None]) -> None:
        buf = self._buffers.setdefault(run_id, _Buffer())
        ts = int(time.time() * 1000)
        buf.metrics.extend(Metric(k, float(v), ts, 0) for k, v in metrics.items() if v is not None)

    def maybe_flush(self) -> None:
        wait = self.flush_every_s
        if self._failed_flushes:
            wait = max(wait, min(BACKOFF_S * 2 ** (self._failed_flushes - 1), MAX_BACKOFF_S))
        if time.monotonic() - self._last_flush >= wait:
            self.flush()

    def flush(self, raise_on_error: bool = False) -> bool:
        """Send every buffered metric. On failure keep them for the next try (an outage of
        the tracking server must not kill training nor lose a metric)."""
        with fail_fast():
            return self._flush(raise_on_error)

    def _flush(self, raise_on_error: bool) -> bool:
        """Raises RunsLost, whatever ``raise_on_error``, once the store lacks a run: no later
        flush sends anything (the metrics wait for a resume against the right store)."""
        self._last_flush = time.monotonic()
        if self.lost:
            raise self._runs_lost()
        ok = True
        for run_id, buf in self._buffers.items():
            if not ok:  # the server did not answer: the other runs' metrics wait too
                break
            while buf.metrics:
                chunk = buf.metrics[:MAX_BATCH]
                try:
                    self.client.log_batch(run_id, metrics=chunk)
                except Exception as exc:
                    if _missing(exc) and self._gone(run_id):
                        # not this metric refused: the store lost the run (and likely all)
                        self.lost = {r: self.names.get(r, r) for r in self._buffers
                                     if r == run_id or self._gone(r)}
                        raise self._runs_lost() from exc
                    if _rejected(exc):
                        # the server refused the request (4xx): retrying cannot help, and
                        # holding it would block every later metric of the run
                        rest = self._send_apart(run_id, chunk)
                        buf.metrics[: len(chunk)] = rest
                        if not rest:
                            continue
                    ok = False
                    if self._failing_since is None:
                        self._failing_since = time.monotonic()
                        log.warning("MLflow unreachable (%s); buffering metrics and retrying", exc)
                    if raise_on_error:
                        raise
                    break
                del buf.metrics[: len(chunk)]
        if ok and self._failing_since is not None:
            log.warning("MLflow reachable again after %.0f s; buffered metrics sent",
                        time.monotonic() - self._failing_since)
            self._failing_since = None
        self._failed_flushes = 0 if ok else min(self._failed_flushes + 1, 16)
        return ok

    def _gone(self, run_id: str) -> bool:
        """Whether the store answers that it has no run ``run_id`` (not: does not answer)."""
        try:
            self.client.get_run(run_id)
        except Exception as exc:
            return _missing(exc)
        return False

    def _runs_lost(self) -> RunsLost:
        return RunsLost(self.uri, self.lost, None if self.journal is None else self.journal.parent)

    def _send_apart(self, run_id: str, chunk: list[Metric]) -> list[Metric]:
        """After a 4xx on ``chunk``: send it again one metric name at a time, so only the names
        the server refuses are dropped; each refusal is logged once with the server's message
        and kept in ``rejected``. Returns what is still unsent if the server stops answering
        midway (names already sent are not sent twice)."""
        by_key: dict[str, list[Metric]] = {}
        for m in chunk:
            by_key.setdefault(m.key, []).append(m)
        keys = list(by_key)
        for i, key in enumerate(keys):
            try:
                self.client.log_batch(run_id, metrics=by_key[key])
            except Exception as exc:
                if not _rejected(exc):
                    return [m for k in keys[i:] for m in by_key[k]]
                if (run_id, key) not in self.rejected:
                    self.rejected[(run_id, key)] = str(exc)
                    log.error("MLflow rejected metric %r of run %s, dropped: %s", key, run_id, exc)
        return []

    def pending(self) -> int:
        return sum(len(b.metrics) for b in self._buffers.values())

    def flush_with_retry(self, deadline_s: float = 120.0) -> bool:
        """False at once where the store lost runs (RunsLost): no retry can help."""
        if self.lost:
            return False
        end = time.monotonic() + deadline_s
        delay = 0.5
        while True:
            try:
                if self.flush():
                    return True
            except RunsLost:
                return False
            if time.monotonic() > end:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 10.0)

    def unsent(self) -> list[dict[str, Any]]:
        return [{"run_id": run_id, "key": m.key, "value": m.value, "timestamp": m.timestamp,
                 "step": m.step} for run_id, b in self._buffers.items() for m in b.metrics]

    def replay(self, rows: Iterable[Mapping[str, Any]]) -> None:
        for row in rows:
            buf = self._buffers.setdefault(row["run_id"], _Buffer())
            buf.metrics.append(Metric(row["key"], row["value"], row["timestamp"], row["step"]))

    def end_run(self, run_id: str, status: str) -> None:
        self.client.set_terminated(run_id, status=status)


def is_outage(exc: BaseException) -> bool:
    """Whether a failed MLflow request means the server did not answer (try again later), not
    that it refused the request (or that our own code failed)."""
    from mlflow.exceptions import MlflowException

    return (isinstance(exc, MlflowException | OSError) and not _rejected(exc)) or _database_cut(exc)


def _database_cut(exc: BaseException) -> bool:
    """Whether a direct database URI's connection was refused or cut. MLflow's SQL store turns
    that into a 503 MlflowException, except where the rollback of its outer session fails on
    the same dead connection (log_batch nests two sessions): then SQLAlchemy's own error
    comes out, as a PostgreSQL restart in the middle of a request shows."""
    from sqlalchemy.exc import DBAPIError, OperationalError

    return isinstance(exc, OperationalError) or (isinstance(exc, DBAPIError)
                                                 and bool(exc.connection_invalidated))


def _missing(exc: BaseException) -> bool:
    """Whether MLflow answered that what the request names does not exist (404)."""
    return getattr(exc, "error_code", None) == "RESOURCE_DOES_NOT_EXIST"


def _rejected(exc: BaseException) -> bool:
    """Whether MLflow refused the request itself (HTTP 4xx, or the store's equivalent such as
    an invalid metric name in sqlite), as opposed to not answering (an outage)."""
    from mlflow.exceptions import MlflowException

    if not isinstance(exc, MlflowException):
        return False
    try:
        status = int(exc.get_http_status_code())
    except (TypeError, ValueError):
        return False
    return 400 <= status < 500


#: the logger of MLflow's SQL store, which logs a traceback at each request the database failed
SQL_STORE_LOGGER = "mlflow.store.db.utils"


class _DatabaseDownTraceback(logging.Filter):
    """Drops MLflow's SQL store's traceback of a database it could not reach (a connection
    refused or cut: SQLAlchemy's OperationalError, which the store turns into a 503 error
    that the code inside ``fail_fast`` handles as an outage and reports itself, once). A
    PostgreSQL restart under a direct URI would otherwise print one long traceback per
    request that failed, for an outage the sweep rides out."""

    def filter(self, record: logging.LogRecord) -> bool:
        from sqlalchemy.exc import OperationalError

        return not (record.exc_info and isinstance(record.exc_info[1], OperationalError))


_DATABASE_DOWN = _DatabaseDownTraceback()


@contextlib.contextmanager
def fail_fast() -> Iterator[None]:
    """MLflow's HTTP client retries a failed request for minutes by default; the driver's Tune
    loop would stall on it (and with it every trial's reports). Our buffer retries instead."""
    saved = {k: os.environ.get(k) for k in FAIL_FAST}
    # a server that accepts connections and never answers costs this read timeout per request
    timeout = os.environ.get("SCALESWEEP_TRACKING_TIMEOUT_S") or FAIL_FAST["MLFLOW_HTTP_REQUEST_TIMEOUT"]
    os.environ.update({**FAIL_FAST, "MLFLOW_HTTP_REQUEST_TIMEOUT": timeout})
    sql_log = logging.getLogger(SQL_STORE_LOGGER)
    # nested: only the outermost removes it
    filtering = _DATABASE_DOWN not in sql_log.filters
    if filtering:
        sql_log.addFilter(_DATABASE_DOWN)
    try:
        yield
    finally:
        if filtering:
            sql_log.removeFilter(_DATABASE_DOWN)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _param_str(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:MAX_PARAM_LEN]
