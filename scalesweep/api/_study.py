"""``scalesweep.load`` and the ``Study`` it returns: a validated sweep, planned and run as the
``plan`` and ``run`` commands do it (the same functions, orchestrator/commands/)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scalesweep.orchestrator.spec.errors import InputError, Problem

if TYPE_CHECKING:
    import pandas as pd

    from scalesweep.api._results import Result
    from scalesweep.orchestrator.spec.load import Sweep


@dataclass(frozen=True, eq=False)
class Study:
    """A sweep file, validated with its overrides: what ``scalesweep plan`` and ``scalesweep run``
    take from the command line. Made by :func:`load`; nothing has started yet.

    >>> study = scalesweep.load("sweeps/smoke.yaml", set={"axes.scaling_rule": ["none"]})
    >>> study.name, len(study.plan())
    ('smoke', 2)
    """

    #: the sweep file
    path: Path
    #: the ``--set KEY=VALUE`` overrides ``set`` stands for, in its order
    overrides: tuple[str, ...]
    #: the validated sweep (scalesweep.orchestrator.spec.load.Sweep)
    sweep: Sweep = field(repr=False)

    @property
    def name(self) -> str:
        """The study's name: its MLflow experiment."""
        return str(self.sweep.spec.name)

    def plan(self, address: str | None = None) -> pd.DataFrame:
        """One row per trial, in plan order: the columns and values ``scalesweep plan --json``
        prints (docs/design.md §4.3). ``address``: plan for that Ray cluster's resources
        (``feasible``/``reason``), as ``plan --address``.

        >>> study.plan()[["name", "world_size", "peak_lr", "feasible"]]
        """
        from scalesweep.api._results import frame
        from scalesweep.orchestrator.commands.plan import build_plan, plan_records

        with _ray_of_this_call(address is not None):
            records = plan_records(build_plan(self.sweep, address))
        return frame(records)  # as the CLI prints them: JSON's values

    def run(self, address: str | None = None, tracking_uri: str | None = None, *,
            summary_json: str | Path | None = None, verbose: bool = False,
            report: bool = True) -> Result:
        """Run the sweep as ``scalesweep run`` does: Ray Tune trials tracked in MLflow, the
        summary table and arms printed, the report written to ``reports/<study>/`` and logged
        on the parent run. ``address``: a Ray cluster (``auto``, ``host:port``,
        ``ray://host:10001``), else ``RAY_ADDRESS``, else a local Ray of this call's own (shut
        down at the end); ``tracking_uri``: else ``MLFLOW_TRACKING_URI``, else
        ``sqlite:///mlflow.db``; ``summary_json``: also write the summary JSON there
        (``--summary-json``); ``report=False``: no report (``--no-report``;
        ``Result.report_dir`` is None). Input problems raise ``InputError`` before anything starts; a
        failed trial does not raise: its row says ``status == "failed"`` (``Result.failed``).

        >>> result = study.run(tracking_uri="sqlite:///mlflow.db")
        >>> result.arms[["arm", "n_seeds", "epochs_to_target_median"]]
        """
        from scalesweep.api._results import from_outcome
        from scalesweep.orchestrator.commands._common import conclude
        from scalesweep.orchestrator.commands._common import tracking_uri as resolve_uri
        from scalesweep.orchestrator.commands.run import run_study

        uri = resolve_uri(_optional_str("tracking_uri", tracking_uri))
        address = _optional_str("address", address)
        with _ray_of_this_call(True):
            outcome = run_study(str(self.path), overrides=list(self.overrides), address=address,
                                tracking_uri=uri,
                                summary_json=None if summary_json is None else str(summary_json),
                                verbose=verbose)
            report_dir = conclude(outcome, report)
        return from_outcome(outcome, report_dir)


def load(path: str | Path, set: Mapping[str, Any] | None = None) -> Study:
    """The sweep file at ``path`` with ``set``'s overrides, validated: a :class:`Study`.

    ``set`` maps dotted paths of the sweep file to values, as ``--set KEY=VALUE`` on the
    command line (each value is written as YAML for the same loader): ``{"training.epochs": 2,
    "axes.world_size": [2]}`` is ``--set training.epochs=2 --set axes.world_size=[2]``. Every
    problem of the file, the overrides or the plan raises one ``InputError``
    (scalesweep.orchestrator.spec.errors), each problem naming its field, value and rule.

    >>> import scalesweep
    >>> study = scalesweep.load("sweeps/smoke.yaml", set={"training.epochs": 2})
    """
    from scalesweep.orchestrator.spec.load import load_sweep

    if not isinstance(path, str | Path):
        raise InputError("scalesweep.load", [Problem("path", path, "must be a str or a pathlib.Path")])
    overrides = tuple(overrides_of(set))
    return Study(path=Path(path), overrides=overrides, sweep=load_sweep(path, overrides))


def overrides_of(values: Mapping[str, Any] | None) -> list[str]:
    """``set``'s mapping as the CLI's ``KEY=VALUE`` strings, each value as one line of YAML that
    reads back as itself (a str that looks like a number, ``"1e-3"``, quoted)."""
    import yaml

    from scalesweep.orchestrator.spec.files import dump_yaml

    if values is None:
        return []
    if not isinstance(values, Mapping):
        raise InputError("set", [Problem("set", values, "must be a mapping of dotted sweep-file "
                                         "keys to values, e.g. {'training.epochs': 2}")])
    out: list[str] = []
    problems: list[Problem] = []
    for key, value in values.items():
        if not isinstance(key, str) or not key.strip() or "=" in key:
            problems.append(Problem("set", key, "each key must be a dotted path of the sweep "
                                    "file, a non-empty string without '='"))
            continue
        if isinstance(value, float) and not math.isfinite(value):
            problems.append(Problem(f"set[{key!r}]", value, "must be a finite number"))
            continue
        try:
            text = dump_yaml(value, default_flow_style=True, width=math.inf,
                             allow_unicode=True, sort_keys=False)
        except yaml.YAMLError:
            problems.append(Problem(f"set[{key!r}]", value, "must be a plain YAML value: None, "
                                    "bool, int, float, str, or lists and mappings of them"))
            continue
        text = text.removesuffix("\n").removesuffix("\n...").strip()
        if "\n" in text:
            problems.append(Problem(f"set[{key!r}]", value, "must fit on one line as YAML"))
            continue
        out.append(f"{key}={text}")
    if problems:
        raise InputError("set", problems)
    return out


def _optional_str(name: str, value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise InputError(name, [Problem(name, value, "must be a string or None")])


@contextlib.contextmanager
def _ray_of_this_call(may_connect: bool) -> Iterator[None]:
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
