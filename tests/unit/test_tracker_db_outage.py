"""A database store that cannot be reached, as the tracker meets it (a PostgreSQL restart under
a direct URI; the end-to-end case is tests/integration/test_store_restart_e2e.py): the flush
keeps the metrics and says "MLflow unreachable" once, without MLflow's SQL store's traceback
for each failed request; outside the tracker's own requests, MLflow's log is left as it is.

A real MLflow SQL store on a SQLite file that turns into a directory under it: each new
connection (NullPool, MLflow's documented pool setting) then fails as a database that is down
does, with SQLAlchemy's OperationalError.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.exceptions import MlflowException

from scalesweep.orchestrator.tracking.tracker import SQL_STORE_LOGGER, SweepTracker, fail_fast


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
