"""``SweepSource``: a validated sweep and where it came from (its file and overrides, or the
YAML of the mapping it was given as), which a run copies into its sweep directory for
``resume``. The record the use cases that run a sweep take; ``study.Study`` adds its methods."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scalesweep.orchestrator.spec.load import Sweep


@dataclass(frozen=True, eq=False)
class SweepSource:
    #: the sweep file; None for a sweep given as a mapping
    path: Path | None
    #: the ``--set KEY=VALUE`` overrides, in their order
    overrides: tuple[str, ...]
    #: the validated sweep (scalesweep.orchestrator.spec.load.Sweep)
    sweep: Sweep = field(repr=False)
    #: a sweep given as a mapping: as a file would hold it (YAML), the copy a run keeps
    text: str | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        """The study's name: its MLflow experiment."""
        return str(self.sweep.spec.name)
