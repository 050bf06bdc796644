"""The one error vocabulary of scalesweep, at the bottom layer so that the pure math
(``scalesweep.science``) can raise and return it without importing anything above it:
``Problem`` (one bad value: where, what, which rule) and ``ScalesweepError``, the root every
error of ours derives from, so a caller can catch ours apart from Python's and the libraries'."""

from __future__ import annotations

import reprlib
from dataclasses import dataclass
from typing import Any

MAX_SHOWN_VALUE = 80
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = MAX_SHOWN_VALUE
_REPR.maxlevel = 3


class ScalesweepError(Exception):
    """Root of every error scalesweep raises on purpose."""


@dataclass(frozen=True)
class Problem:
    """One problem with one value; a layer above prefixes ``path`` with its own path."""

    path: str  # dotted field path, e.g. "axes.world_size[1]"; "" for the whole file
    value: Any
    rule: str

    @property
    def field(self) -> str:
        # the name science's schedule and scaling validators read; the same as path
        return self.path

    def __str__(self) -> str:
        shown = _REPR.repr(self.value)  # bounded: the value may be huge or deeply nested
        if len(shown) > MAX_SHOWN_VALUE:
            shown = shown[: MAX_SHOWN_VALUE - 3] + "..."
        where = self.path or "<file>"
        return f"{where} = {shown}: {self.rule}"
