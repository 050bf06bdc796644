"""``python -m tests.support.edit_at_ray_start FILE NEW [FILE NEW ...] -- ARGS``: the CLI's
``scalesweep ARGS``, each FILE given NEW's text the moment the command connects to Ray (its
``launch.run.connect_ray`` is called): after the sweep was loaded and validated, before Ray,
the parent run and the sweep directory exist. Writes ``edited`` beside the first FILE once done,
so the test knows the edit happened inside that window (tests/integration/test_sweep_copy_e2e.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from scalesweep.orchestrator.cli import main
from scalesweep.orchestrator.launch import run as launch_run


def edit_at_ray_start(edits: list[tuple[Path, str]]) -> None:
    real = launch_run.connect_ray

    def connect_after_editing(address: str | None, verbose: bool) -> None:
        for path, text in edits:
            path.write_text(text, encoding="utf-8")
        (edits[0][0].parent / "edited").touch()
        real(address, verbose)

    launch_run.connect_ray = connect_after_editing


if __name__ == "__main__":
    cut = sys.argv.index("--")
    pairs = sys.argv[1:cut]
    edit_at_ray_start([(Path(f), Path(new).read_text(encoding="utf-8"))
                       for f, new in zip(pairs[::2], pairs[1::2], strict=True)])
    sys.exit(main(sys.argv[cut + 1:]))
