"""`scalesweep recommend` (and ``scalesweep.recommend``) on a study logged to a real MLflow
sqlite store the way the runner does (tests/unit/test_advice.py's builder): an Adam study at
the reference (4 workers, global batch 64) and N = 16 workers (256) with three seeds, lr rules
none, x1.4, sqrt and linear under the scaled warmup and sqrt under the fixed one. Its numbers
are checked against :func:`scalesweep.science.recommend.recipe.recommend` called on the inputs
gathered here by hand from the same trial list."""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator

import pytest
from mlflow.tracking import MlflowClient

import scalesweep
from scalesweep.orchestrator.cli import main
from scalesweep.science.prediction.epochs import BatchPoint
from scalesweep.science.recommend.lr_evidence import LrArm
from scalesweep.science.recommend.recipe import Recipe, recommend
from tests.unit.test_advice import DATASET, PER_WORKER, T, _log

BASE_LR = 0.5  # a power of two: the lr factors read back as lr / reference lr are exact
REF_WARMUP = 100
SEEDS = (0, 1, 2)
#: updates to target of the baseline (4 workers, none, fixed warmup) per seed
REF_UPDATES = {0: 4000.0, 1: 4100.0, 2: 4200.0}
#: per (rule, warmup rule), its lr factor at 16 workers (k = 4) and its updates there per seed:
#: a bowl in log lr with its bottom near the sqrt rule's factor 2
AT_N = {
    ("none", "scaled"): (1.0, (1500.0, 1520.0, 1510.0)),
    ("1.4", "scaled"): (1.4, (1300.0, 1310.0, 1330.0)),
    ("sqrt", "scaled"): (2.0, (1250.0, 1260.0, 1270.0)),
    ("linear", "scaled"): (4.0, (1700.0, 1690.0, 1720.0)),
    ("sqrt", "fixed"): (2.0, (1240.0, 1280.0, 1290.0)),
}


def _extra(factor: float, warmup: int) -> tuple[tuple[str, object], ...]:
    return (("optimizer", "adam"), ("lr", BASE_LR * factor), ("base_lr", BASE_LR),
            ("warmup_steps", warmup))


