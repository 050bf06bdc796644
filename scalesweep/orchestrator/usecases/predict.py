"""``predict``: epochs to target at a world size a study did not run, per lr rule, with an
interval (docs/beyond.md, "Predict, then verify"); recorded on the study's parent run only
when the caller asks; the sweep that verifies it (``--verify``), and the ledger of every
recorded prediction against what was measured since (``--ledger``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scalesweep.mlflow_names import store_uri_for_mlflow
from scalesweep.orchestrator.spec.errors import InputError, Problem
from scalesweep.orchestrator.usecases.defaults import keyword

if TYPE_CHECKING:
    import pandas as pd

    from scalesweep.science.prediction.record import StudyPrediction
    from scalesweep.science.solve_record import Line


def study_prediction(uri: str, *, experiment: str | None, run_id: str | None, world_size: int | None,
                     spell: Callable[[str], str] = keyword) -> StudyPrediction:
    """Epochs to target at ``world_size`` per lr rule, for the study of ``experiment`` or of
    its parent ``run_id``. Every refusal is an ``InputError`` naming the argument, as ``spell``
    writes it (the CLI passes its flags), its value and the rule."""
    from scalesweep.orchestrator.usecases.stores import check_readable

    if not (experiment or run_id):
        raise InputError("predict", [Problem(spell("experiment"), None, "name the study (or "
                                             f"{spell('run_id')} its parent run), or list "
                                             "predictions with --ledger")])
    if world_size is None:
        raise InputError("predict", [Problem(spell("world_size"), None, "is needed to predict")])
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise InputError(spell("world_size"), [Problem(spell("world_size"), world_size,
                                                       "must be an integer")])
    if world_size < 1:
        raise InputError(spell("world_size"), [Problem(spell("world_size"), world_size,
                                                       "must be at least 1")])
    which = spell("experiment") if experiment else spell("run_id")
    check_readable(uri)  # before the dashboards' imports (MLflow, pandas): a wrong URI costs little
    from scalesweep.dashboards.prediction import load_prediction
    from scalesweep.orchestrator.usecases.results import study_lookup
    from scalesweep.science.prediction.epochs import PredictionRefused

    try:
        with study_lookup("predict", uri, experiment=experiment, run_id=run_id, spell=spell):
            sp = load_prediction(uri, experiment=experiment, parent_run_id=run_id, world_size=world_size)
    except PredictionRefused as e:
        raise InputError("predict", [Problem(which, experiment or run_id, r) for r in e.reasons]) from e
    if all(r.prediction is None for r in sp.rules):
        raise InputError("predict", [Problem(f"lr rule {r.rule}", f"{spell('world_size')} {world_size}", why)
                                     for r in sp.rules for why in r.refused])
    return sp


def prediction_records(sp: StudyPrediction) -> list[dict[str, Any]]:
    """``predict --json``'s objects: one per lr rule, each with the best lr at the world size."""
    return [r.as_json() | {"best_lr": sp.best_lr_json()} for r in sp.rules]


def record_on_parent(uri: str, sp: StudyPrediction) -> str:
    """The prediction recorded on the study's parent run, for the ledger; its id."""
    from scalesweep.orchestrator.tracking.predictions import record_prediction

    return record_prediction(uri, sp)


