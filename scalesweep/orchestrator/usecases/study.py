"""``load`` and ``plan``: a sweep file (or a mapping of one) validated into a :class:`Study`,
and its trials, one plan row each, as ``scalesweep plan`` shows them."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scalesweep.orchestrator.spec.errors import InputError, Problem
from scalesweep.orchestrator.usecases.defaults import optional_str, ray_of_this_call
from scalesweep.orchestrator.usecases.sweep_source import SweepSource

if TYPE_CHECKING:
    import pandas as pd

    from scalesweep.orchestrator.plan.rows import Plan
    from scalesweep.orchestrator.spec.load import Sweep
    from scalesweep.orchestrator.usecases.progress import Progress
    from scalesweep.orchestrator.usecases.results import Result

#: how a sweep given as a mapping is named in its problems (and anchored: its relative paths
#: are the current directory's)
MAPPING_SOURCE = "<mapping>"


@dataclass(frozen=True, eq=False)
class Study(SweepSource):
    """A sweep, validated with its overrides: what ``scalesweep plan`` and ``scalesweep run``
    take from the command line. Made by :func:`load`; nothing has started yet, and what
    :meth:`run` runs is this validated sweep, not the file read again.

    >>> study = scalesweep.load("sweeps/smoke.yaml", set={"axes.scaling_rule": ["none"]})
    >>> study.name, len(study.plan())
    ('smoke', 2)
    """

    def plan(self, address: str | None = None) -> pd.DataFrame:
        """One row per trial, in plan order: the columns and values ``scalesweep plan --json``
        prints (docs/design.md §4.3). ``address``: plan for that Ray cluster's resources
        (``feasible``/``reason``), as ``plan --address``.

        >>> study.plan()[["name", "world_size", "peak_lr", "feasible"]]
        """
        from scalesweep.orchestrator.usecases.tables import frame

        address = optional_str("address", address)
        with ray_of_this_call(address is not None):
            records = plan_records(plan(self.sweep, address))
        return frame(records)  # as the CLI prints them: JSON's values

    def run(self, address: str | None = None, tracking_uri: str | None = None, *,
            summary_json: str | Path | None = None, verbose: bool = False,
            report: bool | str | Path = True, progress: Progress | None = None) -> Result:
        """Run the sweep as ``scalesweep run`` does: Ray Tune trials tracked in MLflow, the
        report written and logged on the parent run. Nothing is printed: progress lines go to
        ``progress`` (default: the ``scalesweep`` logger, INFO). ``address``: a Ray cluster
        (``auto``, ``host:port``, ``ray://host:10001``), else ``RAY_ADDRESS``, else a local
        Ray of this call's own (shut down at the end); ``tracking_uri``: else
        ``MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db``; ``summary_json``: also write the
        summary JSON there (``--summary-json``); ``report``: its directory, True for
        ``reports/<study>/`` (as the CLI), False for none (``--no-report``;
        ``Result.report_dir`` is None). Input problems raise ``InputError`` before anything
        starts; a failed trial does not raise: its row says ``status == "failed"``
        (``Result.failed``).

        >>> result = study.run(tracking_uri="sqlite:///mlflow.db")
        >>> result.arms[["arm", "n_seeds", "epochs_to_target_median"]]
        """
        from scalesweep.orchestrator.usecases.defaults import tracking_uri_of
        from scalesweep.orchestrator.usecases.progress import logged
        from scalesweep.orchestrator.usecases.results import from_outcome
        from scalesweep.orchestrator.usecases.run import report_dir_for, run_study, write_report

        uri = tracking_uri_of(optional_str("tracking_uri", tracking_uri))
        address = optional_str("address", address)
        out_dir = report_dir_for(self.name, report)
        progress = progress or logged()
        with ray_of_this_call(True):
            outcome = run_study(self, address=address, tracking_uri=uri,
                                summary_json=None if summary_json is None else Path(summary_json),
                                verbose=verbose, progress=progress)
            made = write_report(outcome, out_dir) if out_dir is not None else None
        if made is not None and made.problem is not None:
            progress.warn(made.problem)
        return from_outcome(outcome, None if made is None else made.out_dir)


def load(source: str | Path | Mapping[str, Any], set: Mapping[str, Any] | None = None) -> Study:
    """The sweep file at ``source`` (or ``source`` itself, a mapping of what a sweep file
    holds) with ``set``'s overrides, validated: a :class:`Study`.

    ``set`` maps dotted paths of the sweep file to values, as ``--set KEY=VALUE`` on the
    command line (each value is written as YAML for the same loader): ``{"training.epochs": 2,
    "axes.world_size": [2]}`` is ``--set training.epochs=2 --set axes.world_size=[2]``. A
    mapping is read as its YAML would be read from a file; its relative paths (a recipe) are
    the current directory's. Every problem of the file, the overrides or the plan raises one
    ``InputError`` (scalesweep.orchestrator.spec.errors), each problem naming its field, value
    and rule.

    >>> import scalesweep
    >>> study = scalesweep.load("sweeps/smoke.yaml", set={"training.epochs": 2})
    """
    from scalesweep.orchestrator.spec.load import load_sweep, sweep_of

    overrides = tuple(overrides_of(set))
    if isinstance(source, Mapping):
        data, text = _as_file_reads_it(source)
        return Study(path=None, overrides=overrides, sweep=sweep_of(data, MAPPING_SOURCE, overrides),
                     text=text)
    if not isinstance(source, str | Path):
        raise InputError("scalesweep.load", [Problem("source", source, "must be a path (str or "
                                                     "pathlib.Path) or a mapping")])
    return Study(path=Path(source), overrides=overrides, sweep=load_sweep(source, overrides))


def plan(sweep: Sweep, address: str | None = None) -> Plan:
    """The sweep's trials, for this machine or (``address``) that Ray cluster's resources: what
    ``plan`` shows and ``Study.plan`` returns."""
    from scalesweep.orchestrator.plan.rows import make_plan

    cluster = None
    if address:
        import ray

        from scalesweep.orchestrator.cluster.ray_auth import enable_token_auth
        from scalesweep.orchestrator.plan.cluster import connected_cluster

        enable_token_auth(address)
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
        cluster = connected_cluster()
    return make_plan(sweep, cluster)


def plan_records(plan: Plan) -> list[dict[str, Any]]:
    """``plan --json``'s objects (docs/design.md §4.3): each row's fields, then its regime."""
    from scalesweep.orchestrator.plan.regime import regimes

    regime = regimes(plan)
    return [{**r.to_json(), "regime": regime[r.name]} for r in plan.rows]


def _as_file_reads_it(source: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The mapping written as YAML and read back by the sweep file's loader: the values a file
    with the same text would give (and the text, which a run keeps as its sweep file)."""
    import yaml

    from scalesweep.orchestrator.spec.files import dump_yaml, parse_yaml

    bad = [k for k in source if not isinstance(k, str)]
    if bad:
        raise InputError("scalesweep.load", [Problem(repr(k), k, "keys must be strings") for k in bad])
    try:
        text = dump_yaml(dict(source), sort_keys=False, allow_unicode=True)
    except yaml.YAMLError:
        raise InputError("scalesweep.load", [Problem("source", "<mapping>", "must hold plain YAML "
                                                     "values: None, bool, int, float, str, and "
                                                     "lists and mappings of them")]) from None
    return dict(parse_yaml(text)), text


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


def load_file(path: str | Path, overrides: Sequence[str] = ()) -> Study:
    """The sweep file at ``path`` with the CLI's ``--set KEY=VALUE`` overrides, validated."""
    from scalesweep.orchestrator.spec.load import load_sweep

    return Study(path=Path(path), overrides=tuple(overrides), sweep=load_sweep(path, overrides))
