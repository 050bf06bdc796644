"""`scalesweep solve`'s verified recipe kept as a prediction and scored by `predict --ledger`,
in a real MLflow sqlite store: the record on the verification's parent run, its lines (hit,
miss, censored, pending) scored only against the experiment's *other* parent runs (a rerun of
the verification with new seeds, as `scalesweep run <state dir>/verify.yaml --set
replicates.first_seed=30` logs one), the outcome written beside it, and the rendering.

The studies are hand-made: each trial's dev loss falls linearly through the target 1.5 at
exactly its epochs to target (or stays at 2.0: never reached within the 4 epochs it trained),
so every paired ratio is known by hand. The baseline arm reaches at 2.0 epochs in every seed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from scalesweep.dashboards.arms_table import arm_summaries
from scalesweep.dashboards.convergence_table import study_trials
from scalesweep.dashboards.mlflow_data import load_study
from scalesweep.dashboards.prediction_ledger import ledger_lines, parent_studies, render_ledger
from scalesweep.dashboards.prediction_report import predictions_html
from scalesweep.dashboards.solve_ledger import solve_outcome
from scalesweep.orchestrator.cli import main
from scalesweep.orchestrator.tracking.predictions import record_solve
from scalesweep.science.prediction.ledger import bounded_hit
from scalesweep.science.prediction.record import LedgerLine, RuleOutcome
from scalesweep.science.solve_record import Line, SolveLedgerLine, SolveOutcome
from scalesweep.science.stats.arms import ArmSummary, paired_epochs_ratios
from scalesweep.science.stats.replicates import INF, Estimate

#: the store below is built once, on the one worker that runs this module (under scripts/test.sh's
#: --dist loadgroup each worker running some of its tests would build its own)
pytestmark = pytest.mark.xdist_group(__name__)

BASE = "ws4-warmup300-none"  # the baseline arm
RECIPE = "ws16-warmup47-x7.56"  # the verified recipe's arm
OTHER = "ws16-warmup52-x6.85"  # another candidate of the verification: never the recipe's pairs
HORIZON = 4.0  # epochs every trial trains; evals every 0.25 epoch
M = 16


@dataclass(frozen=True)
class T:
    arm: str
    seed: int
    epochs: float | None  # to the target; None: never within HORIZON


def _artifacts(client: MlflowClient) -> str:
    """Artifacts beside the sqlite store (not ./mlruns in the directory pytest runs from)."""
    return Path(client.tracking_uri.removeprefix("sqlite:///")).parent.joinpath("artifacts").as_uri()


def _log(client: MlflowClient, experiment: str, trials: Sequence[T], verify: bool = False) -> str:
    """One parent run (a study) in ``experiment``; ``verify``: tagged as solve's verification."""
    exp = client.get_experiment_by_name(experiment)
    exp_id = exp.experiment_id if exp else client.create_experiment(experiment, _artifacts(client))
    tags = {"scalesweep.role": "parent", **({"scalesweep.solve": "verify"} if verify else {})}
    pid = client.create_run(exp_id, run_name="sweep", tags=tags).info.run_id
    client.log_batch(pid, params=[Param("target_metric", "dev_loss"), Param("target_value", "1.5"),
                                  Param("target_mode", "min")])
    for t in trials:
        name = f"{t.arm}-s{t.seed}"
        run = client.create_run(exp_id, run_name=name, tags={
            "mlflow.parentRunId": pid, "scalesweep.role": "trial", "trial_name": name,
            "status": "completed"})  # fmt: skip
        metrics = []
        for k in range(1, int(HORIZON / 0.25) + 1):
            epoch = 0.25 * k
            loss = 2.0 - 0.5 * epoch / t.epochs if t.epochs else 2.0
            metrics += [Metric("epoch", epoch, 0, k), Metric("dev_loss", loss, 0, k)]
        params = {"arm": t.arm, "baseline_arm": BASE, "seed": t.seed,
                  "world_size": 4 if t.arm == BASE else M}
        client.log_batch(run.info.run_id, metrics=metrics,
                         params=[Param(k, str(v)) for k, v in params.items()])
        client.set_terminated(run.info.run_id)
    client.set_terminated(pid)
    return pid