def predict(experiment: str | None = None, *, world_size: int, run_id: str | None = None,
            tracking_uri: str | None = None, record: bool = False) -> pd.DataFrame:
    """Epochs to target at ``world_size``, a world size the study (the latest of ``experiment``,
    or parent run ``run_id``) did not run, per lr rule, with an interval: one row per lr rule,
    the objects ``scalesweep predict --json`` prints (``best_lr`` in each). ``record=True``
    records the prediction on the study's parent run for ``predict --ledger``, as the CLI does
    unless ``--no-record``; its id is then ``frame.attrs["prediction_id"]``. A study that cannot
    support a prediction raises ``InputError`` with the reasons.

    >>> scalesweep.predict("smoke", world_size=8, tracking_uri="sqlite:///mlflow.db")
    """
    from scalesweep.orchestrator.usecases.defaults import tracking_uri_of
    from scalesweep.orchestrator.usecases.tables import frame

    for name, value in (("experiment", experiment), ("run_id", run_id), ("tracking_uri", tracking_uri)):
        if value is not None and (not isinstance(value, str) or not value):
            raise InputError("scalesweep.predict", [Problem(name, value, "must be a non-empty string")])
    if not isinstance(record, bool):
        raise InputError("scalesweep.predict", [Problem("record", record, "must be True or False")])
    uri = tracking_uri_of(tracking_uri)
    sp = study_prediction(uri, experiment=experiment, run_id=run_id, world_size=world_size)
    table = frame(prediction_records(sp))
    table.attrs.update(experiment=sp.experiment, parent_run_id=sp.parent_run_id,
                       world_size=sp.world_size, target=sp.target)
    if record:
        table.attrs["prediction_id"] = record_on_parent(uri, sp)
    return table


@dataclass(frozen=True)
class VerificationSweep:
    """``predict --verify``'s sweep: written where the caller said, and what it will run."""

    path: Path
    trials: int
    epochs: Any
    world_sizes: tuple[int, ...]
    rules: tuple[str, ...]
    #: how the study's own sweep file was found (its sweep directory's copy, or its tag)
    found_via: str


def write_verification(uri: str, sp: StudyPrediction, out: Path) -> VerificationSweep:
    """The smallest sweep that checks ``sp`` at its world size, from the study's own sweep
    file, written to ``out`` and planned: a sweep that does not plan is removed again and its
    problems raised (``InputError``)."""
    from mlflow.tracking import MlflowClient

    from scalesweep.orchestrator.launch.run import storage_root
    from scalesweep.orchestrator.launch.study_source import find_study_spec
    from scalesweep.orchestrator.plan.rows import make_plan
    from scalesweep.orchestrator.plan.verify_sweep import verification_spec, write_spec
    from scalesweep.orchestrator.spec.load import load_sweep

    tags = dict(MlflowClient(store_uri_for_mlflow(uri)).get_run(sp.parent_run_id).data.tags)
    source = find_study_spec(sp.parent_run_id, sp.experiment, tags, [storage_root()])
    rules = [r.rule for r in sp.rules if r.prediction is not None]
    ends = [r.prediction.ci[1] for r in sp.rules if r.prediction is not None]
    data = verification_spec(source, experiment=sp.experiment, world_size=sp.world_size,
                             rules=rules, target_value=sp.target,
                             interval_end=max(ends) if ends else None,
                             verifies=sp.parent_run_id)
    write_spec(data, out)
    try:
        plan = make_plan(load_sweep(out))
    except InputError:
        out.unlink()
        raise
    return VerificationSweep(path=out, trials=len(plan.rows),
                             epochs=(data.get("training") or {}).get("epochs"),
                             world_sizes=tuple(data["axes"]["world_size"]),
                             rules=tuple(data["axes"]["scaling_rule"]), found_via=source.how)


def ledger(uri: str, experiment: str | None = None, *, record: bool = False) -> list[Line]:
    """Every prediction recorded in the store (of ``experiment``, else of every experiment),
    scored against what its experiment holds now; ``record``: each outcome written beside its
    prediction (``predict --ledger`` does unless ``--no-record``)."""
    from scalesweep.orchestrator.usecases.stores import check_readable

    check_readable(uri)  # before the dashboards' imports (MLflow, pandas): a wrong URI costs little
    from scalesweep.dashboards.prediction_ledger import ledger_lines

    try:
        lines = ledger_lines(uri, experiment)
    except ValueError as e:
        raise InputError("predict --ledger", [Problem("--experiment", experiment, str(e))]) from e
    if record:
        from scalesweep.orchestrator.tracking.predictions import write_outcomes

        write_outcomes(uri, lines)
    return lines
