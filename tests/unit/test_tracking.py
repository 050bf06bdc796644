"""SweepTracker in process, against real MLflow stores: a sqlite file, MLflow's own HTTP handlers
(tests/conftest.py ``mlflow_http``, switched to 503 for an outage) and a port nobody listens on.

The slow end-to-end counterpart (a real sweep through a real server outage) is
tests/integration/test_faults.py::test_tracking_server_outage_mid_sweep_loses_no_metric.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import mlflow
import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from scalesweep.mlflow_names import PARENT_TAG, ROLE_TAG
from scalesweep.orchestrator.spec.errors import InputError
from scalesweep.orchestrator.tracking.store_check import check_store
from scalesweep.orchestrator.tracking.tracker import (
    FAIL_FAST,
    MAX_BATCH,
    SweepTracker,
    curve_metrics,
)
from tests.conftest import MlflowHttp
from tests.support.helpers import free_port

NO_RUN = "0" * 32  # a run id: buffering needs no server


def _experiment(request: pytest.FixtureRequest) -> str:
    """One experiment per test, so tests share a store without seeing each other's runs."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", request.node.name)


@pytest.fixture(scope="module")
def sqlite_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    return tmp_path / "metrics.journal.jsonl"


@pytest.fixture
def tracker(sqlite_uri: str, journal: Path, request: pytest.FixtureRequest) -> SweepTracker:
    return SweepTracker(sqlite_uri, _experiment(request), journal=journal)


@pytest.fixture
def http_tracker(mlflow_http: MlflowHttp, request: pytest.FixtureRequest) -> SweepTracker:
    mlflow_http.down = False
    return SweepTracker(mlflow_http.uri, _experiment(request))


def _steps(client: MlflowClient, run_id: str, key: str = "epoch") -> list[int]:
    return [m.step for m in client.get_metric_history(run_id, key)]


def _eval(step: int) -> dict[str, float]:
    return {"epoch": step / 10, "train_loss": 1 / step, "dev_loss": 2 / step}


# --- runs ------------------------------------------------------------------------------------


def test_parent_and_one_child_per_trial_name_reused_across_trackers(tracker: SweepTracker,
                                                                   sqlite_uri: str) -> None:
    parent = tracker.start_parent({"trials": 2, "nested": {"a": [1, 2]}}, {"sweep_file": "s.yaml"})
    a = tracker.child(parent, "ws2", {"world_size": 2, "lr": 0.1})
    b = tracker.child(parent, "ws4", {"world_size": 4, "lr": 0.2})
    client = MlflowClient(sqlite_uri)
    run = client.get_run(parent)
    assert run.data.tags[ROLE_TAG] == "parent" and run.data.tags["sweep_file"] == "s.yaml"
    assert run.data.params == {"trials": "2", "nested": '{"a": [1, 2]}'}
    child = client.get_run(a)
    assert child.info.run_name == "ws2"
    assert child.data.tags[PARENT_TAG] == parent and child.data.tags[ROLE_TAG] == "trial"
    assert child.data.tags["trial_name"] == "ws2" and child.data.tags["status"] == "pending"
    assert child.data.params == {"world_size": "2", "lr": "0.1"}

    tracker.add_result(a, 1, _eval(1))
    assert tracker.flush()
    tracker.end_run(a, "FINISHED")
    # a resumed sweep: a new tracker finds the children by trial name and reuses them
    again = SweepTracker(sqlite_uri, tracker.experiment)
    existing = again.children(parent)
    assert set(existing) == {"ws2", "ws4"}
    assert again.child(parent, "ws2", {"world_size": 2, "lr": 0.1}, existing) == a
    assert again.child(parent, "ws4", {"world_size": 4, "lr": 0.2}, existing) == b
    assert client.get_run(a).info.status == "RUNNING"  # reopened for the resumed trial
    assert not again.add_result(a, 1, _eval(1))  # the run has step 1 already
    children = client.search_runs([again.experiment_id], f"tags.`{PARENT_TAG}` = '{parent}'")
    assert sorted(r.info.run_name for r in children) == ["ws2", "ws4"]


