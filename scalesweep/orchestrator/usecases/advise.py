"""``advise``: the critical batch, the noise scale, and the lr and warmup rules to use at a
world size, from a study in MLflow, as a typed record (``dashboards.advice.Advice``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from scalesweep.orchestrator.spec.errors import InputError, Problem
from scalesweep.orchestrator.usecases.defaults import keyword

if TYPE_CHECKING:
    from scalesweep.dashboards.advice import Advice


def advise(experiment: str | None = None, *, run_id: str | None = None, world_size: int | None = None,
           tracking_uri: str | None = None, spell: Callable[[str], str] = keyword) -> Advice:
    """The advice for ``world_size`` (default: the largest the study measured) from the latest
    study of ``experiment`` or the one of parent run ``run_id``: the critical-batch fit per
    arm, the late noise scale, the recommended rule (``.recommendation``) and the measured arms
    at that world size ranked by decision, then by their interval's upper end (``.decided``).
    ``spell`` names the arguments in problems (the CLI passes its flags)."""
    from scalesweep.orchestrator.usecases.defaults import tracking_uri_of
    from scalesweep.orchestrator.usecases.stores import check_readable

    for name, value in (("experiment", experiment), ("run_id", run_id), ("tracking_uri", tracking_uri)):
        if value is not None and (not isinstance(value, str) or not value):
            raise InputError("advise", [Problem(spell(name), value, "must be a non-empty string")])
    if (experiment is None) == (run_id is None):
        raise InputError("advise", [Problem(spell("experiment"), experiment, "give exactly one of "
                                            f"{spell('experiment')} and {spell('run_id')}")])
    if world_size is not None:
        rule = ("must be an integer" if isinstance(world_size, bool) or not isinstance(world_size, int)
                else "must be at least 1" if world_size < 1 else None)
        if rule:
            raise InputError(spell("world_size"), [Problem(spell("world_size"), world_size, rule)])
    uri = tracking_uri_of(tracking_uri)
    check_readable(uri)  # before the dashboards' imports (MLflow, pandas): a wrong URI costs little
    from scalesweep.dashboards.advice import load_advice
    from scalesweep.orchestrator.usecases.results import study_lookup

    with study_lookup("advise", uri, experiment=experiment, run_id=run_id, spell=spell):
        return load_advice(uri, experiment=experiment, parent_run_id=run_id, world_size=world_size)
