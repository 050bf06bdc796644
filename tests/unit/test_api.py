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
                           "scalesweep.results; scalesweep.predict") == []


def test_the_public_names() -> None:
    from scalesweep.trainables import workloads as inner
    from scalesweep.trainables.workloads import base

    names = {"load", "Study", "Result", "results", "predict", "InputError", "workloads"}
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