def test_a_step_is_buffered_and_sent_once(tracker: SweepTracker, sqlite_uri: str) -> None:
    run = tracker.child(tracker.start_parent({}, {}), "t", {})
    assert tracker.add_result(run, 10, _eval(10))
    assert not tracker.add_result(run, 10, _eval(10))  # a retried trial re-reports its evals
    assert not tracker.add_result(run, 5, _eval(5))  # ... from an older checkpoint
    assert tracker.add_result(run, 20, _eval(20))
    assert tracker.pending() == 6
    assert tracker.flush() and tracker.pending() == 0
    assert tracker.flush()  # nothing left: nothing sent twice
    client = MlflowClient(sqlite_uri)
    for key in ("epoch", "train_loss", "dev_loss"):
        assert _steps(client, run, key) == [10, 20]
    assert not tracker.add_result(run, 20, _eval(20))  # already sent: still refused


def test_metrics_go_in_batches_of_at_most_max_batch(http_tracker: SweepTracker,
                                                    mlflow_http: MlflowHttp) -> None:
    parent = http_tracker.start_parent({}, {})
    big, small = http_tracker.child(parent, "big", {}), http_tracker.child(parent, "small", {})
    evals = MAX_BATCH // 4 + 10  # 4 metrics an eval: 1040 values, two requests
    for step in range(1, evals + 1):
        http_tracker.add_result(big, step, {**_eval(step), "lr": 0.1})
    http_tracker.add_result(small, 1, _eval(1))
    before = mlflow_http.count("/runs/log-batch")
    assert http_tracker.flush()
    assert mlflow_http.count("/runs/log-batch") - before == 3
    client = MlflowClient(mlflow_http.uri)
    assert _steps(client, big, "lr") == list(range(1, evals + 1))
    assert _steps(client, small, "dev_loss") == [1]


def test_maybe_flush_waits_for_its_interval(sqlite_uri: str, request: pytest.FixtureRequest) -> None:
    lazy = SweepTracker(sqlite_uri, _experiment(request), flush_every_s=3600)
    run = lazy.child(lazy.start_parent({}, {}), "t", {})
    lazy.add_result(run, 1, _eval(1))
    lazy.maybe_flush()
    assert lazy.pending() == 3
    lazy.flush_every_s = 0
    lazy.maybe_flush()
    assert lazy.pending() == 0


def test_summary_metrics_at_step_zero_without_the_undefined(tracker: SweepTracker,
                                                            sqlite_uri: str) -> None:
    run = tracker.child(tracker.start_parent({}, {}), "t", {})
    tracker.add_result(run, 7, _eval(7))
    tracker.add_summary(run, {"best_dev_loss": 0.25, "updates_to_target": None,
                              "epochs_to_target": 3})
    assert tracker.flush()
    metrics = MlflowClient(sqlite_uri).get_run(run).data.metrics
    assert metrics["best_dev_loss"] == 0.25 and metrics["epochs_to_target"] == 3.0
    assert "updates_to_target" not in metrics
    assert _steps(MlflowClient(sqlite_uri), run, "best_dev_loss") == [0]


def test_curve_metrics_keeps_numeric_curve_keys_only() -> None:
    result = {"update": 5, "train_loss": 0.5, "lr": 1, "dev_loss": 0.25, "dev_wer": 0.1,
              "status": "running", "done": True, "dev_flag": True, "momentum": None,
              "trial_id": "abc", "config": {"lr": 1}}
    assert curve_metrics(result) == {"train_loss": 0.5, "lr": 1.0, "dev_loss": 0.25, "dev_wer": 0.1}


def test_a_float16_trials_skipped_updates_reach_its_charts() -> None:
    # the loop reports the gradient scaler's skips; MLflow must hold them (docs/cluster.md §10)
    assert curve_metrics({"update": 8, "train_loss": 0.5, "skipped_updates": 2}) == {
        "train_loss": 0.5, "skipped_updates": 2.0}


# --- the write-ahead journal -----------------------------------------------------------------


