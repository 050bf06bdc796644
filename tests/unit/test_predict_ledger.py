"""`scalesweep predict` keeps score in a real MLflow sqlite store: the record on the parent run,
the ledger across two studies (hit, miss, pending; the running hit rate), the outcome written
beside the record, and the refusals. The studies are tests/unit/test_advice.py's hand-made ones
(linear lr with scaled warmup follows the law exactly); a verification is a second parent run
in the same experiment with trials at the predicted world size, as `scalesweep run` of the
--verify file would log them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from scalesweep.orchestrator.cli import main
from tests.unit.test_advice import DATASET, STUDY, T, _log

#: one xdist worker runs the module: its store (two studies and their predictions) is built once
pytestmark = pytest.mark.xdist_group(__name__)

M = 64  # global batch 1024: no study below ran it
UPE = DATASET // (M * 16)  # updates per epoch at M


@dataclass(frozen=True)
class Store:
    uri: str
    client: MlflowClient
    alpha_parent: str  # the study whose prediction gets verified
    beta_parent: str  # the one whose prediction stays pending


def _parent(client: MlflowClient, experiment: str) -> str:
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    runs = client.search_runs([exp.experiment_id], "tags.`scalesweep.role` = 'parent'",
                              order_by=["attributes.start_time ASC"])
    return str(runs[0].info.run_id)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    _log(client, "alpha", STUDY)
    _log(client, "beta", STUDY)
    assert main(["predict", "--experiment", "alpha", "--world-size", str(M), "--tracking-uri", uri]) == 0
    assert main(["predict", "--experiment", "beta", "--world-size", str(M), "--tracking-uri", uri]) == 0
    yield Store(uri, client, _parent(client, "alpha"), _parent(client, "beta"))


@pytest.fixture(scope="module")
def verified(store: Store) -> Store:
    """alpha verified at M: linear's three seeds around its predicted median (inside the
    interval), none's seeds never reaching the target (+inf: outside any interval)."""
    linear = 19.5  # epochs; the law's value at 1024, the prediction's median
    _log(store.client, "alpha", [
        T(M, "linear", "scaled", linear * UPE * f, seed=s) for s, f in enumerate((0.98, 1.0, 1.01))
    ] + [T(M, "none", "fixed", None, seed=s) for s in range(3)], noise=False)
    return store


def test_each_prediction_is_recorded_on_the_study_parent_run(store: Store, tmp_path: Path) -> None:
    c = store.client
    (path,) = [a.path for a in c.list_artifacts(store.alpha_parent, "predictions")]
    assert path.startswith("predictions/") and path.endswith(f"-ws{M}.json")
    record = json.loads(Path(c.download_artifacts(store.alpha_parent, path, str(tmp_path))).read_text())
    assert record["world_size"] == M and record["global_batch"] == M * 16
    assert record["experiment"] == "alpha" and record["parent_run_id"] == store.alpha_parent
    assert len(record["source_trial_run_ids"]) == len(STUDY) - 1  # the batch ramp left out
    rules = {r["rule"]: r for r in record["rules"]}
    assert set(rules) == {"linear", "none"}
    linear = rules["linear"]
    assert linear["median"] == pytest.approx(1000 * (1 + 256 / 1024) * 1024 / DATASET)
    assert linear["confidence"] == 0.9 and "McCandlish" in linear["method"]
    assert linear["measured_global_batches"] == {"64": 1, "128": 1, "256": 2, "512": 1}
    assert record["created"].startswith("20")
    metrics = c.get_run(store.alpha_parent).data.metrics
    assert metrics[f"predict.ws{M}.linear.epochs_median"] == pytest.approx(linear["median"])
    assert metrics[f"predict.ws{M}.linear.epochs_lo"] == pytest.approx(linear["ci"][0])
    assert metrics[f"predict.ws{M}.none.epochs_hi"] == pytest.approx(rules["none"]["ci"][1])


def test_no_record_logs_nothing(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "predict", "--experiment", "beta", "--world-size", "32",
                      "--no-record", "--tracking-uri", store.uri)
    assert rc == 0 and "recorded" not in out
    names = [a.path for a in store.client.list_artifacts(store.beta_parent, "predictions")]
    assert len(names) == 1 and names[0].endswith(f"-ws{M}.json")


