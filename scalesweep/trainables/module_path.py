"""What a sweep file names by module path (``"package.module:function"``: a workload's factory,
a ``train_loop``), imported one way, with one hint for the commonest mistake: a package in the
working directory that is not on the Python path (the console script ``scalesweep`` does not
put it there; ``python -m scalesweep`` does).

The planner imports each path once while it loads the sweep file, so a path that names nothing
callable is refused with exit 2 (field, value, rule) before anything starts; the trial imports
it again where it runs.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scalesweep.errors import ScalesweepError

FORM = "package.module:function"


class ModulePathError(ScalesweepError, ValueError):
    """A module path that names no importable callable; the message is the rule it breaks."""


def import_callable(path: str, expected: str) -> Callable[..., Any]:
    """The callable ``path`` (``"package.module:function"``) names; :class:`ModulePathError`
    otherwise. ``expected``: what the callable is for, as the message names it
    (``"train_loop_per_worker(config)"``)."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ModulePathError(f"must be '{FORM}', but got {path!r}")
    if module_name.endswith(".py") or "/" in module_name or "\\" in module_name:
        dotted = module_name.removesuffix(".py").replace("\\", "/").strip("/").replace("/", ".")
        raise ModulePathError(f"{module_name!r} is a file: give the module it is, imported "
                              f"from a directory on the Python path: '{dotted}:{attr}', run from "
                              f"the directory that holds {dotted.split('.')[0]!r} with "
                              "`python -m scalesweep` (or PYTHONPATH=.)")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # a user's module may raise anything while it is imported
        raise ModulePathError(f"cannot import module {module_name!r} ({type(exc).__name__}: "
                              f"{exc}){import_hint(module_name, exc)}") from None
    found = getattr(module, attr, None)
    if found is None:
        raise ModulePathError(f"module {module_name!r} has no attribute {attr!r}")
    if not callable(found):
        raise ModulePathError(f"{path!r} is a {type(found).__name__}, not a callable {expected}")
    function: Callable[..., Any] = found
    return function


def import_hint(module_name: str, exc: BaseException) -> str:
    """What to do when ``module_name``'s package was not found: where it is in the working
    directory, how to put that on the path; otherwise how to install it. Nothing when the
    module was found and failed on an import of its own."""
    top = module_name.split(".")[0]
    if not isinstance(exc, ModuleNotFoundError) or (exc.name or top).split(".")[0] != top:
        return ""
    here = Path.cwd()
    on_path = any(Path(p or ".").resolve() == here.resolve() for p in sys.path)
    if on_path or not ((here / f"{top}.py").is_file() or (here / top).is_dir()):
        return (f"; is {top!r} installed (pip install -e .), or its directory on the Python path "
                "(PYTHONPATH)?")
    return (f"; {top!r} is in the working directory {str(here)!r}, which is not on the Python "
            "path: run `python -m scalesweep ...` from there, or set PYTHONPATH=. (the "
            "`scalesweep` command does not add it; from Python, sys.path.insert(0, '.'); Ray's "
            "workers get the driver's directory)")
