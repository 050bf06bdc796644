"""``recommend``: the lr factor and warmup at a world size M, from a finished study at N alone,
with an interval on the epochs ratio M over N they are predicted to reach and the model each
number came from (docs/beyond.md, "recommend"); recorded on the study's parent run for
``predict --ledger`` only when the caller asks."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from scalesweep.orchestrator.spec.errors import InputError, Problem
from scalesweep.orchestrator.usecases.defaults import keyword
from scalesweep.science.recommend.recommendation import Recommendation


def check_arguments(command: str, *, experiment: str | None, run_id: str | None,
                    world_size: object, spell: Callable[[str], str] = keyword) -> None:
    """Exit-2 problems with the arguments, before any store is read."""
    if not (experiment or run_id):
        raise InputError(command, [Problem(spell("experiment"), None, "name the study (or "
                                           f"{spell('run_id')} its parent run)")])
    if experiment and run_id:
        raise InputError(command, [Problem(spell("experiment"), experiment, "give exactly one of "
                                           f"{spell('experiment')} and {spell('run_id')}")])
    if world_size is None:
        raise InputError(command, [Problem(spell("world_size"), None, "is needed to recommend")])
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise InputError(spell("world_size"), [Problem(spell("world_size"), world_size,
                                                       "must be an integer")])
    if world_size < 1:
        raise InputError(spell("world_size"), [Problem(spell("world_size"), world_size,
                                                       "must be at least 1")])


def study_recommendation(uri: str, *, experiment: str | None, run_id: str | None, world_size: int,
                         spell: Callable[[str], str] = keyword) -> Recommendation:
    """The recipe at ``world_size`` from the study of ``experiment`` (its latest) or of parent
    run ``run_id``. Every refusal is an ``InputError`` naming the argument, as ``spell`` writes
    it (the CLI passes its flags), its value and the rule."""
    from scalesweep.orchestrator.usecases.stores import check_readable

    check_arguments("recommend", experiment=experiment, run_id=run_id, world_size=world_size,
                    spell=spell)
    which = spell("experiment") if experiment else spell("run_id")
    check_readable(uri)  # before the dashboards' imports (MLflow, pandas): a wrong URI costs little
    from scalesweep.dashboards.recommend.inputs import RecommendRefused, load_recommendation
    from scalesweep.orchestrator.usecases.results import study_lookup

    try:
        with study_lookup("recommend", uri, experiment=experiment, run_id=run_id, spell=spell):
            return load_recommendation(uri, experiment=experiment, parent_run_id=run_id,
                                       world_size=world_size)
    except RecommendRefused as e:
        raise InputError("recommend", [Problem(which, experiment or run_id, r)
                                       for r in e.reasons]) from e
    raise AssertionError("unreachable")  # mypy: the with block returns or raises


def record_on_parent(uri: str, rec: Recommendation) -> str:
    """The recommendation recorded on the study's parent run, for the ledger; its id."""
    from scalesweep.orchestrator.tracking.predictions import record_recommendation

    return record_recommendation(uri, rec)


def recommend(experiment: str | None = None, *, world_size: int, run_id: str | None = None,
              tracking_uri: str | None = None, record: bool = False) -> Recommendation:
    """The lr factor (and lr) and warmup at ``world_size`` M from the study (the latest of
    ``experiment``, or parent run ``run_id``) at N, each with its interval or range and the
    model it came from, and the epochs ratio M over N the recipe is predicted to reach
    (``.recipe``; ``.as_json()`` is ``scalesweep recommend --json``). ``record=True`` records it
    on the study's parent run for ``predict --ledger``, as the CLI does unless ``--no-record``;
its id is then ``.prediction_id``.
    A study that cannot support one raises ``InputError`` with the reasons.

    >>> scalesweep.recommend("smoke", world_size=16, tracking_uri="sqlite:///mlflow.db").lr
    """
    from scalesweep.orchestrator.usecases.defaults import tracking_uri_of

    for name, value in (("experiment", experiment), ("run_id", run_id), ("tracking_uri", tracking_uri)):
        if value is not None and (not isinstance(value, str) or not value):
            raise InputError("scalesweep.recommend", [Problem(name, value, "must be a non-empty string")])
    if not isinstance(record, bool):
        raise InputError("scalesweep.recommend", [Problem("record", record, "must be True or False")])
    uri = tracking_uri_of(tracking_uri)
    rec = study_recommendation(uri, experiment=experiment, run_id=run_id, world_size=world_size)
    if record:
        return dataclasses.replace(rec, prediction_id=record_on_parent(uri, rec))
    return rec