def _arm(arm: str, seeds: Sequence[int], epochs: Sequence[float | None]) -> list[T]:
    return [T(arm, s, e) for s, e in zip(seeds, epochs, strict=True)]


def _verification(recipe: Sequence[float | None]) -> list[T]:
    """The verification's own trials: seeds 5-7 of the baseline and the recipe."""
    return _arm(BASE, (5, 6, 7), (2.0,) * 3) + _arm(RECIPE, (5, 6, 7), recipe)


@dataclass(frozen=True)
class Verified:
    """What launch/solve.py hands record_solve: its verification's Outcome, in the parts read."""

    parent_run_id: str
    experiment: str
    arms: list[ArmSummary]
    trials: list[dict[str, Any]] = field(default_factory=list)


def _verified(uri: str, parent: str) -> Verified:
    study = load_study(uri, parent_run_id=parent)
    trials = study_trials(study)
    return Verified(parent, study.experiment_name, arm_summaries(study, trials),
                    [{"name": t.summary.name, "mlflow_run_id": t.run_id} for t in trials])


def _answer(ci: list[float | None], median: float | None = 1.0) -> dict[str, Any]:
    """A solve answer (launch/solve.py's ``answer``) for the recipe, with the claim ``ci``."""
    return {"world_size": M, "recipe": {"format": "wenet", "settings": {}}, "arm": RECIPE,
            "lr_factor": 7.56, "lr": 0.0151, "peak_lr": 0.0151, "warmup_steps": 47,
            "decision": "not resolved", "ratio_median": median, "ratio_ci": ci,
            "ratio_by_target": []}


@dataclass(frozen=True)
class Store:
    uri: str
    client: MlflowClient
    #: experiment -> the verification's parent run id (the one the record is on)
    verification: dict[str, str]
    #: hit-solve's two reruns
    reruns: tuple[str, str]
    #: experiment -> the record's id
    ids: dict[str, str]


