"""Numbers as people write them: ``1e-3``, ``2E-2``, ``1e+4`` and ``.5`` are floats wherever a
number is taken (the sweep file, a recipe, ``--set``, the API's ``set=``, a search space),
through the one loader of ``scalesweep/orchestrator/spec/files.py`` (YAML 1.2's floats; YAML
1.1, PyYAML's, reads ``1e-3`` as a string). Strings meant as strings stay strings, and nothing
else YAML 1.1 reads changes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import scalesweep
from scalesweep.orchestrator.spec.files import dump_yaml, parse_yaml
from scalesweep.orchestrator.spec.load import load_sweep, parse_overrides
from scalesweep.orchestrator.spec.recipes import read_recipe
from tests.support.helpers import cli

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "sweeps" / "smoke.yaml"
WENET = ROOT / "recipes" / "wenet_conformer.yaml"

#: as written -> the float it means (YAML 1.1 reads all but the last two as strings)
WRITTEN = {"1e-3": 1e-3, "2E-2": 2e-2, "1e+4": 1e4, "1.5e3": 1500.0, "-.5": -0.5, "+1e3": 1000.0,
           ".5": 0.5, "1.0e-3": 1e-3}
#: scalars whose meaning must not change: strings that only look numeric, and YAML 1.1's ints,
#: booleans, nulls and dates as PyYAML reads them
UNCHANGED = ["1e3abc", "1.0.0", "e3", "1e", "1.5e", "v1e3", "1e-3x", "0x1F", "010", "12", "-3",
             "1_000", "1_000.5", "yes", "no", "on", "off", "~", "null", "2001-12-14", ".inf",
             "-.inf", ".nan", "1:20"]


def smoke_with(tmp_path: Path, old: str, new: str) -> Path:
    """sweeps/smoke.yaml with one line changed, in tmp_path."""
    text = SMOKE.read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "smoke.yaml"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


@pytest.mark.parametrize(("text", "value"), WRITTEN.items())
def test_the_loader_reads_a_written_float_as_a_float(text: str, value: float) -> None:
    got = parse_yaml(text)
    assert isinstance(got, float) and got == value


@pytest.mark.parametrize("text", UNCHANGED)
def test_the_loader_reads_everything_else_as_yaml_1_1_does(text: str) -> None:
    got, before = parse_yaml(text), yaml.safe_load(text)
    assert type(got) is type(before)
    assert got == before or (got != got and before != before)  # NaN


def test_a_sweep_file_reads_2e_minus_2_as_a_number(tmp_path: Path) -> None:
    path = smoke_with(tmp_path, "lr: 0.05", "lr: 2e-2")
    assert load_sweep(path).base.optimizer["lr"] == 0.02


def test_set_reads_1e_minus_3_as_a_number(capsys: pytest.CaptureFixture[str]) -> None:
    # the command: `plan sweeps/smoke.yaml --set optimizer.lr=1e-3` was exit 2
    rows = json.loads(cli(["plan", str(SMOKE), "--set", "optimizer.lr=1e-3", "--json"], capsys))
    assert {row["lr"] for row in rows if row["scaling_rule"] == "none"} == {1e-3}


def test_set_refuses_a_duplicate_key_as_a_file_does() -> None:
    with pytest.raises(scalesweep.InputError) as exc:
        parse_overrides(["target={metric: dev_loss, metric: train_loss}"])
    assert "duplicate key 'metric'" in str(exc.value)


def test_a_search_space_takes_loguniform_1e_minus_4_to_1e_minus_2(tmp_path: Path) -> None:
    # docs/sweep-file.md's own example failed with "must be [low, high]"
    path = smoke_with(tmp_path, "  seed: [0]\n", "  seed: [0]\n  optimizer.lr: {loguniform: [1e-4, 1e-2]}\n")
    sweep = load_sweep(path, ["search={type: random, samples: 2, seed: 0}"])
    assert sweep.spec.axes.free_axes()["optimizer.lr"] == {"loguniform": [1e-4, 1e-2]}


def test_a_recipe_reads_1e_minus_3_as_a_number(tmp_path: Path) -> None:
    recipe = tmp_path / "wenet.yaml"
    recipe.write_text(WENET.read_text(encoding="utf-8").replace("lr: 0.002", "lr: 1e-3"),
                      encoding="utf-8")
    assert read_recipe(recipe).settings["optimizer"]["lr"] == 1e-3


def test_the_api_s_set_takes_numbers_and_keeps_strings_strings() -> None:
    # a str that looks like a number is written quoted: it reaches the sweep as a str
    study = scalesweep.load(SMOKE, set={"optimizer.lr": 1e-3, "name": "1e3",
                                        "description": "1e-3"})
    spec = study.sweep.spec
    assert (spec.optimizer or {})["lr"] == 1e-3
    assert (spec.name, spec.description) == ("1e3", "1e-3")


@pytest.mark.parametrize("value", ["1e-3", "1.0.0", ".5", "-.5", "+1e3", "1e3abc", 1e-3, 1e-30,
                                   1e20, 0.5, -2.5e-7, ["2E-2", 2e-2], {"lr": "1e+4"}])
def test_what_we_write_reads_back_as_itself(value: Any) -> None:
    # verify.yaml (solve), predict --verify's sweep and the API's set= are written this way
    assert parse_yaml(dump_yaml(value)) == value


def test_a_sweep_we_write_reads_back_as_itself(tmp_path: Path) -> None:
    # predict --verify's sweep (solve's verify.yaml is written by the same dump_yaml)
    from scalesweep.orchestrator.plan.verify_sweep import write_spec
    from scalesweep.orchestrator.spec.files import load_mapping

    data = {"name": "1e3", "description": "2E-2", "optimizer": {"type": "adam", "lr": 1e-3}}
    write_spec(data, tmp_path / "verify.yaml")
    assert load_mapping(tmp_path / "verify.yaml") == data
