"""Reading user files safely: size cap, strict UTF-8, YAML without object construction, and
numbers as people write them.

Every YAML the user gives (a sweep file, a recipe, a ``--set`` value, the API's ``set=``) goes
through one loader, ``_Loader``; what we write for it to read back goes through ``_Dumper``,
which shares its resolver."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from scalesweep.orchestrator.spec.errors import InputError, Problem

#: a sweep or recipe file is a few KB; anything this large is a mistake (or an attack)
MAX_FILE_BYTES = 2 * 1024 * 1024
#: values after expanding YAML aliases; a few hundred bytes of nested aliases can expand to
#: billions ("billion laughs"), which would hang validation rather than memory
MAX_VALUES = 100_000


FLOAT_TAG = "tag:yaml.org,2002:float"
#: YAML 1.2's float (a dot or an exponent, so that integers stay integers) with YAML 1.1's
#: extras kept (``1_000.5``, base 60): YAML 1.1, PyYAML's, reads ``1e-3`` (no dot) and
#: ``1.5e3`` (no exponent sign) as strings, so ``lr: 1e-3`` would fail as "not a number"
FLOAT_12 = re.compile(r"""^(?:
    [-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?    # 1.5  1.  1.5e3  1_000.5
  | [-+]?[0-9][0-9_]*[eE][-+]?[0-9]+                  # 1e-3  2E-2  1e+4
  | [-+]?\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?           # .5  -.5  .5e-3
  | [-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*       # 190:20:30.15 (YAML 1.1's base 60)
  | [-+]?\.(?:inf|Inf|INF)
  | \.(?:nan|NaN|NAN)
)$""", re.VERBOSE)
_FLOAT_FIRST = "-+0123456789."

Resolvers = dict[str | None, list[tuple[str, re.Pattern[str]]]]


def _with_float_12(resolvers: Resolvers) -> Resolvers:
    """``resolvers`` (a SafeLoader's or SafeDumper's) with its float rule replaced by
    ``FLOAT_12``, first for its characters so that no other rule sees a float before it."""
    out = {ch: [(tag, rx) for tag, rx in rules if tag != FLOAT_TAG]
           for ch, rules in resolvers.items()}
    for ch in _FLOAT_FIRST:
        out[ch] = [(FLOAT_TAG, FLOAT_12), *out.get(ch, [])]
    return out


class DuplicateKeyError(yaml.MarkedYAMLError):
    pass


class _Dumper(yaml.SafeDumper):
    """``SafeDumper`` with the loader's float rule: a string that would read back as a number
    (``"1e-3"``) is written quoted, so that what we write reads back as itself."""

    yaml_implicit_resolvers = _with_float_12(yaml.SafeDumper.yaml_implicit_resolvers)


class _Loader(yaml.SafeLoader):
    """``SafeLoader`` (no object construction) that refuses a key given twice in one mapping:
    PyYAML would silently keep the last, e.g. dropping a whole ``axes:`` block. Floats as
    YAML 1.2 reads them (``FLOAT_12``); booleans, nulls and integers as YAML 1.1 (``on``/``off``
    stay booleans)."""

    yaml_implicit_resolvers = _with_float_12(yaml.SafeLoader.yaml_implicit_resolvers)

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


def parse_yaml(text: str) -> Any:
    """One YAML value given inline (a ``--set`` value), read as a file is: the same floats and
    checks. Raises ``yaml.YAMLError``."""
    return yaml.load(text, Loader=_Loader)


def dump_yaml(data: Any, **options: Any) -> str:
    """``data`` as YAML that ``_Loader`` reads back as ``data``; ``options`` as ``yaml.dump``'s."""
    return str(yaml.dump(data, Dumper=_Dumper, **options))


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
    """A YAML or JSON file whose top level is a mapping. YAML through ``_Loader``, safe: a
    ``!!python/object`` tag is an error, never an object."""
    return mapping_of(read_text(path), path)


def mapping_of(text: str, path: str | Path) -> dict[str, Any]:
    """``text``, the file at ``path`` as ``read_text`` read it, parsed as ``load_mapping``
    does: for a caller that keeps the very text it validated (a run's copy of its sweep)."""
    src = str(path)
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
