"""`scalesweep predict` on studies logged to a real MLflow sqlite store the way the runner does
(the same hand-made studies as tests/unit/test_advice.py: linear lr with scaled warmup follows
S = 1000 (1 + 256/B) exactly, so its epochs E = S B / 65536 are a line in B)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import pytest
from mlflow.tracking import MlflowClient

from scalesweep.orchestrator.cli import main
from scalesweep.science.prediction.epochs import widening
from tests.unit.test_advice import DATASET, STUDY, T, _log, _s

#: base lr swept at three batches; the best one doubles with the batch (1e-3 at 64): lr* ∝ B
LR_SWEEP = [T(ws, "linear", "scaled", _s(16 * ws) * (1.0 if lr == 1e-3 * ws / 4 else 1.3), seed=s, lr=lr)
            for ws in (4, 8, 16) for lr in (5e-4 * ws / 4, 1e-3 * ws / 4, 2e-3 * ws / 4)
            for s in range(2)]


def law_epochs(batch: float) -> float:
    return 1000 * (1 + 256 / batch) * batch / DATASET


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    _log(client, "scaling", STUDY)
    _log(client, "one-batch", [T(4, "none", "fixed", 1000.0 + s, seed=s) for s in range(3)], noise=False)
    _log(client, "one-batch-noise", [T(4, "none", "fixed", 1000.0 + s, seed=s) for s in range(3)])
    _log(client, "lr-sweep", LR_SWEEP)
    yield uri


def _predict(uri: str, experiment: str, ws: int, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = main(["predict", "--experiment", experiment, "--world-size", str(ws), "--json",
               "--tracking-uri", uri])
    out = capsys.readouterr()
    return rc, out.out if rc == 0 else out.err


def test_each_lr_rule_gets_a_median_and_an_interval(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _predict(uri, "scaling", 64, capsys)
    assert rc == 0, out
    rules = {r["rule"]: r for r in json.loads(out)}
    assert set(rules) == {"linear", "none"}
    linear = rules["linear"]
    assert linear["global_batch"] == 1024 and linear["world_size"] == 64
    # the best setting per batch follows the law exactly (the scaled warmup, the better lr at
    # 512, the seeds' median at 256; the batch ramp left out): the line through them is the law
    assert linear["epochs_to_target_median"] == pytest.approx(law_epochs(1024))
    lo, hi = linear["epochs_to_target_ci"]
    assert lo <= law_epochs(1024) <= hi
    assert linear["measured_global_batches"] == {"64": 1, "128": 1, "256": 2, "512": 1}
    # one seed at three of them: the band holds the fit's error alone, and says so
    assert linear["not_an_interval"] == (
        "not an interval: global batches 64, 128, 512 have one seed each, so nothing measures how "
        "the seeds spread there; run 2 or more seeds at every world size")
    # the noise scale (300 late in training) is a second prediction the interval spans
    ns = linear["noise_scale_epochs"]
    assert ns is not None and lo <= ns[0] and hi >= ns[1]
    assert linear["updates_to_target_median"] == pytest.approx(law_epochs(1024) * DATASET / 1024)
    assert linear["b_crit"] == pytest.approx(256.0)
    assert "McCandlish" in linear["method"] and linear["refused"] == []


def test_the_text_names_the_rules_and_the_measured_batches(
        uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--experiment", "scaling", "--world-size", "64", "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    assert "at 64 workers" in out and "noise scale (late training, median): 300 samples" in out
    assert "linear: 19.5 epochs (the fit's band [" in out and "] is not an interval: global " in out
    assert "from 64 (1 seeds), 128 (1 seeds), 256 (2 seeds)" in out


def test_outside_the_measured_batches_the_interval_says_it_was_widened(
        uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _predict(uri, "scaling", 64, capsys)  # global batch 1024, measured 64..512: 2x out
    assert rc == 0, out
    applied = widening(math.log(2))
    assert {r["rule"]: r["interval_widened_by"] for r in json.loads(out)} == {
        "linear": pytest.approx(applied), "none": pytest.approx(applied)}
    rc, out = _predict(uri, "scaling", 16, capsys)  # 256: measured, inside
    assert rc == 0, out
    assert all(r["interval_widened_by"] == 1.0 for r in json.loads(out))
    assert main(["predict", "--experiment", "scaling", "--world-size", "64", "--no-record",
                 "--tracking-uri", uri]) == 0
    assert f"interval widened {applied:.3g}x: outside the measured batches" in capsys.readouterr().out
    assert main(["predict", "--experiment", "scaling", "--world-size", "16", "--no-record",
                 "--tracking-uri", uri]) == 0
    assert "widened" not in capsys.readouterr().out


@pytest.mark.parametrize(("experiment", "ws", "says"), [
    ("scaling", 1000, "batch 16000 is more than 4x outside the measured 64..512"),
    ("one-batch", 16, "one batch size (64) and no noise scale"),
])
def test_data_that_cannot_support_it_is_refused_with_exit_2(
        uri: str, capsys: pytest.CaptureFixture[str], experiment: str, ws: int, says: str) -> None:
    rc, err = _predict(uri, experiment, ws, capsys)
    assert rc == 2 and says in err, err
    assert "lr rule" in err


def test_one_batch_size_and_a_noise_scale_predict_with_the_noise_scale_range(
        uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _predict(uri, "one-batch-noise", 16, capsys)
    assert rc == 0, out
    (none,) = json.loads(out)
    assert none["not_an_interval"] is None  # three seeds at the one batch: an interval
    epochs = 1001.0 * 64 / DATASET  # the seeds' median at the reference batch
    lo, hi = none["epochs_to_target_ci"]
    # B_crit anywhere from the noise scale (300) to 10x it: epochs at 256 from the reference's
    assert hi == pytest.approx(epochs * (1 + 256 / 300) / (1 + 64 / 300), rel=0.05)
    assert lo <= epochs * (1 + 256 / 3000) / (1 + 64 / 3000)


def test_bad_arguments_exit_2(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--experiment", "scaling", "--world-size", "0", "--tracking-uri", uri]) == 2
    assert "--world-size = 0: must be at least 1" in capsys.readouterr().err


def test_the_best_lr_at_m_follows_the_per_batch_best_lr(uri: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _predict(uri, "lr-sweep", 32, capsys)
    assert rc == 0, out
    (linear,) = json.loads(out)
    best = linear["best_lr"]
    assert best["best_by_batch"] == {"64": 1e-3, "128": 2e-3, "256": 4e-3}
    assert best["median"] == pytest.approx(8e-3) and best["exponent"] == pytest.approx(1.0)
    # seeds agree and the line fits: the interval is the grid's half step (a factor sqrt 2)
    # at each batch carried through the line's weights at 512 (-2/3, 1/3, 4/3 in log2 B)
    assert best["ci"] == pytest.approx([8e-3 * 2 ** (-7 / 6), 8e-3 * 2 ** (7 / 6)])
    assert "log-log" in best["method"] and best["note"] == ""
    assert main(["predict", "--experiment", "lr-sweep", "--world-size", "32", "--no-record",
                 "--tracking-uri", uri]) == 0
    assert "best lr: 0.008 [" in capsys.readouterr().out


@pytest.mark.parametrize(("experiment", "says"), [
    ("one-batch-noise", "best lr: the study did not sweep lr (no optimizer.lr axis"),
    ("scaling", "best lr: lr was swept with a usable best at 1 batch size(s) (512)"),
])
def test_a_study_that_cannot_give_the_best_lr_says_so(
        uri: str, capsys: pytest.CaptureFixture[str], experiment: str, says: str) -> None:
    assert main(["predict", "--experiment", experiment, "--world-size", "16", "--no-record",
                 "--tracking-uri", uri]) == 0
    assert says in capsys.readouterr().out
