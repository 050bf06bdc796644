"""A tracking server that comes back on another store, or an empty one (issue 50 item 5, test 2):
the sweep's runs are not there, and MLflow refuses every write to them (404). The tracker says
which runs are lost (RunsLost) and keeps their metrics, where it used to drop them name by name
as refused; the journal keeps every eval for a resume against the right store. The whole sweep:
tests/integration/test_store_lost_e2e.py."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from scalesweep.orchestrator.tracking.tracker import RunsLost, SweepTracker
from tests.conftest import MlflowHttp


@contextlib.contextmanager
def empty_store(root: Path) -> Iterator[None]:
    """The session's MLflow server answering from a new, empty store (as after a restart that
    lost its database), then from its own again."""
    from mlflow.server import handlers
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    own = handlers._tracking_store
    handlers._tracking_store = SqlAlchemyStore(f"sqlite:///{root / 'empty.db'}", str(root / "a"))
    try:
        yield
    finally:
        handlers._tracking_store = own


def test_a_store_that_lost_the_runs_stops_the_flush_naming_them_and_keeps_the_metrics(
        tmp_path: Path, mlflow_http: MlflowHttp) -> None:
    tracker = SweepTracker(mlflow_http.uri, "store-lost", journal=tmp_path / "journal.jsonl")
    parent = tracker.start_parent({}, {})
    runs = {name: tracker.child(parent, name, {}) for name in ("ws1-s0", "ws2-s0")}
    for run_id in runs.values():
        tracker.add_result(run_id, 10, {"dev_loss": 1.0, "epoch": 0.5})
    assert tracker.flush()
    for run_id in runs.values():
        tracker.add_result(run_id, 20, {"dev_loss": 0.5, "epoch": 1.0})
    with empty_store(tmp_path):
        with pytest.raises(RunsLost) as lost:
            tracker.flush()
        assert tracker.flush_with_retry(deadline_s=0) is False  # no retry can help
        with pytest.raises(RunsLost):  # and no later flush sends anything
            tracker.flush(raise_on_error=False)
    message = str(lost.value)
    assert lost.value.runs == {run_id: name for name, run_id in runs.items()}
    for name, run_id in runs.items():
        assert f"{name} ({run_id})" in message
    assert "came back on another or an empty store" in message
    assert f"`scalesweep resume {tmp_path}`" in message
    assert tracker.rejected == {}  # nothing dropped as refused
    assert tracker.pending() == 4  # both runs' metrics at step 20, kept
    # the right store never got step 20; the journal has it, for resume
    client = MlflowClient(mlflow_http.uri)
    for run_id in runs.values():
        assert [m.step for m in client.get_metric_history(run_id, "dev_loss")] == [10]
    assert (tmp_path / "journal.jsonl").read_text().count('"step": 20') == 2


def test_a_metric_the_store_refuses_is_still_dropped_alone(mlflow_http: MlflowHttp) -> None:
    """A refusal of the metric itself (a name MLflow does not take) is not a lost run."""
    tracker = SweepTracker(mlflow_http.uri, "store-refuses-a-name")
    run_id = tracker.child(tracker.start_parent({}, {}), "ws1-s0", {})
    tracker.add_result(run_id, 10, {"dev_loss": 1.0, "bad name?": 2.0})
    assert tracker.flush()
    assert set(tracker.rejected) == {(run_id, "bad name?")} and tracker.lost == {}
    assert [m.value for m in MlflowClient(mlflow_http.uri).get_metric_history(run_id, "dev_loss")] == [1.0]