ADAM_STUDY = [T(4, "none", "fixed", REF_UPDATES[s], seed=s, lr=BASE_LR, extra=_extra(1.0, REF_WARMUP))
              for s in SEEDS] + [
    T(16, rule, warmup, updates[s], seed=s, lr=BASE_LR,
      extra=_extra(factor, REF_WARMUP // 4 if warmup == "scaled" else REF_WARMUP))
    for (rule, warmup), (factor, updates) in AT_N.items() for s in SEEDS]
#: the same study without the optimizer param: no lr model can be chosen
NO_OPTIMIZER = [T(4, "none", "fixed", 4000.0, seed=s, extra=(("warmup_steps", 100),)) for s in SEEDS] + [
    T(16, "linear", "scaled", 1500.0, seed=s) for s in SEEDS]
ONLY_REFERENCE = [T(4, "none", "fixed", 4000.0, seed=s, extra=_extra(1.0, 100)) for s in SEEDS]


def _epochs(ws: int, updates: float) -> float:
    return updates / (DATASET // (ws * PER_WORKER))


def _ratios() -> dict[tuple[str, str], dict[int, float]]:
    """Per arm at N, each seed's epochs over the baseline's on that seed."""
    ref = {s: _epochs(4, u) for s, u in REF_UPDATES.items()}
    return {key: {s: _epochs(16, u) / ref[s] for s, u in zip(SEEDS, updates, strict=True)}
            for key, (_, updates) in AT_N.items()}


def hand_arms() -> list[LrArm]:
    """The lr arms at N: the scaled warmup's, by factor."""
    ratios = _ratios()
    return sorted((LrArm(factor, ratios[key]) for key, (factor, _) in AT_N.items()
                   if key[1] == "scaled"), key=lambda a: a.factor)


def hand_recipe(world_size: int) -> Recipe:
    """The science's recipe on the inputs read off the trial list above, not off MLflow."""
    ref = {s: _epochs(4, u) for s, u in REF_UPDATES.items()}
    ratios = _ratios()
    best = min(AT_N.values(), key=lambda v: sorted(v[1])[1])  # the fewest median updates at N
    return recommend("surge", reference_batch=64, batch_n=256, batch_m=world_size * PER_WORKER,
                     reference_warmup=REF_WARMUP, arms=hand_arms(),
                     warmup_arms={"fixed": ratios[("sqrt", "fixed")],
                                  "scaled": ratios[("sqrt", "scaled")]},
                     reference_epochs=BatchPoint(64, tuple(ref.values())),
                     n_epochs=BatchPoint(256, tuple(_epochs(16, u) for u in best[1])),
                     noise_scale=300.0)


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    _log(client, "adam", ADAM_STUDY)
    _log(client, "no-optimizer", NO_OPTIMIZER)
    _log(client, "only-reference", ONLY_REFERENCE)
    yield uri


def test_the_recipe_is_the_science_on_the_study_inputs(uri: str) -> None:
    rec = scalesweep.recommend("adam", world_size=32, tracking_uri=uri)
    assert (rec.world_size_n, rec.batch_n, rec.world_size_m, rec.batch_m) == (16, 256.0, 32, 512.0)
    assert (rec.family, rec.reference_batch, rec.reference_lr, rec.reference_warmup) == (
        "surge", 64.0, BASE_LR, REF_WARMUP)
    assert rec.noise_scale == 300.0
    # each seed paired with the baseline's same seed (a fit with seed levels would not see a
    # wrong pairing: the arms' medians do)
    assert [(a.factor, a.seeds) for a in rec.lr_arms] == [(1.0, 3), (1.4, 3), (2.0, 3), (4.0, 3)]
    assert [a.median_ratio for a in rec.lr_arms] == pytest.approx(
        [statistics.median(a.ratios.values()) for a in hand_arms()], rel=1e-12)
    assert rec.warmup_arms_factor == 2.0 and rec.n_arm == "ws16-scaled-sqrt"
    want = hand_recipe(32)
    got = rec.recipe
    assert got.lr.factor == pytest.approx(want.lr.factor, rel=1e-12)
    assert got.lr.ci == pytest.approx(want.lr.ci, rel=1e-12)
    assert (got.lr.model, got.lr.source[:40], got.lr.confidence) == (
        want.lr.model, want.lr.source[:40], want.lr.confidence)
    assert got.warmup == want.warmup
    assert got.epochs_ratio is not None and want.epochs_ratio is not None
    assert got.epochs_ratio.median == pytest.approx(want.epochs_ratio.median, rel=1e-12)
    assert got.epochs_ratio.ci == pytest.approx(want.epochs_ratio.ci, rel=1e-12)
    assert rec.lr == pytest.approx(BASE_LR * want.lr.factor, rel=1e-12)
    assert rec.warmup_steps == round(REF_WARMUP * 64 / 512)  # held in samples: 12.5 -> 12
    assert rec.prediction_id is None  # nothing recorded unless asked



def test_json_is_the_api_record(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    rec = scalesweep.recommend("adam", world_size=32, tracking_uri=uri)
    assert main(["recommend", "--experiment", "adam", "--world-size", "32", "--json", "--no-record",
                 "--tracking-uri", uri]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(rec.as_json()))


def test_the_text_names_each_number_and_its_model(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    want = hand_recipe(32)
    assert main(["recommend", "--experiment", "adam", "--world-size", "32", "--no-record",
                 "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    lo, hi = want.lr.ci
    assert (f"lr factor: {want.lr.factor:.3g} [{lo:.3g}, {hi:.3g}] (90%) x the reference's lr 0.5 "
            f"= lr {0.5 * want.lr.factor:.4g}") in out
    assert "  model: surge: the optimizer's family; b_noise" in out
    assert "warmup: 12 updates (rule scaled: 12.5 from the reference's 100)" in out
    assert "  model: held in samples (Goyal et al. 2017)" in out
    assert want.epochs_ratio is not None
    assert f"epochs ratio M/N: {want.epochs_ratio.median:.3g} [" in out
    assert "against N's best arm ws16-scaled-sqrt" in out and "  method: E(B) = E_min" in out
    assert "fixed against scaled at N: lower on 1 of 3 shared seeds" in out
    assert "recorded:" not in out


@pytest.mark.parametrize(("argv", "says"), [
    (["--experiment", "adam", "--world-size", "0"], "--world-size = 0: must be at least 1"),
    (["--experiment", "nope", "--world-size", "8"], "no MLflow experiment named 'nope'"),
    (["--run-id", "0" * 32, "--world-size", "8"], "no such MLflow run"),
    (["--experiment", "no-optimizer", "--world-size", "8"],
     "--experiment = 'no-optimizer': the study logged no optimizer type"),
    (["--experiment", "only-reference", "--world-size", "8"],
     "ran only the reference's global batch (64): no arm at a world size N"),
])
def test_refusals_exit_2(uri: str, capsys: pytest.CaptureFixture[str], argv: list[str],
                         says: str) -> None:
    assert main(["recommend", *argv, "--tracking-uri", uri]) == 2
    assert says in capsys.readouterr().err


def test_the_api_refuses_bad_arguments_before_reading(uri: str) -> None:
    for kwargs, says in (({"world_size": 0}, "world_size = 0: must be at least 1"),
                         ({"world_size": 2.0}, "world_size = 2.0: must be an integer"),
                         ({"world_size": 8, "record": "yes"}, "record = 'yes': must be True or False")):
        with pytest.raises(scalesweep.InputError, match=says):
            scalesweep.recommend("adam", tracking_uri=uri, **kwargs)
    with pytest.raises(scalesweep.InputError, match="give exactly one of experiment and run_id"):
        scalesweep.recommend("adam", run_id="x", world_size=8, tracking_uri=uri)


# --- the ledger: recorded, then scored against a later study and a solve at M -----------------

#: N's best arm (sqrt, scaled) median epochs: 1260 updates at 256 updates per epoch
N_EPOCHS = 1260.0 / 256


@pytest.fixture(scope="module")
def ledger_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The study, three recommendations recorded (M = 32, 64, 8), then a later study at 32 in
    the experiment (its best arm inside the interval: a hit) and a solve at 64 in
    ``adam-solve`` (outside: a miss); nothing runs 8 (pending)."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('ledger') / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    _log(client, "adam", ADAM_STUDY)
    for m in (32, 64, 8):
        assert main(["recommend", "--experiment", "adam", "--world-size", str(m),
                     "--tracking-uri", uri]) == 0
    _log(client, "adam", [T(32, "sqrt", "scaled", u, seed=s) for s, u in enumerate((790.0, 780.0, 800.0))]
         + [T(32, "linear", "scaled", 900.0, seed=s) for s in SEEDS], noise=False)
    _log(client, "adam-solve", [T(64, "1.9", "scaled", u, seed=s)
                                for s, u in enumerate((950.0, 940.0, 960.0))], noise=False)
    yield uri


def test_a_recommendation_is_recorded_on_the_parent_run(ledger_uri: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    client = MlflowClient(tracking_uri=ledger_uri)
    exp = client.get_experiment_by_name("adam")
    assert exp is not None
    (first, _) = client.search_runs([exp.experiment_id], "tags.`scalesweep.role` = 'parent'",
                                    order_by=["attributes.start_time ASC"])
    parent = first.info.run_id
    names = sorted(a.path for a in client.list_artifacts(parent, "predictions"))
    assert len(names) == 3 and all(n.endswith("-recommend.json") for n in names)
    metrics = client.get_run(parent).data.metrics
    want = hand_recipe(32)
    assert want.epochs_ratio is not None
    assert metrics["recommend.ws32.ratio_median"] == pytest.approx(want.epochs_ratio.median, rel=1e-12)
    assert metrics["recommend.ws32.ratio_hi"] == pytest.approx(want.epochs_ratio.ci[1], rel=1e-12)
    assert metrics["recommend.ws32.lr_factor"] == pytest.approx(want.lr.factor, rel=1e-12)
    # --no-record logs nothing more; --json's id is null then (--run-id: the experiment's latest
    # study is the later one at 32 now)
    assert main(["recommend", "--run-id", parent, "--world-size", "32", "--json", "--no-record",
                 "--tracking-uri", ledger_uri]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["prediction_id"] is None and out["parent_run_id"] == parent
    assert len(client.list_artifacts(parent, "predictions")) == 3


def test_the_ledger_scores_each_recommendation(ledger_uri: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--ledger", "--experiment", "adam", "--json", "--no-record",
                 "--tracking-uri", ledger_uri]) == 0
    lines = json.loads(capsys.readouterr().out)
    got = {x["world_size"]: x for x in lines}
    assert [x["kind"] for x in lines] == ["recommend"] * 3 and set(got) == {32, 64, 8}
    for m, result in ((32, "hit"), (64, "miss"), (8, "pending")):
        want = hand_recipe(m).epochs_ratio
        assert want is not None
        assert got[m]["result"] == result
        assert got[m]["median"] == pytest.approx(want.median, rel=1e-12)
        assert got[m]["ci"] == pytest.approx(list(want.ci), rel=1e-12)
    # the best arm at 32 (sqrt: 790 updates at 128 per epoch), over N's 1260 / 256
    assert got[32]["observed"] == pytest.approx(790.0 / 128 / N_EPOCHS, rel=1e-9)
    assert got[32]["observed_arm"] == "ws32-scaled-sqrt" and got[32]["observed_seeds"] == 3
    assert got[64]["observed"] == pytest.approx(950.0 / 64 / N_EPOCHS, rel=1e-9)
    assert got[8]["observed"] is None
    assert (lines[-1]["running_verified"], lines[-1]["running_hits"]) == (2, 1)
    # the text, and the outcomes written beside the records
    assert main(["predict", "--ledger", "--experiment", "adam", "--tracking-uri", ledger_uri]) == 0
    text = capsys.readouterr().out
    assert "(ratio M/N)" in text and "hit rate: 1/2" in text
    client = MlflowClient(tracking_uri=ledger_uri)
    parent = next(iter({x["parent_run_id"] for x in lines}))
    metrics = client.get_run(parent).data.metrics
    assert (metrics["recommend.ws32.hit"], metrics["recommend.ws64.hit"]) == (1.0, 0.0)
    assert "recommend.ws8.hit" not in metrics
    outcomes = [a.path for a in client.list_artifacts(parent, "predictions")
                if a.path.endswith(".outcome.json")]
    assert len(outcomes) == 2