T0 = datetime(2026, 11, 27, 6, 0, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    # hit: the reruns' pairs are 0.95, 1.0, 1.05 and 1.02, 0.98 (median 1.0, inside the
    # claim); the verification's own are 1.5 each, which pooled in would move the median to
    # 1.035, outside it: the line would be a miss
    parents = {"hit-solve": _log(client, "hit-solve", _verification((3.0,) * 3), verify=True)}
    reruns = (
        _log(client, "hit-solve", _arm(BASE, (30, 31, 32), (2.0,) * 3)
             + _arm(RECIPE, (30, 31, 32), (1.9, 2.0, 2.1)) + _arm(OTHER, (30, 31, 32), (4.0,) * 3)),
        _log(client, "hit-solve", _arm(BASE, (40, 41), (2.0, 2.0)) + _arm(RECIPE, (40, 41), (2.04, 1.96))),
    )
    # miss and censored: in the rerun the recipe reaches in one seed (ratio 1.0) and never in
    # two (each at least 4 / 2 = 2.0): the median is a lower bound, 2.0
    slow = _arm(BASE, (30, 31, 32), (2.0,) * 3) + _arm(RECIPE, (30, 31, 32), (2.0, None, None))
    for name in ("miss-solve", "censored-solve"):
        parents[name] = _log(client, name, _verification((2.0,) * 3), verify=True)
        _log(client, name, slow)
    # pending: the verification alone (its own pairs, 1.0 each, would be a hit); and one whose
    # recipe was slower, with a half-open interval
    parents["lone-solve"] = _log(client, "lone-solve", _verification((2.0,) * 3), verify=True)
    parents["open-solve"] = _log(client, "open-solve", _verification((3.0, None, None)), verify=True)
    claims: dict[str, tuple[list[float | None], float | None]] = {
        "hit-solve": ([0.97, 1.03], 1.0), "miss-solve": ([0.9, 1.1], 1.0),
        "censored-solve": ([0.9, 2.5], 1.0), "lone-solve": ([0.9, 1.1], 1.0),
        "open-solve": ([1.1, None], None)}
    ids = {}
    for i, (name, (ci, median)) in enumerate(claims.items()):
        pid = record_solve(uri, _answer(ci, median), _verified(uri, parents[name]),
                           now=T0 + timedelta(seconds=i))
        assert pid is not None
        ids[name] = pid
    yield Store(uri, client, parents, reruns, ids)


def _ledger(store: Store, capsys: pytest.CaptureFixture[str], *extra: str) -> list[dict[str, Any]]:
    assert main(["predict", "--ledger", "--json", "--tracking-uri", store.uri, *extra]) == 0
    lines: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
    return lines


def _record(store: Store, experiment: str, tmp: Path) -> dict[str, Any]:
    path = f"predictions/{store.ids[experiment]}.json"
    local = store.client.download_artifacts(store.verification[experiment], path, str(tmp))
    record: dict[str, Any] = json.loads(Path(local).read_text())
    return record


# --- the record -------------------------------------------------------------------------------


def test_the_record_is_on_the_verification_parent_run(store: Store, tmp_path: Path) -> None:
    parent = store.verification["hit-solve"]
    record = _record(store, "hit-solve", tmp_path)
    assert record["id"] == "20261127T060000000000Z-ws16-solve"
    assert record["created"] == T0.isoformat()
    assert (record["kind"], record["quantity"]) == ("solve", "epochs_ratio")
    assert (record["experiment"], record["parent_run_id"], record["world_size"]) == ("hit-solve", parent, M)
    assert (record["arm"], record["baseline_arm"]) == (RECIPE, BASE)
    assert (record["lr_factor"], record["warmup_steps"], record["peak_lr"]) == (7.56, 47, 0.0151)
    assert (record["ratio_median"], record["ratio_ci"]) == (1.0, [0.97, 1.03])
    assert record["confidence"] == 0.9 and "median epochs ratio" in record["claim"]
    own = {r.info.run_id for r in store.client.search_runs(
        [store.client.get_run(parent).info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent}'")}
    assert set(record["source_trial_run_ids"]) == own and len(own) == 6
    metrics = store.client.get_run(parent).data.metrics
    assert (metrics["solve.ws16.ratio_median"], metrics["solve.ws16.ratio_lo"],
            metrics["solve.ws16.ratio_hi"]) == (1.0, 0.97, 1.03)


def test_an_answer_that_claims_nothing_checkable_is_not_recorded(store: Store) -> None:
    verified = _verified(store.uri, store.verification["lone-solve"])
    unverified = {k: v for k, v in _answer([0.9, 1.1]).items() if k != "arm"}
    assert record_solve(store.uri, unverified, verified) is None  # no recipe
    assert record_solve(store.uri, _answer([None, 1.1]), verified) is None  # no lower end
    assert record_solve(store.uri, {**_answer([0.9, 1.1]), "arm": "nope"}, verified) is None
    names = [a.path for a in store.client.list_artifacts(store.verification["lone-solve"], "predictions")]
    assert names == [f"predictions/{store.ids['lone-solve']}.json"]


def test_a_half_open_interval_is_recorded_without_its_upper_end(store: Store, tmp_path: Path) -> None:
    assert _record(store, "open-solve", tmp_path)["ratio_ci"] == [1.1, None]
    metrics = store.client.get_run(store.verification["open-solve"]).data.metrics
    assert metrics == {"solve.ws16.ratio_lo": 1.1}  # no median (a bound), no upper end


# --- the ledger -------------------------------------------------------------------------------


def test_the_ledger_scores_solve_lines_hit_miss_censored_and_pending(
        store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    lines = _ledger(store, capsys, "--no-record")
    got = [(x["experiment"], x["kind"], x["rule"], x["result"]) for x in lines]
    assert got == [("hit-solve", "solve", "solve lr×7.56 w47", "hit"),
                   ("miss-solve", "solve", "solve lr×7.56 w47", "miss"),
                   ("censored-solve", "solve", "solve lr×7.56 w47", "censored"),
                   ("lone-solve", "solve", "solve lr×7.56 w47", "pending"),
                   ("open-solve", "solve", "solve lr×7.56 w47", "pending")]
    hit, miss, censored, pending, half_open = lines
    assert hit["observed"] == pytest.approx(1.0) and hit["observed_kind"] == "value"
    assert hit["observed_seeds"] == 5 and set(hit["observed_parent_run_ids"]) == set(store.reruns)
    assert hit["ci"] == [0.97, 1.03] and hit["quantity"] == "epochs_ratio"
    # a median that is only a lower bound: above the claim's upper end a miss, inside it censored
    for line in (miss, censored):
        assert line["observed"] is None and line["observed_kind"] == "at_least"
        assert line["observed_bounds"] == [2.0, None] and line["observed_seeds"] == 3
    assert (miss["hit"], censored["hit"], pending["hit"]) == (False, None, None)
    assert pending["observed_seeds"] is None
    # the running rate counts the verified lines, at the confidence of their intervals
    assert (half_open["ci"], half_open["median"]) == ([1.1, None], None)
    assert [(x["running_hits"], x["running_verified"]) for x in lines] == [(1, 1), (1, 2), (1, 2),
                                                                           (1, 2), (1, 2)]
    assert lines[-1]["running_nominal"] == 0.9


def test_the_verification_own_trials_never_count(store: Store) -> None:
    parents = [store.verification["hit-solve"], *store.reruns]
    studies = parent_studies(store.uri, parents)
    record = {"arm": RECIPE, "baseline_arm": BASE, "parent_run_id": store.verification["hit-solve"]}
    outcome = solve_outcome(record, studies)
    assert outcome is not None and outcome.median.value == pytest.approx(1.0)
    own = {t.run_id for t in studies[store.verification["hit-solve"]]}
    assert own and not own & set(outcome.run_ids)
    assert len(outcome.run_ids) == 10  # 5 pairs of the reruns: the other candidate is no pair
    # the same trials with the verification's pooled in: a median outside the claim
    pooled = solve_outcome({**record, "parent_run_id": "elsewhere"}, studies)
    assert pooled is not None and pooled.seeds == 8 and pooled.median.value == pytest.approx(1.035)
    lone = store.verification["lone-solve"]
    assert solve_outcome({**record, "parent_run_id": lone}, parent_studies(store.uri, [lone])) is None


def test_a_seed_counts_once_and_never_one_the_verification_ran(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A rerun of verify.yaml with the search's or the verification's seeds repeats their trials
    (the same initialisation and data order): its pairs would confirm the claim whatever the
    recipe does. Here the search's seed 1 and the verification's seeds 5-7 (ratio 1.5 each) come
    back in the first rerun beside a new seed 30 (1.0), and seed 30 again in the second: counted
    each time, the median of the six pairs is 1.5, a hit of the claim [1.4, 1.6]; each seed once
    and none of the search's or the verification's, it is 1.0 (one pair), a miss."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    verification = _log(client, "reused-solve", _verification((3.0,) * 3), verify=True)
    _log(client, "reused-solve", _arm(BASE, (1, 5, 6, 7, 30), (2.0,) * 5)
         + _arm(RECIPE, (1, 5, 6, 7, 30), (3.0, 3.0, 3.0, 3.0, 2.0)))
    _log(client, "reused-solve", _arm(BASE, (30,), (2.0,)) + _arm(RECIPE, (30,), (2.0,)))
    verified = _verified(uri, verification)
    assert record_solve(uri, _answer([1.4, 1.6], 1.5), verified, now=T0, search_seeds=[0, 1, 2])
    assert main(["predict", "--ledger", "--json", "--no-record", "--tracking-uri", uri]) == 0
    (line,) = json.loads(capsys.readouterr().out)
    assert (line["result"], line["observed"], line["observed_seeds"], line["reused_seeds"]) == \
        ("miss", pytest.approx(1.0), 1, 5)


def test_each_run_pairs_as_its_own_study_analysis_does(store: Store) -> None:
    study = load_study(store.uri, parent_run_id=store.reruns[0])
    trials = study_trials(study)
    pairs = paired_epochs_ratios([t.summary for t in trials], RECIPE, BASE)
    assert sorted(o.est_lo for o in pairs.values()) == pytest.approx([0.95, 1.0, 1.05])
    (arm,) = [a for a in arm_summaries(study, trials) if a.arm == RECIPE]
    assert arm.epochs_ratio is not None
    # the same pairs: as many, and the study's interval spans exactly their ratios' range
    assert arm.epochs_ratio.ratios.n == len(pairs)
    assert arm.epochs_ratio.ratios.spread == pytest.approx((0.95, 1.05))


def test_the_outcome_is_written_beside_the_record(store: Store, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    hit = store.verification["hit-solve"]
    _ledger(store, capsys, "--experiment", "hit-solve", "--no-record")
    assert len(store.client.list_artifacts(hit, "predictions")) == 1  # --no-record: nothing
    _ledger(store, capsys)
    outcome_path = f"predictions/{store.ids['hit-solve']}.outcome.json"
    local = store.client.download_artifacts(hit, outcome_path, str(tmp_path))
    written = json.loads(Path(local).read_text())
    assert written["kind"] == "solve" and written["id"] == store.ids["hit-solve"]
    o = written["outcome"]
    assert (o["observed"], o["observed_kind"], o["seeds"], o["hit"]) == (pytest.approx(1.0), "value", 5, True)
    assert set(o["parent_run_ids"]) == set(store.reruns) and len(o["run_ids"]) == 10
    metrics = store.client.get_run(hit).data.metrics
    assert metrics["solve.ws16.hit"] == 1.0 and metrics["solve.ws16.ratio_observed"] == pytest.approx(1.0)
    miss = store.client.get_run(store.verification["miss-solve"]).data.metrics
    assert miss["solve.ws16.hit"] == 0.0 and "solve.ws16.ratio_observed" not in miss  # a bound
    censored = store.client.get_run(store.verification["censored-solve"]).data.metrics
    assert not any(k in censored for k in ("solve.ws16.hit", "solve.ws16.ratio_observed"))
    lone = store.verification["lone-solve"]
    assert len(store.client.list_artifacts(lone, "predictions")) == 1  # pending: no outcome
    # scored again with nothing new: written once
    _ledger(store, capsys, "--experiment", "hit-solve")
    assert [m.value for m in store.client.get_metric_history(hit, "solve.ws16.hit")] == [1.0]


def test_the_ledger_text_and_the_report_say_the_values_are_ratios(
        store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--ledger", "--no-record", "--experiment", "censored-solve",
                 "--tracking-uri", store.uri]) == 0
    out = capsys.readouterr().out
    assert "solve lr×7.56 w47 (ratio)  1       [0.9, 2.5] (90%)  ≥ 2       censored" in out
    assert "(ratio): a solve answer's recipe; its median, interval and observed are the paired " \
           "epochs ratio recipe / baseline arm, not epochs" in out
    section = predictions_html(ledger_lines(store.uri, "hit-solve"))  # the report's section
    assert "<td>solve lr×7.56 w47 (epochs ratio)</td>" in section and "<b>hit</b>" in section
    assert "paired epochs ratio to the baseline arm (not epochs)" in section


# --- rendering and scoring, without MLflow ------------------------------------------------------


def _solve_line(ci: tuple[float, float], median: Estimate | None, created: str) -> SolveLedgerLine:
    outcome = None if median is None else SolveOutcome(median, 4, ("r1",), ("p2",))
    return SolveLedgerLine("w-solve", "p1", f"{created}-ws16-solve", created, M, RECIPE, BASE, 7.56,
                           47, 1.01, ci, 0.9375, outcome)


def test_the_text_says_how_many_pairs_were_left_out_for_their_seed() -> None:
    line = _solve_line((0.9, 1.1), Estimate(1.0, 1.0), "a")
    assert "left out" not in render_ledger([line])
    reused = dataclasses.replace(line, reused=4)
    text = render_ledger([reused])
    assert "4 pair(s) of solve reruns left out: their seed was the search's or the verification's, " \
           "or an older run's, so they repeat a trial rather than test the claim" in text
    assert "left out" not in predictions_html([line])  # the report's section says it too
    assert "4 pair(s) of solve reruns were left out" in predictions_html([reused])


def test_solve_and_predict_lines_share_the_running_hit_rate() -> None:
    predicted = LedgerLine("w", "p0", "a-ws16", "a", M, 256.0, "linear", 3.5, (3.0, 4.0), 0.9,
                           RuleOutcome("linear", 3, 3.6, ("r",)))
    lines: list[Line] = [predicted,
             _solve_line((0.89, 1.11), Estimate(1.3, 1.3), "b"),  # miss
             _solve_line((1.1, INF), Estimate(2.0, INF), "c"),  # at least 2: inside [1.1, inf)
             _solve_line((0.89, 1.11), None, "d")]  # pending
    text = render_ledger(lines).splitlines()
    assert text[1].split() == ["w", "16", "linear", "3.5", "[3,", "4]", "(90%)", "3.6", "hit",
                               "1/1", "=", "1.000", "(nominal", "0.90)"]  # as before solve lines
    assert text[2].split()[2:9] == ["solve", "lr×7.56", "w47", "(ratio)", "1.01", "[0.89,", "1.11]"]
    assert text[2].split()[10:13] == ["1.3", "miss", "1/2"]
    assert text[3].split()[7:14] == ["[1.1,", "inf)", "(94%)", "≥", "2", "hit", "2/3"]
    assert text[4].split()[10:12] == ["-", "pending"]
    assert text[5].startswith("hit rate: 2/3 = 0.667 against nominal 0.92; 1 pending, 0 censored")
    html = predictions_html(lines)
    assert "<td>solve lr×7.56 w47 (epochs ratio)</td><td>1.01</td><td>[1.1, inf)</td>" in html
    assert "<td>≥ 2</td>" in html and "<td>linear</td>" in html


@pytest.mark.parametrize(("lo", "hi", "ci", "hit"), [
    (1.0, 1.0, (0.9, 1.1), True),
    (1.2, 1.2, (0.9, 1.1), False),
    (2.0, INF, (0.9, 1.1), False),  # at least 2, the interval ends before: a miss
    (2.0, INF, (0.9, 2.5), None),  # it could still be inside: censored
    (2.0, INF, (1.1, INF), True),  # a half-open interval holds every value past its lower end
    (0.0, 0.8, (0.9, 1.1), False),  # at most 0.8 (the baseline never reached)
    (0.95, 1.2, (0.9, 1.1), None),
])  # fmt: skip
def test_bounded_hit(lo: float, hi: float, ci: tuple[float, float], hit: bool | None) -> None:
    assert bounded_hit(lo, hi, ci) is hit


def test_bounded_hit_refuses_an_empty_range() -> None:
    with pytest.raises(ValueError, match=r"lo must be at most hi, but got lo=2\.0, hi=1\.0"):
        bounded_hit(2.0, 1.0, (0.9, 1.1))


@pytest.mark.parametrize(("argv", "record"), [([], True), (["--no-record"], False)])
def test_solve_records_unless_told_not_to(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                          argv: list[str], record: bool) -> None:
    from scalesweep.orchestrator.launch import solve as launch

    asked: dict[str, Any] = {}

    def fake(path: str, **kwargs: Any) -> launch.SolveResult:
        asked.update(kwargs)
        return launch.SolveResult(M, "search", tmp_path, [], None, {"decision": None, "world_size": M,
                                  "trials_used": 0, "trial_epochs_used": 0.0,
                                  "search_trial_epochs_used": 0.0, "grid_trial_epochs": 0.0})

    monkeypatch.setattr(launch, "solve", fake)
    # the command validates the sweep file first (the solve use case takes the loaded study)
    sweep = str(Path(__file__).resolve().parents[2] / "sweeps" / "smoke.yaml")
    assert main(["solve", sweep, "--world-size", str(M), *argv]) == 1  # nothing verified
    assert asked["record"] is record
