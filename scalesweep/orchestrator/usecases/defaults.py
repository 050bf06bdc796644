"""What the use cases find when the caller does not say: the tracking URI, the Ray this call
may start; and the checks of the plain arguments a notebook passes."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from scalesweep.mlflow_names import DEFAULT_TRACKING_URI
from scalesweep.orchestrator.spec.errors import InputError, Problem


def tracking_uri_of(arg: str | None) -> str:
    """The tracking URI: ``arg``, else MLFLOW_TRACKING_URI, else the default; credentials in it
    move to the environment (tracking/credentials.py), so nothing we print or save holds them.
    A URI written wrong (a bare path, an unknown scheme) is an ``InputError`` here, before any
    sweep file is read; whether its store is there is asked later (tracking/store_check.py)."""
    from scalesweep.orchestrator.tracking import credentials, store_check

    uri = credentials.strip(arg or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI)
    rule = store_check.form_problem(uri)
    if rule is not None:
        raise InputError(store_check.SOURCE, [Problem(store_check.FIELD, uri, rule)])
    return uri


def keyword(name: str) -> str:
    """An argument spelt as the Python API names it (the CLI's commands pass their flags)."""
    return name


def optional_str(name: str, value: object) -> str | None:
    """``value`` when it is a string or None; else an ``InputError`` naming ``name``."""
    if value is None or isinstance(value, str):
        return value
    raise InputError(name, [Problem(name, value, "must be a string or None")])


@contextlib.contextmanager
def ray_of_this_call(may_connect: bool) -> Iterator[None]:
    """A Ray this call connects to ends with the call, as the CLI's process does; one that was
    there before is left as it was."""
    if not may_connect:
        yield
        return
    import ray

    before = ray.is_initialized()
    try:
        yield
    finally:
        if not before and ray.is_initialized():
            ray.shutdown()

