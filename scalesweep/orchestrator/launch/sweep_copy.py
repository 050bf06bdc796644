"""The sweep file and recipe a sweep (or a solve) keeps in its state directory for ``resume``:
the text that was validated when it started, held in memory since (``Sweep.text``,
``Recipe.text``), never the file read again from disk. An edit made while Ray starts or the
parent run is made therefore cannot become what a later ``resume`` runs; ``resume`` says so
when the file on disk no longer matches the copy it runs (:func:`edited_since`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from scalesweep.orchestrator.spec.load import Sweep
from scalesweep.orchestrator.tracking import atomic_file

SWEEP_COPY = "sweep.yaml"
#: the state's key for {copy: the file it was made from} (``resume`` compares the two)
ORIGINALS_KEY = "originals"


@dataclass(frozen=True)
class Kept:
    #: the sweep file's copy in the state directory
    sweep: Path
    #: the overrides, with one more that points at the recipe's copy
    overrides: list[str]
    #: each copy's path -> the path of the file it was loaded from (none for a mapping)
    originals: dict[str, str] = field(default_factory=dict)


def keep_copies(source: str | Path | None, sweep: Sweep, overrides: list[str], state_dir: Path,
                text: str | None = None) -> Kept:
    """The sweep file's text (and its recipe's) as validated, written into ``state_dir``:
    ``source`` is the file it was loaded from, or None for a sweep given as a mapping, whose
    ``text`` (its YAML) is its copy."""
    kept = sweep.text if sweep.text is not None else text
    if kept is None:
        raise ValueError(f"sweep {sweep.source}: no text to keep; load it with load_sweep "
                         "(a mapping's sweep needs its YAML as text)")
    copy = state_dir / SWEEP_COPY
    atomic_file.write_text(copy, kept)
    originals = {} if source is None else {str(copy): str(Path(source).resolve())}
    saved = list(overrides)
    recipe = sweep.recipe
    if recipe is not None:
        if recipe.text is None:
            raise ValueError(f"recipe {recipe.source}: no text to keep; read it with read_recipe")
        recipe_copy = state_dir / f"recipe{Path(recipe.source).suffix}"
        atomic_file.write_text(recipe_copy, recipe.text)
        originals[str(recipe_copy)] = str(Path(recipe.source).resolve())
        saved.append(f"recipe={recipe_copy}")
    return Kept(copy, saved, originals)


def edited_since(originals: Mapping[str, str]) -> list[str]:
    """A line for each file on disk that no longer holds what its copy holds (``originals``:
    copy -> original, as ``Kept`` has them): resume runs the copy, and says which."""
    lines = []
    for copy, original in originals.items():
        if _differs(Path(original), Path(copy)):
            lines.append(f"note: {original} differs from {copy}, the copy this resume runs (the "
                         "file as validated when the sweep started); an edit made since runs only "
                         "in a new sweep")
    return lines


def _differs(original: Path, copy: Path) -> bool:
    try:
        return original.read_bytes() != copy.read_bytes()
    except OSError:  # the original gone (a submitted job's working directory): nothing to compare
        return False
