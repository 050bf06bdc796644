"""The tracker against a real `mlflow server` process stopped and restarted on its port (the
tracker's other tests, against MLflow's handlers in a thread: tests/unit/test_tracking.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from scalesweep.orchestrator.tracking.tracker import SweepTracker
from tests.support import helpers
from tests.support.helpers import MlflowServer
from tests.unit.test_tracking import _eval, _steps


@pytest.mark.slow  # starts an `mlflow server` process (twice)
def test_server_process_stopped_and_restarted_on_its_port(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The outage the e2e test makes, without a sweep: connections refused by a stopped server
    whose client had been talking to it, then the same server back on the same port."""
    # the server without its job consumers (a process tree of their own that the tracker never
    # talks to): each start is then the tracking server alone
    cli_env = helpers.cli_env
    monkeypatch.setattr(helpers, "cli_env",
                        lambda **extra: cli_env(**{"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **extra}))
    server = MlflowServer(tmp_path / "server").start()
    try:
        tracker = SweepTracker(server.uri, "outage")
        run = tracker.child(tracker.start_parent({}, {}), "t", {})
        tracker.add_result(run, 1, _eval(1))
        assert tracker.flush()
        server.stop()
        tracker.add_result(run, 2, _eval(2))
        assert tracker.flush() is False and tracker.pending() == 3
        server.start()
        assert tracker.flush() and tracker.pending() == 0
        assert _steps(MlflowClient(server.uri), run) == [1, 2]
    finally:
        server.stop()
