"""Input errors: every problem names its field path, the value and the rule it breaks.
``Problem`` and ``ScalesweepError`` live in ``scalesweep.errors`` (importable by science);
they are re-exported here for the spec layer."""

from __future__ import annotations

from collections.abc import Iterable

from scalesweep.errors import MAX_SHOWN_VALUE, Problem, ScalesweepError

__all__ = ["MAX_SHOWN_VALUE", "InputError", "Problem", "ScalesweepError", "join_path"]


class InputError(ScalesweepError):
    """Bad user input (exit code 2). Holds every problem found, not just the first."""

    def __init__(self, source: str, problems: Iterable[Problem]) -> None:
        self.source = source
        self.problems = list(problems)
        super().__init__(self.message())

    def message(self) -> str:
        n = len(self.problems)
        head = f"{self.source}: {n} problem{'s' if n != 1 else ''}"
        return "\n".join([head, *(f"  - {p}" for p in self.problems)])


def join_path(*parts: str | int) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part:
            out = f"{out}.{part}" if out else part
    return out
