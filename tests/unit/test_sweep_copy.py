"""The copy a sweep keeps for resume is the text validated at load (launch/sweep_copy.py), not
the file read again later; resume names a file on disk that differs from its copy.
tests/integration/test_sweep_copy_e2e.py edits the file while a real `run` starts Ray."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalesweep.orchestrator.launch.sweep_copy import edited_since, keep_copies
from scalesweep.orchestrator.spec.load import load_sweep
from tests.support.helpers import SWEEPS

RECIPE = "optimizer: {type: sgd, lr: 0.07, momentum: 0.9}\r\n# a CRLF line and a ü: kept byte for byte\n"


def _files(tmp_path: Path) -> tuple[Path, Path]:
    sweep = tmp_path / "study.yaml"
    lines = (SWEEPS / "smoke.yaml").read_text(encoding="utf-8").splitlines()
    # the optimizer from the recipe alone
    sweep.write_text("\n".join(ln for ln in lines if not ln.startswith("optimizer:"))
                     + "\nrecipe: recipe.yaml\n", encoding="utf-8")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_bytes(RECIPE.encode())
    return sweep, recipe


def test_the_copies_are_the_text_validated_not_the_files_edited_after(tmp_path: Path) -> None:
    sweep_file, recipe_file = _files(tmp_path)
    validated = sweep_file.read_bytes(), recipe_file.read_bytes()
    sweep = load_sweep(sweep_file, ["training.epochs=2"])
    # edited after the load, as a user's editor would while Ray starts
    sweep_file.write_text(sweep_file.read_text() + "description: edited\n")
    recipe_file.write_text("optimizer: {type: sgd, lr: 9.0}\n")
    state = tmp_path / "state"
    state.mkdir()

    kept = keep_copies(sweep_file, sweep, ["training.epochs=2"], state)

    assert kept.sweep.read_bytes() == validated[0]
    recipe_copy = state / "recipe.yaml"
    assert recipe_copy.read_bytes() == validated[1]
    assert kept.overrides == ["training.epochs=2", f"recipe={recipe_copy}"]
    assert kept.originals == {str(kept.sweep): str(sweep_file.resolve()),
                              str(recipe_copy): str(recipe_file.resolve())}
    # what resume loads is the sweep validated: the recipe's lr, not the edit's
    again = load_sweep(kept.sweep, kept.overrides)
    assert again.base.optimizer["lr"] == 0.07 and again.spec.description is None
    lines = edited_since(kept.originals)
    assert lines == [
        f"note: {sweep_file.resolve()} differs from {kept.sweep}, the copy this resume runs (the "
        "file as validated when the sweep started); an edit made since runs only in a new sweep",
        f"note: {recipe_file.resolve()} differs from {recipe_copy}, the copy this resume runs (the "
        "file as validated when the sweep started); an edit made since runs only in a new sweep"]


def test_resume_says_nothing_of_a_file_unchanged_or_gone(tmp_path: Path) -> None:
    sweep_file, recipe_file = _files(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    kept = keep_copies(sweep_file, load_sweep(sweep_file), [], state)
    assert edited_since(kept.originals) == []
    recipe_file.unlink()  # a submitted job's working directory, gone
    assert edited_since(kept.originals) == []


def test_a_mapping_keeps_its_yaml_and_a_sweep_without_text_is_refused(tmp_path: Path) -> None:
    from scalesweep.orchestrator.spec.files import load_mapping
    from scalesweep.orchestrator.spec.load import sweep_of

    sweep = sweep_of(load_mapping(SWEEPS / "smoke.yaml"), "<mapping>")
    kept = keep_copies(None, sweep, [], tmp_path, "name: smoke\n")
    assert kept.sweep.read_text() == "name: smoke\n" and kept.originals == {}
    with pytest.raises(ValueError, match="no text to keep"):
        keep_copies(None, sweep, [], tmp_path)
