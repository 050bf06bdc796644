"""`scalesweep predict --verify OUT.yaml` on a real sqlite store: the study's own sweep file
(found as `resume` finds it, else by the parent run's sweep_file tag) narrowed to M and the
reference, the predicted lr rules plus linear and sqrt, adaptive seeds, the study's resolved
target; the file passes `scalesweep plan`. Without the sweep file: exit 2, nothing logged."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from scalesweep.orchestrator.cli import main
from scalesweep.orchestrator.launch.run import STATE_FILE
from tests.unit.test_advice import STUDY, _log

ROOT = Path(__file__).resolve().parents[2]
M = 64


@pytest.fixture
def uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def _study(uri: str, name: str, sweep_file: Path | None) -> str:
    client = MlflowClient(uri)
    pid = _log(client, name, STUDY)
    if sweep_file is not None:
        client.set_tag(pid, "sweep_file", str(sweep_file))
    return pid


def _verify(uri: str, name: str, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(["predict", "--experiment", name, "--world-size", str(M), "--verify", str(out),
               "--tracking-uri", uri])
    got = capsys.readouterr()
    return rc, got.out, got.err


def test_verify_writes_a_sweep_at_m_that_plans(uri: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    sweep = tmp_path / "study.yaml"
    shutil.copyfile(ROOT / "sweeps" / "smoke.yaml", sweep)
    pid = _study(uri, "smoke", sweep)
    out = tmp_path / "verify" / "v.yaml"
    rc, text, err = _verify(uri, "smoke", out, capsys)
    assert rc == 0, err
    data = yaml.safe_load(out.read_text())
    assert data["name"] == "smoke"  # the study's experiment: the ledger finds its trials there
    assert data["verifies"] == pid  # tags the verification's parent run
    assert data["axes"]["world_size"] == [2, M]  # M and the reference (smoke's baseline too)
    assert data["axes"]["scaling_rule"] == ["linear", "none", "sqrt"]  # predicted + linear, sqrt
    assert "seed" not in data["axes"] and data["replicates"] == {"min": 3, "max": 6}
    assert data["target"] == {"metric": "dev_loss", "value": 1.5}  # the study's resolved target
    assert f"scalesweep run {out} --tracking-uri {uri}" in text
    assert "scalesweep predict --ledger --experiment smoke" in text
    # trained past the widest predicted interval (smoke's 6 epochs would leave a seed that
    # never reached censored inside it), rounded up to a quarter epoch
    assert main(["predict", "--experiment", "smoke", "--world-size", str(M), "--json",
                 "--no-record", "--tracking-uri", uri]) == 0
    end = max(r["epochs_to_target_ci"][1] for r in json.loads(capsys.readouterr().out)
              if r["epochs_to_target_ci"] is not None)
    assert end > 6 and data["training"]["epochs"] == math.ceil(1.1 * end * 4) / 4
    assert main(["plan", str(out), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["world_size"] for r in rows} == {2, M}
    assert {r["scaling_rule"] for r in rows if r["world_size"] == M} == {"none", "linear", "sqrt"}


def test_verify_reads_the_sweep_directory_copy_and_its_overrides(
        uri: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    pid = _study(uri, "smoke", tmp_path / "gone.yaml")  # the original is gone since
    sweep_dir = tmp_path / "runs" / f"smoke-{pid[:8]}"
    sweep_dir.mkdir(parents=True)
    shutil.copyfile(ROOT / "sweeps" / "smoke.yaml", sweep_dir / "sweep.yaml")
    (sweep_dir / STATE_FILE).write_text(json.dumps({
        "sweep_file": str(sweep_dir / "sweep.yaml"), "overrides": ["training.epochs=100"]}))
    monkeypatch.setenv("SCALESWEEP_STORAGE", str(tmp_path / "runs"))
    out = tmp_path / "v.yaml"
    rc, text, err = _verify(uri, "smoke", out, capsys)
    assert rc == 0, err
    # the override, already past the widest interval (the verification never shortens one)
    assert yaml.safe_load(out.read_text())["training"]["epochs"] == 100
    assert f"sweep directory {sweep_dir}" in text


def test_a_study_whose_sweep_file_is_gone_is_refused_and_nothing_recorded(
        uri: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCALESWEEP_STORAGE", str(tmp_path / "runs"))
    pid = _study(uri, "lost", tmp_path / "gone.yaml")
    out = tmp_path / "v.yaml"
    rc, _, err = _verify(uri, "lost", out, capsys)
    assert rc == 2
    # the value is the tag's path (shortened in the middle where long)
    assert f"parent run {pid} tag sweep_file = '/" in err and "gone.yaml': the study's sweep file" in err
    assert f"{tmp_path / 'runs' / f'lost-{pid[:8]}' / STATE_FILE}" in err
    assert not out.exists()
    assert MlflowClient(uri).list_artifacts(pid, "predictions") == []


def test_predict_reads_the_newest_study_not_its_verification(
        uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A verification logs into the study's experiment; its parent run, tagged with the
    study's id, is passed over by predict --experiment (a newer study is not)."""
    from scalesweep.mlflow_names import VERIFIES_TAG

    study = _study(uri, "smoke", None)
    newer = _study(uri, "smoke", None)

    def read() -> str:
        assert main(["predict", "--experiment", "smoke", "--world-size", str(M), "--no-record",
                     "--tracking-uri", uri]) == 0
        return capsys.readouterr().out

    assert f"(parent run {newer})" in read()  # the newest study
    MlflowClient(uri).set_tag(newer, VERIFIES_TAG, study)  # now it is the study's verification
    assert f"(parent run {study})" in read()
    MlflowClient(uri).set_tag(study, VERIFIES_TAG, "0" * 32)
    assert main(["predict", "--experiment", "smoke", "--world-size", str(M), "--no-record",
                 "--tracking-uri", uri]) == 2
    assert "has only verification sweeps' parent runs" in capsys.readouterr().err
