"""The Python API (scalesweep.api, docs/api.md) against the CLI it stands beside: ``import
scalesweep`` stays light, ``load`` refuses what ``--set`` refuses, ``Study.plan`` is ``plan
--json``, ``predict`` is ``predict --json``, and one small sweep run through ``Study.run`` gives
the summary JSON and arms.json it wrote, which ``scalesweep.results`` reads back from MLflow."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import scalesweep
from scalesweep.orchestrator.spec.errors import InputError
from scalesweep.orchestrator.tracking import sqlite_template
from tests.support.helpers import ROOT, SWEEPS, cli

SMOKE = str(SWEEPS / "smoke.yaml")
HEAVY = ("torch", "ray", "mlflow", "pandas")


def _imported_after(code: str) -> list[str]:
    probe = (f"import sys; {code}; print(sorted({{m.split('.')[0] for m in sys.modules}} & "
             f"set({HEAVY!r})))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    return list(json.loads(out.stdout.strip().replace("'", '"')))


def test_import_scalesweep_imports_no_heavy_package() -> None:
    # a fresh interpreter each: the test process has them all imported already
    assert _imported_after("import scalesweep") == []
    # the names resolve lazily (PEP 562), and resolving them imports none either
    assert _imported_after("import scalesweep; scalesweep.load; scalesweep.Result; "
                           "scalesweep.results; scalesweep.predict; scalesweep.solve; "
                           "scalesweep.advise; scalesweep.resume; scalesweep.studies; "
                           "scalesweep.submit; scalesweep.recommend; scalesweep.Recommendation") == []


def test_the_public_names() -> None:
    from scalesweep.trainables import workloads as inner
    from scalesweep.trainables.workloads import base

    names = {"load", "Study", "Result", "results", "predict", "InputError", "workloads", "solve",
             "Solved", "SolveAnswer", "advise", "resume", "studies", "Progress", "submit",
             "recommend", "Recommendation"}
    assert names <= set(dir(scalesweep)) and names == set(scalesweep.__all__)
    assert scalesweep.InputError is InputError
    assert scalesweep.workloads.Workload is base.Workload and scalesweep.workloads.make is inner.make
    assert isinstance(scalesweep.workloads.make("mlp_regression"), scalesweep.workloads.Workload)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = scalesweep.nope


def _problems(exc: pytest.ExceptionInfo[InputError]) -> list[tuple[str, Any]]:
    return [(p.path, p.value) for p in exc.value.problems]


def test_load_refuses_a_bad_value_as_set_does(capsys: pytest.CaptureFixture[str]) -> None:
    # tests/unit/test_bad_input.py's set-bad-value: `--set axes.world_size=[0]`
    with pytest.raises(InputError) as exc:
        scalesweep.load(SMOKE, set={"axes.world_size": [0]})
    assert _problems(exc) == [("axes.world_size", [0])] and "at least 1" in str(exc.value)
    # and its set-through-scalar: the field named as --set names it
    with pytest.raises(InputError) as exc:
        scalesweep.load(SMOKE, set={"name.x": 1})
    assert _problems(exc) == [("--set name.x", "smoke")] and "name is not a mapping" in str(exc.value)
    # a file of tests/bad_inputs/: the problems `plan` prints
    with pytest.raises(InputError) as exc:
        scalesweep.load(ROOT / "tests" / "bad_inputs" / "ws_zero.yaml")
    assert [p for p, _ in _problems(exc)] == ["axes.world_size"] and "[0, 2]" in str(exc.value)


@pytest.mark.parametrize(("bad", "field"), [
    (["axes.world_size=[2]"], "set"),  # the CLI's strings, not a mapping
    ({"": 1}, "set"),
    ({"training.epochs": float("nan")}, "set['training.epochs']"),
    ({"training.epochs": object()}, "set['training.epochs']"),
])
def test_load_names_a_bad_set_argument(bad: Any, field: str) -> None:
    with pytest.raises(InputError) as exc:
        scalesweep.load(SMOKE, set=bad)
    assert [p for p, _ in _problems(exc)] == [field]


def test_set_values_reach_the_sweep_as_the_cli_gives_them() -> None:
    # YAML would read a bare yes as True and 1e-05 as a string: each value comes through as itself
    values = {"training.epochs": 2, "optimizer.lr": 1e-5, "name": "smoke-2", "description": "yes",
              "axes.world_size": [2, 4], "target": {"metric": "dev_loss", "value": 0.5},
              "stop_at_target": True}
    study = scalesweep.load(SMOKE, set=values)
    spec = study.sweep.spec
    got = (spec.training.epochs, (spec.optimizer or {})["lr"], spec.name, spec.description,
           spec.target.value, spec.stop_at_target)
    assert got == (2, 1e-5, "smoke-2", "yes", 0.5, True)
    assert study.overrides[:2] == ("training.epochs=2", "optimizer.lr=1.0e-05")
    assert study.name == "smoke-2"


def test_plan_is_plan_json(capsys: pytest.CaptureFixture[str]) -> None:
    overrides = {"axes.seed": [0, 1], "axes.scaling_rule": ["none", "linear", "sqrt"]}
    frame = scalesweep.load(SMOKE, set=overrides).plan()
    printed = json.loads(cli(["plan", SMOKE, "--json", "--set", "axes.seed=[0, 1]",
                              "--set", "axes.scaling_rule=[none, linear, sqrt]"], capsys))
    assert len(frame) == len(printed) == 8  # ws2 is one trial under each rule: merged, same_as
    pd.testing.assert_frame_equal(frame, pd.DataFrame(printed))
    assert list(frame.columns[:3]) == ["name", "arm", "world_size"] and "regime" in frame.columns


# --- a study in MLflow (hand-made, as tests/unit/test_predict_cli.py): predict and results ---------

@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    from mlflow.tracking import MlflowClient

    from tests.unit.test_advice import STUDY, _log

    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    _log(MlflowClient(tracking_uri=uri), "scaling", STUDY)
    return uri


def test_predict_is_predict_json(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    frame = scalesweep.predict("scaling", world_size=64, tracking_uri=uri)
    printed = json.loads(cli(["predict", "--experiment", "scaling", "--world-size", "64", "--json",
                              "--no-record", "--tracking-uri", uri], capsys))
    pd.testing.assert_frame_equal(frame, pd.DataFrame(printed))
    assert set(frame["rule"]) == {"linear", "none"} and frame.attrs["world_size"] == 64
    assert "prediction_id" not in frame.attrs  # nothing recorded unless asked
    recorded = scalesweep.predict("scaling", world_size=64, tracking_uri=uri, record=True)
    ledger = json.loads(cli(["predict", "--ledger", "--experiment", "scaling", "--json", "--no-record",
                             "--tracking-uri", uri], capsys))
    assert recorded.attrs["prediction_id"] in {line["prediction_id"] for line in ledger}


def test_predict_and_results_name_a_bad_argument(uri: str) -> None:
    cases = [
        (lambda: scalesweep.predict("nope", world_size=64, tracking_uri=uri), ("experiment", "nope")),
        (lambda: scalesweep.predict("scaling", world_size=0, tracking_uri=uri), ("world_size", 0)),
        (lambda: scalesweep.predict("scaling", world_size="8", tracking_uri=uri),  # type: ignore[arg-type]
         ("world_size", "8")),
        (lambda: scalesweep.results("nope", tracking_uri=uri), ("experiment", "nope")),
        (lambda: scalesweep.results("scaling", run_id="abc", tracking_uri=uri), ("experiment", "scaling")),
        (lambda: scalesweep.results(run_id="0" * 32, tracking_uri=uri), ("run_id", "0" * 32)),
        (lambda: scalesweep.results(7, tracking_uri=uri), ("experiment", 7)),  # type: ignore[arg-type]
        (lambda: scalesweep.predict(run_id="0" * 32, world_size=8, tracking_uri=uri), ("run_id", "0" * 32)),
    ]
    for call, problem in cases:
        with pytest.raises(InputError) as exc:
            call()
        assert _problems(exc)[:1] == [problem], exc.value


def test_results_reads_the_report_s_tables(uri: str, tmp_path: Path) -> None:
    from scalesweep.dashboards.report import build_report

    result = scalesweep.results("scaling", tracking_uri=uri)
    paths = build_report(uri, experiment="scaling", out_dir=tmp_path)
    pd.testing.assert_frame_equal(result.arms, pd.DataFrame(json.loads(paths.arms_json.read_text())))
    report = pd.read_json(paths.json)  # the report's trials.json: the same summaries
    mine = result.trials.set_index("name").loc[report["trial_name"]]
    epochs = list(report["epochs_to_target"].fillna(-1))
    assert list(mine["epochs_to_target"].fillna(-1)) == pytest.approx(epochs)
    assert result.experiment == "scaling" and result.report_dir is None and result.failed == []


# --- one small sweep, through the API, read back ---------------------------------------------

def _walkthrough() -> list[str]:
    """The Python blocks of docs/api.md, in order."""
    return re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "api.md").read_text(encoding="utf-8"), re.S)


def test_the_walkthrough_compiles_and_names_public_names() -> None:
    blocks = _walkthrough()
    assert len(blocks) >= 8
    for block in blocks:
        compile(block, "docs/api.md", "exec")
    named = set(re.findall(r"\bscalesweep\.(\w+)", "".join(blocks)))
    assert named and named <= set(scalesweep.__all__), named


# --- item 4 of issue 49: a mapping, curves, answer, blocks, studies, advise --------------------

def test_load_takes_a_mapping_as_its_file_would_read() -> None:
    import yaml

    spec = yaml.safe_load((SWEEPS / "smoke.yaml").read_text(encoding="utf-8"))
    overrides = {"axes.scaling_rule": ["none", "linear"]}
    mapped, filed = scalesweep.load(spec, set=overrides), scalesweep.load(SMOKE, set=overrides)
    assert mapped.path is None and mapped.name == "smoke" and yaml.safe_load(mapped.text or "") == spec
    pd.testing.assert_frame_equal(mapped.plan(), filed.plan())
    # a bad value is named as in a file; a key or value YAML cannot hold, before the loader
    with pytest.raises(InputError) as exc:
        scalesweep.load({**spec, "training": {**spec["training"], "epochs": -1}})
    assert [p for p, _ in _problems(exc)] == ["training.epochs"] and "<mapping>" in str(exc.value)
    with pytest.raises(InputError) as exc:
        scalesweep.load({**spec, 3: "x"})
    assert _problems(exc) == [("3", 3)]
    with pytest.raises(InputError) as exc:
        scalesweep.load({**spec, "description": object()})
    assert _problems(exc) == [("source", "<mapping>")]
    with pytest.raises(InputError) as exc:
        scalesweep.load(7)  # type: ignore[arg-type]
    assert _problems(exc) == [("source", 7)]


def test_curves_are_one_row_per_trial_and_eval_as_mlflow_holds_them(uri: str) -> None:
    from mlflow.tracking import MlflowClient

    from scalesweep.orchestrator.usecases.results import CURVE_COLUMNS

    result = scalesweep.results("scaling", tracking_uri=uri)
    curves = result.curves
    assert tuple(curves.columns[:len(CURVE_COLUMNS)]) == CURVE_COLUMNS and curves.columns[-1] == "run_id"
    # the hand-made study logs dev_loss at updates 100, 200, ..., 6000: 60 evals per trial
    assert len(curves) == 60 * len(result.trials)
    assert list(curves["trial"].unique()) == list(result.trials["name"])  # in the trials' order
    one = result.trials.iloc[0]
    mine = curves[curves["trial"] == one["name"]]
    logged = MlflowClient(uri).get_metric_history(one["mlflow_run_id"], "dev_loss")
    assert list(mine["update"]) == [m.step for m in logged]
    assert list(mine["dev_loss"]) == pytest.approx([m.value for m in logged])
    assert set(mine["arm"]) == {one["arm"]} and set(mine["world_size"]) == {one["world_size"]}
    assert mine["epoch"].tolist() == pytest.approx((mine["update"] / one["updates_per_epoch"]).tolist())
    assert mine["lr"].isna().all()  # not logged by this hand-made study: a column still


def test_answer_keeps_the_decided_arms_with_their_intervals(uri: str) -> None:
    from scalesweep.orchestrator.usecases.results import ANSWER_COLUMNS, DECIDED

    result = scalesweep.results("scaling", tracking_uri=uri)
    answer = result.answer
    assert tuple(answer.columns) == ANSWER_COLUMNS
    decided = result.arms[result.arms["decision"].isin(DECIDED)]
    assert list(answer["arm"]) == list(decided["arm"]) and set(answer["decision"]) <= set(DECIDED)
    assert "baseline" not in set(answer["decision"]) and "not resolved" not in set(answer["decision"])


@pytest.fixture(scope="module")
def blocks_uri(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str]]:
    """A store with one study run twice (two parent runs: a second block) and another study."""
    from mlflow.tracking import MlflowClient

    from tests.unit.test_advice import STUDY, _log

    uri = f"sqlite:///{tmp_path_factory.mktemp('blocks') / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    parents = [_log(client, "twice", STUDY), _log(client, "twice", STUDY[:4])]
    _log(client, "once", STUDY[:2])
    return uri, parents


def test_results_reads_every_block_of_a_study(blocks_uri: tuple[str, list[str]]) -> None:
    from tests.unit.test_advice import STUDY

    uri, parents = blocks_uri
    latest = scalesweep.results("twice", tracking_uri=uri)
    every = scalesweep.results("twice", tracking_uri=uri, blocks="all")
    assert latest.parent_run_id == parents[-1] and latest.parent_run_ids == (parents[-1],)
    assert every.parent_run_ids == tuple(parents) and every.parent_run_id == parents[-1]
    for table in (every.trials, every.arms, every.curves):
        assert table.columns[0] == "parent_run_id" and list(table["parent_run_id"].unique()) == parents
    assert list(every.trials.groupby("parent_run_id", sort=False).size()) == [len(STUDY), 4]
    # the latest block's rows are what blocks="latest" reads
    last = every.trials[every.trials["parent_run_id"] == parents[-1]].drop(columns="parent_run_id")
    pd.testing.assert_frame_equal(last.reset_index(drop=True), latest.trials)
    for bad in ({"blocks": "some"}, {"blocks": "all", "run_id": parents[0]}):
        with pytest.raises(InputError) as exc:
            scalesweep.results(**({"experiment": "twice"} if "run_id" not in bad else {}),
                               tracking_uri=uri, **bad)  # type: ignore[arg-type]
        assert _problems(exc)[0][0] == "blocks"


def test_studies_lists_what_a_store_holds(blocks_uri: tuple[str, list[str]], tmp_path: Path) -> None:
    uri, parents = blocks_uri
    table = scalesweep.studies(uri)
    assert list(table.columns) == ["experiment", "parent_runs", "latest_parent_run_id", "latest_start",
                                   "description"]
    assert list(table["experiment"]) == ["once", "twice"]  # newest first
    twice = table.set_index("experiment").loc["twice"]
    assert (twice["parent_runs"], twice["latest_parent_run_id"]) == (2, parents[-1])
    assert sqlite_template.seed_new_store(f"sqlite:///{tmp_path / 'empty.db'}")
    assert scalesweep.studies(f"sqlite:///{tmp_path / 'empty.db'}").empty
    with pytest.raises(InputError, match=r"no MLflow store at .*missing.db \(a read never creates one\)"):
        scalesweep.studies(f"sqlite:///{tmp_path / 'missing.db'}")
    assert not (tmp_path / "missing.db").exists()


def test_advise_is_what_the_advise_command_prints(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    from scalesweep.dashboards.advice import render

    advice = scalesweep.advise("scaling", world_size=16, tracking_uri=uri)
    printed = cli(["advise", "--experiment", "scaling", "--world-size", "16", "--tracking-uri", uri],
                  capsys)
    assert render(advice) + "\n" == printed and advice.world_size == 16
    for call, problem in [(lambda: scalesweep.advise("nope", tracking_uri=uri), ("experiment", "nope")),
                          (lambda: scalesweep.advise("scaling", world_size=0, tracking_uri=uri),
                           ("world_size", 0)),
                          (lambda: scalesweep.advise(tracking_uri=uri), ("experiment", None))]:
        with pytest.raises(InputError) as exc:
            call()
        assert _problems(exc)[:1] == [problem]


def test_the_api_and_its_use_cases_never_print(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    scalesweep.load(SMOKE).plan()
    _ = scalesweep.results("scaling", tracking_uri=uri).curves
    scalesweep.predict("scaling", world_size=64, tracking_uri=uri)
    scalesweep.advise("scaling", tracking_uri=uri)
    assert capsys.readouterr() == ("", "")


def test_submit_dry_run_says_what_the_command_prints(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # nothing is contacted: the upload and the job's command, to the caller's Progress
    monkeypatch.chdir(ROOT)
    uri = "http://alice:hunter2@mlflow.example:5000"
    lines: list[str] = []
    rc = scalesweep.submit("sweeps/smoke.yaml", dry_run=True, tracking_uri=uri,
                           progress=scalesweep.Progress(info=lines.append, warn=lines.append))
    printed = cli(["submit", "sweeps/smoke.yaml", "--dry-run", "--tracking-uri", uri], capsys)
    assert rc == 0 and "\n".join(lines) + "\n" == printed and capsys.readouterr() == ("", "")
    assert "the job would run: python -m scalesweep run sweeps/smoke.yaml" in printed
    assert "hunter2" not in printed
    with pytest.raises(InputError) as exc:
        scalesweep.submit(scalesweep.load(yaml_of_smoke()), dry_run=True)
    assert _problems(exc) == [("study", "smoke")]


def yaml_of_smoke() -> dict[str, Any]:
    import yaml

    return dict(yaml.safe_load((SWEEPS / "smoke.yaml").read_text(encoding="utf-8")))


def test_a_solve_answer_is_the_json_solve_prints_as_a_typed_record() -> None:
    # the answer of docs/solve.md ("The answer"), as the launcher builds it: its keys in order
    verified = {"world_size": 16, "recipe": {"format": "wenet", "settings": {"optim_conf.lr": 0.0064}},
                "peak_lr": 0.0064, "warmup_steps": 88, "decision": "equivalent", "ratio_median": 1.01,
                "ratio_ci": [0.95, None], "ratio_by_target": [{"level": 0.1, "decision": "equivalent"}],
                "trials_used": 61, "trial_epochs_used": 212.5, "grid_trial_epochs": 180,
                "sampler": "tpe", "search_trial_epochs_used": 31.2, "candidates_run": 12, "best_of": 3,
                "selection_confidence": 0.9667, "verification_parent_run_id": "abc", "arm": "ws16-x",
                "lr_factor": 3.2, "lr": 0.0064, "at_edge": ["lr high"]}
    answer = scalesweep.SolveAnswer.from_json(verified)
    assert answer.json == verified and list(answer.json) == list(verified)  # what --json prints
    assert (answer.decision, answer.arm, answer.lr_factor, answer.warmup_steps) == ("equivalent", "ws16-x",
                                                                                   3.2, 88)
    assert answer.ratio_ci == (0.95, None) and answer.at_edge == ("lr high",) and answer.best_of == 3
    # nothing verified, and an answer recorded before best_of and the grid's cost existed
    older = scalesweep.SolveAnswer.from_json({"world_size": 8, "decision": None, "trials_used": 5})
    assert (older.decision, older.ratio_ci, older.best_of, older.sampler) == (None, None, 0, "tpe")
    with pytest.raises(InputError) as exc:
        scalesweep.solve(SMOKE, world_size="8")  # type: ignore[arg-type]
    assert _problems(exc) == [("world_size", "8")]
    with pytest.raises(InputError) as exc:
        scalesweep.solve(SMOKE, world_size=8, start_from_recommendation="yes")  # type: ignore[arg-type]
    assert _problems(exc) == [("start_from_recommendation", "yes")]
