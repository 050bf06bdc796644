"""A database store that cannot be reached, as the tracker meets it (a PostgreSQL restart under
a direct URI; the end-to-end case is tests/integration/test_store_restart_e2e.py): the flush
keeps the metrics and says "MLflow unreachable" once, without MLflow's SQL store's traceback
for each failed request; outside the tracker's own requests, MLflow's log is left as it is.

A real MLflow SQL store on a SQLite file that turns into a directory under it: each new
connection (NullPool, MLflow's documented pool setting) then fails as a database that is down
does, with SQLAlchemy's OperationalError.

A restart in the middle of a request makes MLflow's SQL store raise SQLAlchemy's own error at
times (the rollback of log_batch's outer session fails on the dead connection) instead of its
503: an outage too, to every caller (the integration test cuts real requests:
tests/integration/test_store_restart_e2e.py::test_requests_cut_by_restarts_fail_only_as_outages).
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.exceptions import MlflowException

from scalesweep.orchestrator.tracking.callback import SweepCallback
from scalesweep.orchestrator.tracking.tracker import (
    SQL_STORE_LOGGER,
    SweepTracker,
    fail_fast,
    is_outage,
)
from tests.unit.test_tune_callback import FakeTrial


class _Records(logging.Handler):
    """What MLflow's SQL store logger lets through its own filters."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def tracebacks(self) -> list[str]:
        return [r.getMessage() for r in self.records if r.exc_info]


@pytest.fixture
def sql_log() -> Iterator[_Records]:
    handler = _Records()
    logger = logging.getLogger(SQL_STORE_LOGGER)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def _tracker_on_a_store_gone_down(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                  ) -> tuple[SweepTracker, str]:
    monkeypatch.setenv("MLFLOW_SQLALCHEMYSTORE_POOLCLASS", "NullPool")  # a new connection per request
    db = tmp_path / "mlflow.db"
    tracker = SweepTracker(f"sqlite:///{db}", "db-outage")
    run_id = tracker.start_parent({}, {})
    db.unlink()
    db.mkdir()  # "unable to open database file": OperationalError, as a refused connection is
    return tracker, run_id


def test_a_flush_to_a_database_that_is_down_keeps_the_metrics_without_mlflows_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sql_log: _Records,
        caplog: pytest.LogCaptureFixture) -> None:
    tracker, run_id = _tracker_on_a_store_gone_down(tmp_path, monkeypatch)
    filters = list(logging.getLogger(SQL_STORE_LOGGER).filters)
    tracker.add_result(run_id, 8, {"dev_loss": 1.0})
    with caplog.at_level(logging.WARNING, logger="scalesweep"):
        assert not tracker.flush()
    assert tracker.pending() == 1
    assert [r.getMessage() for r in caplog.records if "MLflow unreachable" in r.getMessage()]
    assert sql_log.tracebacks() == []
    # the filter goes with the tracker's request: MLflow's log of another request is whole
    assert logging.getLogger(SQL_STORE_LOGGER).filters == filters
    with pytest.raises(MlflowException):
        tracker.client.get_run(run_id)
    assert len(sql_log.tracebacks()) == 1


def test_only_the_outermost_fail_fast_takes_the_filter_away(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sql_log: _Records) -> None:
    """The callback closes a trial inside fail_fast, around a flush that has its own."""
    tracker, run_id = _tracker_on_a_store_gone_down(tmp_path, monkeypatch)
    with fail_fast():
        with fail_fast():
            pass
        with pytest.raises(MlflowException):
            tracker.client.get_run(run_id)
    assert sql_log.tracebacks() == []


def test_any_other_error_of_the_store_keeps_its_traceback(sql_log: _Records) -> None:
    """Only a database that cannot be reached is the tracker's to report: any other error that
    logger logs keeps its traceback."""
    import sqlalchemy.exc

    with fail_fast():
        try:
            raise sqlalchemy.exc.ProgrammingError("SELECT", {}, Exception("syntax error"))
        except sqlalchemy.exc.SQLAlchemyError:
            logging.getLogger(SQL_STORE_LOGGER).exception("SQLAlchemy database error.")
    assert len(sql_log.tracebacks()) == 1


def _cut(orig: Exception) -> Exception:
    """SQLAlchemy's error for a DBAPI error, as its connection code wraps it."""
    import sqlalchemy.exc

    return sqlalchemy.exc.DBAPIError.instance("INSERT INTO metrics ...", {}, orig, Exception)


def test_sqlalchemys_own_error_for_a_cut_connection_is_an_outage() -> None:
    import sqlalchemy.exc

    class DBAPIOperationalError(Exception):  # the DB-API's class names decide SQLAlchemy's
        pass

    DBAPIOperationalError.__name__ = "OperationalError"
    cut = _cut(DBAPIOperationalError("terminating connection due to administrator command"))
    assert isinstance(cut, sqlalchemy.exc.OperationalError) and is_outage(cut)
    invalidated = sqlalchemy.exc.DBAPIError("SELECT 1", {}, Exception("the connection is lost"),
                                            connection_invalidated=True)
    assert is_outage(invalidated)
    # a statement the database refused is no outage: trying again cannot help
    assert not is_outage(sqlalchemy.exc.ProgrammingError("SELECT", {}, Exception("syntax error")))
    assert not is_outage(sqlalchemy.exc.IntegrityError("INSERT", {}, Exception("duplicate key")))


def test_a_trial_whose_run_meets_a_cut_connection_waits_for_it(tmp_path: Path) -> None:
    """Its run is made when the database answers again, rather than the error ending the sweep
    out of Tune's callback."""
    import sqlalchemy.exc

    tracker = SweepTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "cut")
    parent = tracker.start_parent({}, {})
    cut: list[Exception] = [sqlalchemy.exc.OperationalError(
        "INSERT INTO runs ...", {}, Exception("server closed the connection unexpectedly"))]

    def child_for(name: str) -> str:
        if cut:
            raise cut.pop()
        return tracker.child(parent, name, {})

    out = io.StringIO()
    cb = SweepCallback(tracker, child_for, {}, out=out)
    trial = FakeTrial("ws2")
    cb.on_trial_start(0, [trial], trial)
    assert "ws2" in cb.waiting and "MLflow unreachable: ws2's run will be made" in out.getvalue()
    assert cb.settle()
    assert tracker.client.get_run(cb.run_ids["ws2"]).data.tags["status"] == "running"
