"""Input errors: every problem names its field path, the value and the rule it breaks."""

from __future__ import annotations

import reprlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MAX_SHOWN_VALUE = 80
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = MAX_SHOWN_VALUE
_REPR.maxlevel = 3


@dataclass(frozen=True)
class Problem:
    path: str  # dotted field path, e.g. "axes.world_size[1]"
    value: Any
    rule: str

    def __str__(self) -> str:
        shown = _REPR.repr(self.value)  # bounded: the value may be huge or deeply nested
        if len(shown) > MAX_SHOWN_VALUE:
            shown = shown[: MAX_SHOWN_VALUE - 3] + "..."
        where = self.path or "<file>"
        return f"{where} = {shown}: {self.rule}"


class InputError(Exception):
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