def test_the_ledger_across_two_studies_counts_hit_miss_and_pending(
        verified: Store, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(capsys, "predict", "--ledger", "--json", "--tracking-uri", verified.uri)
    assert rc == 0, err
    lines = json.loads(out)
    got = [(x["experiment"], x["rule"], x["result"]) for x in lines]
    assert got == [("alpha", "linear", "hit"), ("alpha", "none", "miss"),
                   ("beta", "linear", "pending"), ("beta", "none", "pending")]
    lin = lines[0]
    assert lin["observed"] == pytest.approx(19.5) and lin["observed_seeds"] == 3
    assert lines[1]["observed"] is None and lines[1]["observed_never"] is True
    # the running rate counts verified predictions only, each at its nominal confidence
    assert [(x["running_hits"], x["running_verified"]) for x in lines] == [(1, 1), (1, 2), (1, 2), (1, 2)]
    assert [x["running_hit_rate"] for x in lines] == [1.0, 0.5, 0.5, 0.5]
    assert lines[-1]["running_nominal"] == 0.9


def test_the_ledger_text_and_one_experiment(verified: Store, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "predict", "--ledger", "--tracking-uri", verified.uri)
    assert rc == 0
    assert "hit rate: 1/2 = 0.500 against nominal 0.90; 2 pending, 0 censored (not counted)" in out
    assert "never" in out and "pending" in out
    rc, out, _ = _run(capsys, "predict", "--ledger", "--experiment", "beta", "--json",
                      "--tracking-uri", verified.uri)
    assert rc == 0 and {x["result"] for x in json.loads(out)} == {"pending"}


def test_the_outcome_is_written_beside_the_prediction(verified: Store,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(capsys, "predict", "--ledger", "--tracking-uri", verified.uri)[0] == 0
    names = [a.path for a in verified.client.list_artifacts(verified.alpha_parent, "predictions")]
    assert len(names) == 2 and sum(n.endswith(".outcome.json") for n in names) == 1
    metrics = verified.client.get_run(verified.alpha_parent).data.metrics
    assert metrics[f"predict.ws{M}.linear.hit"] == 1.0 and metrics[f"predict.ws{M}.none.hit"] == 0.0
    assert metrics[f"predict.ws{M}.linear.observed"] == pytest.approx(19.5)
    assert f"predict.ws{M}.none.observed" not in metrics  # never reached: no number to log
    pending = verified.client.get_run(verified.beta_parent).data.metrics
    assert not any(k.endswith(".hit") for k in pending)
    # scored again with nothing new: the outcome and its metrics are not written twice
    assert _run(capsys, "predict", "--ledger", "--tracking-uri", verified.uri)[0] == 0
    history = verified.client.get_metric_history(verified.alpha_parent, f"predict.ws{M}.linear.hit")
    assert [m.value for m in history] == [1.0]


@pytest.mark.parametrize(("argv", "says"), [
    (["--ledger", "--world-size", "4"], "--world-size = 4: does not go with --ledger"),
    (["--ledger", "--experiment", "nope"], "--experiment = 'nope': no MLflow experiment named 'nope'"),
    (["--world-size", "4"], "--experiment = None: name the study"),
    (["--experiment", "alpha"], "--world-size = None: is needed to predict"),
])
def test_bad_arguments_are_refused_with_exit_2(store: Store, capsys: pytest.CaptureFixture[str],
                                               argv: list[str], says: str) -> None:
    rc, _, err = _run(capsys, "predict", *argv, "--tracking-uri", store.uri)
    assert rc == 2 and says in err, err


def test_the_report_shows_prediction_against_measurement(verified: Store, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "alpha"
    rc, _, err = _run(capsys, "report", "--experiment", "alpha", "--out", str(out),
                      "--tracking-uri", verified.uri)
    assert rc == 0, err
    page = (out / "report.html").read_text()
    section = page[page.index("<h2>Predictions against measurements</h2>"):]
    assert "1 of 2 verified intervals held the observed median (50%; nominal 90%)" in section
    rows = section.split("<tr>")[2:]
    assert len(rows) == 2
    assert "<td>linear</td>" in rows[0] and "<td>19.5</td>" in rows[0] and "<b>hit</b>" in rows[0]
    assert "<td>none</td>" in rows[1] and "never reached" in rows[1] and "<b>miss</b>" in rows[1]
    beta = tmp_path / "beta"
    assert _run(capsys, "report", "--experiment", "beta", "--out", str(beta),
                "--tracking-uri", verified.uri)[0] == 0
    assert "no prediction verified yet" in (beta / "report.html").read_text()


def test_a_study_without_predictions_has_no_such_section(store: Store, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    _log(store.client, "gamma", STUDY[:3])
    rc, _, err = _run(capsys, "report", "--experiment", "gamma", "--out", str(tmp_path),
                      "--tracking-uri", store.uri)
    assert rc == 0, err
    assert "Predictions against measurements" not in (tmp_path / "report.html").read_text()
