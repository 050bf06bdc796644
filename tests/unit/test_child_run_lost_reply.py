"""A trial's MLflow run is made once even when the server's reply to ``create_run`` is lost
after its commit (a server or database restart between the two): the driver's retry finds the
run the lost reply named instead of making a second, empty one (issue 50)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from scalesweep.mlflow_names import PARENT_TAG
from scalesweep.orchestrator.tracking.tracker import SweepTracker, fail_fast, is_outage
from tests.conftest import MlflowHttp
from tests.support.lost_reply_proxy import LostReplyProxy
from tests.support.wsgi_server import ServedApp

CREATE_RUN = "/runs/create"


@pytest.fixture
def proxy(mlflow_http: MlflowHttp) -> Iterator[LostReplyProxy]:
    """A proxy in front of MLflow's REST handlers on the session's store (``mlflow_http`` set
    it up), served one request a connection so the proxy knows where a reply ends."""
    from mlflow.server import app

    upstream = ServedApp(app, http10=True).start()
    lossy = LostReplyProxy(upstream.port).start()
    try:
        yield lossy
    finally:
        lossy.stop()
        upstream.stop()


def test_a_child_run_whose_reply_was_lost_is_made_once(proxy: LostReplyProxy, mlflow_http: MlflowHttp,
                                                       tmp_path: Path) -> None:
    tracker = SweepTracker(proxy.uri, f"lost-reply-{uuid.uuid4().hex[:8]}")
    parent = tracker.start_parent({}, {})
    proxy.drop_next(CREATE_RUN)
    with fail_fast(), pytest.raises(Exception) as lost:  # as the Tune callback calls it
        tracker.child(parent, "ws2", {"lr": 0.1})
    assert is_outage(lost.value), lost.value  # what makes the callback try again later
    assert len(proxy.lost) == 1 and CREATE_RUN in proxy.lost[0], proxy.lost
    with fail_fast():
        run_id = tracker.child(parent, "ws2", {"lr": 0.1})
        other = tracker.child(parent, "ws4", {"lr": 0.2})  # a trial with no lost reply: made
    runs = MlflowClient(mlflow_http.uri).search_runs(
        [tracker.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{parent}'")
    assert sorted((r.info.run_name, r.info.run_id) for r in runs) == [("ws2", run_id), ("ws4", other)]
    ws2 = next(r for r in runs if r.info.run_id == run_id)
    assert ws2.data.params == {"lr": "0.1"} and ws2.data.tags["status"] == "pending"