def _journal(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_journal_is_written_before_sending_and_replayed_after_a_crash(
        tracker: SweepTracker, journal: Path, sqlite_uri: str) -> None:
    run = tracker.child(tracker.start_parent({}, {}), "t", {})
    tracker.add_result(run, 1, _eval(1), timestamp_ms=1_000)
    assert tracker.flush()
    tracker.add_result(run, 2, _eval(2), timestamp_ms=2_000)
    tracker.add_result(run, 3, _eval(3), timestamp_ms=3_000)
    # written when accepted, before any flush: MLflow has step 1 only
    assert [e["step"] for e in _journal(journal)] == [1, 2, 3]
    assert _journal(journal)[1] == {"run_id": run, "step": 2, "ts": 2_000, "metrics": _eval(2)}
    client = MlflowClient(sqlite_uri)
    assert _steps(client, run) == [1]
    with journal.open("a") as f:
        f.write('{"run_id": "' + run + '", "step": 4, "ts"')  # the kill cut this line short
    del tracker  # the driver dies with steps 2 and 3 in its buffer

    resumed = SweepTracker(sqlite_uri, "unused", journal=journal)
    replayed = resumed.replay_journal()
    assert replayed == []  # a run not adopted yet is not this tracker's
    resumed.adopt(run)  # what `resume` does for every existing child
    replayed = resumed.replay_journal()
    assert [e["step"] for e in replayed] == [2, 3]
    assert len(journal.read_text().splitlines()) == 4  # the replay is not journaled again
    assert resumed.flush()
    assert _steps(client, run) == [1, 2, 3]
    assert [m.timestamp for m in client.get_metric_history(run, "dev_loss")] == [1_000, 2_000, 3_000]
    # a second replay (a second crash) sends nothing twice, and the resumed trial's re-reports
    # of the replayed evals are refused
    again = SweepTracker(sqlite_uri, "unused", journal=journal)
    again.adopt(run)
    assert again.replay_journal() == []
    assert not again.add_result(run, 3, _eval(3))
    assert again.add_result(run, 4, _eval(4))


# --- outages ---------------------------------------------------------------------------------


def test_dead_port_fails_fast_keeps_every_metric_and_restores_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    uri = f"http://127.0.0.1:{free_port()}"  # bound, then closed: nothing listens there
    with pytest.raises(InputError, match="cannot reach the MLflow server"):
        check_store(uri, reading=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "7")
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_TIMEOUT", raising=False)
    dead = SweepTracker(uri, "nowhere")
    assert dead.add_result(NO_RUN, 1, _eval(1))
    assert dead.add_result(NO_RUN, 2, _eval(2))
    # MLflow's own retries (minutes) are off during a flush: it returns, and says it failed
    assert dead.flush() is False
    assert dead.flush_with_retry(deadline_s=0) is False
    assert dead.pending() == 6
    assert sorted({(row["step"], row["key"]) for row in dead.unsent()}) == sorted(
        (s, k) for s in (1, 2) for k in _eval(s))
    with pytest.raises(MlflowException):
        dead.flush(raise_on_error=True)
    assert dead.pending() == 6
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "7"
    assert "MLFLOW_HTTP_REQUEST_TIMEOUT" not in os.environ
    assert set(FAIL_FAST) == {"MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT"}


def test_outage_buffers_and_the_recovered_server_gets_every_step_once(
        http_tracker: SweepTracker, mlflow_http: MlflowHttp,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="scalesweep.orchestrator.tracking.tracker")
    parent = http_tracker.start_parent({}, {})
    a, b = http_tracker.child(parent, "a", {}), http_tracker.child(parent, "b", {})
    http_tracker.add_result(a, 1, _eval(1))
    assert http_tracker.flush()
    mlflow_http.down = True
    try:
        for step in (2, 3):
            http_tracker.add_result(a, step, _eval(step))
            http_tracker.add_result(b, step, _eval(step))
        assert http_tracker.flush() is False
        assert http_tracker.flush() is False  # retried at the next flush, still kept
        assert http_tracker.pending() == 12
        assert not http_tracker.add_result(a, 3, _eval(3))  # buffered counts as accepted
        with pytest.raises(MlflowException):
            http_tracker.flush(raise_on_error=True)
    finally:
        mlflow_http.down = False
    assert http_tracker.flush() and http_tracker.pending() == 0
    client = MlflowClient(mlflow_http.uri)
    assert _steps(client, a) == [1, 2, 3] and _steps(client, b) == [2, 3]
    assert _steps(client, a, "dev_loss") == [1, 2, 3]
    messages = [r.getMessage() for r in caplog.records]
    assert sum("MLflow unreachable" in m for m in messages) == 1  # one warning an outage
    assert sum("reachable again" in m for m in messages) == 1


# --- requests MLflow rejects (4xx): not outages ---------------------------------------------


def test_a_param_logged_again_with_another_value_raises(http_tracker: SweepTracker) -> None:
    run = http_tracker.child(http_tracker.start_parent({}, {}), "t", {"lr": 0.1})
    http_tracker.log_params(run, {"lr": 0.1})  # the same value again is fine
    with pytest.raises(MlflowException, match="Changing param values is not allowed"):
        http_tracker.log_params(run, {"lr": 0.2})
    assert http_tracker.client.get_run(run).data.params["lr"] == "0.1"


def test_a_rejected_metric_is_dropped_with_its_message_and_the_rest_is_sent(
        http_tracker: SweepTracker, mlflow_http: MlflowHttp,
        caplog: pytest.LogCaptureFixture) -> None:
    """A 400 (a metric name MLflow refuses) is not an outage: retrying cannot help. The refused
    name is dropped and reported once with the server's message; the run's other metrics of
    the same eval, and other runs, are sent."""
    caplog.set_level(logging.WARNING, logger="scalesweep.orchestrator.tracking.tracker")
    parent = http_tracker.start_parent({}, {})
    bad, good = http_tracker.child(parent, "bad", {}), http_tracker.child(parent, "good", {})
    http_tracker.add_result(bad, 1, {"epoch": 0.1, "dev_acc@1": 0.5})
    http_tracker.add_result(good, 1, _eval(1))
    assert http_tracker.flush() is True
    assert http_tracker.pending() == 0
    client = MlflowClient(mlflow_http.uri)
    assert _steps(client, good) == [1]
    assert _steps(client, bad) == [1]  # its epoch went through
    assert list(http_tracker.rejected) == [(bad, "dev_acc@1")]
    assert not any("unreachable" in r.getMessage() for r in caplog.records)
    assert any("rejected metric 'dev_acc@1'" in r.getMessage() for r in caplog.records)


def test_a_rejected_metric_does_not_hold_back_later_evals_of_its_run(
        http_tracker: SweepTracker) -> None:
    run = http_tracker.child(http_tracker.start_parent({}, {}), "t", {})
    http_tracker.add_result(run, 1, {"epoch": 0.1, "dev_acc@1": 0.5})
    http_tracker.flush()
    http_tracker.add_result(run, 2, _eval(2))
    http_tracker.flush()
    assert 2 in _steps(MlflowClient(http_tracker.uri), run)


def test_a_server_that_never_answers_costs_one_timeout_per_flush_and_backs_off(
        mlflow_http: MlflowHttp, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    monkeypatch.setenv("SCALESWEEP_TRACKING_TIMEOUT_S", "1")
    mlflow_http.down = False
    tracker = SweepTracker(mlflow_http.uri, _experiment(request), flush_every_s=0.0)
    parent = tracker.start_parent({}, {})
    runs = [tracker.child(parent, name, {}) for name in "abc"]
    for run in runs:
        tracker.add_result(run, 1, _eval(1))
    mlflow_http.release.clear()
    mlflow_http.held = 0
    mlflow_http.hung = True
    try:
        assert tracker.flush() is False  # one request timed out: the other runs' wait too
        assert mlflow_http.held == 1 and tracker.pending() == 9
        tracker.maybe_flush()  # due at once while it answers; now backing off 5 s: no request
        assert mlflow_http.held == 1
    finally:
        mlflow_http.hung = False
        mlflow_http.release.set()
    assert tracker.flush() and tracker.pending() == 0
    client = MlflowClient(mlflow_http.uri)
    assert all(_steps(client, run) == [1] for run in runs)


def test_the_parent_run_is_tagged_with_the_drivers_machine() -> None:
    from scalesweep.orchestrator.tracking.machine import isa_level, machine_tags

    tags = machine_tags()
    assert {"machine.cpu", "machine.isa", "machine.cpus", "machine.version.torch",
            "machine.version.ray", "machine.version.mlflow"} <= set(tags)
    assert tags["machine.version.mlflow"] == mlflow.__version__
    v3 = {"avx2", "bmi1", "bmi2", "fma", "movbe", "sse4_2", "popcnt", "ssse3"}
    assert isa_level(v3, "x86_64") == "x86-64-v3"
    assert isa_level({"sse4_2", "popcnt", "ssse3"}, "x86_64") == "x86-64-v2"
    assert isa_level(set(), "aarch64") == "aarch64"
