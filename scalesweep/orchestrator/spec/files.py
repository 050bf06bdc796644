"""Reading user files safely: size cap, strict UTF-8, YAML without object construction."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from scalesweep.orchestrator.spec.errors import InputError, Problem

#: a sweep or recipe file is a few KB; anything this large is a mistake (or an attack)
MAX_FILE_BYTES = 2 * 1024 * 1024
#: values after expanding YAML aliases; a few hundred bytes of nested aliases can expand to
#: billions ("billion laughs"), which would hang validation rather than memory
MAX_VALUES = 100_000


class DuplicateKeyError(yaml.MarkedYAMLError):
    pass


class _Loader(yaml.SafeLoader):
    """``SafeLoader`` (no object construction) that refuses a key given twice in one mapping:
    PyYAML would silently keep the last, e.g. dropping a whole ``axes:`` block."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.get(key)
            except TypeError:  # unhashable key: SafeConstructor reports it
                continue
            if first is not None:
                raise DuplicateKeyError(None, None, f"duplicate key {key!r} (first given on line "
                                        f"{first})", key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _count_values(data: Any, limit: int) -> int:
    """Values in ``data`` with aliases expanded, counting no further than ``limit``."""
    count, stack = 0, [data]
    while stack and count <= limit:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.values())
            stack.extend(item.keys())
        elif isinstance(item, list):
            stack.extend(item)
    return count


def read_text(path: str | Path) -> str:
    p = Path(path)
    src = str(path)
    if not p.exists():
        raise InputError(src, [Problem("", src, "file does not exist")])
    if not p.is_file():
        raise InputError(src, [Problem("", src, "is not a regular file")])
    size = p.stat().st_size
    if size > MAX_FILE_BYTES:
        raise InputError(src, [Problem("", f"{size} bytes", f"file is larger than {MAX_FILE_BYTES}")])
    raw = p.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        rule = f"file is not UTF-8 (bad byte at offset {exc.start})"
        raise InputError(src, [Problem("", raw[exc.start : exc.start + 4], rule)]) from None


def load_mapping(path: str | Path) -> dict[str, Any]:
    """A YAML or JSON file whose top level is a mapping. ``yaml.safe_load`` only: a
    ``!!python/object`` tag is an error, never an object."""
    src = str(path)
    text = read_text(path)
    try:
        if str(path).endswith(".json"):
            data = json.loads(text)
        else:
            data = yaml.load(text, Loader=_Loader)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise InputError(src, [Problem("", where, f"invalid JSON: {exc.msg}")]) from None
    except DuplicateKeyError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        raise InputError(src, [Problem("", where, f"invalid YAML: {exc.problem}")]) from None
    except yaml.constructor.ConstructorError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        rule = f"YAML tags that construct objects are not allowed ({exc.problem})"
        raise InputError(src, [Problem("", where, rule)]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(src, [Problem("", where, f"invalid YAML: {problem}")]) from None
    if data is None:
        raise InputError(src, [Problem("", None, "file is empty")])
    if _count_values(data, MAX_VALUES) > MAX_VALUES:
        raise InputError(src, [Problem("", f"> {MAX_VALUES} values", "the file expands to too "
                                        "many values (nested YAML aliases?)")])
    if not isinstance(data, dict):
        rule = f"top level must be a mapping, not {type(data).__name__}"
        raise InputError(src, [Problem("", _short(data), rule)])
    bad_keys = [k for k in data if not isinstance(k, str)]
    if bad_keys:
        raise InputError(src, [Problem(str(k), k, "keys must be strings") for k in bad_keys])
    return data


def _short(value: Any) -> Any:
    text = repr(value)
    return text if len(text) < 60 else text[:57] + "..."
