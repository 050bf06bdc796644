"""What a resolved settings block is, whichever block: a type name and its params in the type's
order, read as the dict ``{"type": ..., **params}`` it came from (``as_dict``), so code that read
the old dict reads the record unchanged. ``ScheduleSpec`` and ``OptimizerSpec`` are the two."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


class TypedParams(Mapping[str, Any]):
    """The mapping side of a frozen dataclass with fields ``type`` and ``param_items``."""

    type: str
    #: (param, value) in the order of the type's params; see ``params``
    param_items: tuple[tuple[str, Any], ...]

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.param_items)

    def as_dict(self) -> dict[str, Any]:
        return {"type": self.type, **self.params}

    def __getitem__(self, key: str) -> Any:
        return self.type if key == "type" else self.params[key]

    def __iter__(self) -> Iterator[str]:
        return iter(["type", *(k for k, _ in self.param_items)])

    def __len__(self) -> int:
        return 1 + len(self.param_items)

    def __hash__(self) -> int:
        return hash((self.type, self.param_items))
