"""``scalesweep.predict``: what ``scalesweep predict`` computes, by the same functions
(orchestrator/commands/predict.py)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from scalesweep.orchestrator.spec.errors import InputError, Problem

if TYPE_CHECKING:
    import pandas as pd


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
    import pandas as pd

    from scalesweep.orchestrator.commands._common import tracking_uri as resolve_uri
    from scalesweep.orchestrator.commands.predict import prediction_records, study_prediction
    from scalesweep.orchestrator.commands.predict import record as record_prediction

    for name, value in (("experiment", experiment), ("run_id", run_id), ("tracking_uri", tracking_uri)):
        if value is not None and (not isinstance(value, str) or not value):
            raise InputError("scalesweep.predict", [Problem(name, value, "must be a non-empty string")])
    if not isinstance(record, bool):
        raise InputError("scalesweep.predict", [Problem("record", record, "must be True or False")])
    from mlflow.exceptions import MlflowException

    uri = resolve_uri(tracking_uri)
    try:
        sp = study_prediction(uri, experiment=experiment, run_id=run_id, world_size=world_size,
                              spell=str)
    except MlflowException as e:
        if run_id is None or getattr(e, "error_code", "") != "RESOURCE_DOES_NOT_EXIST":
            raise
        raise InputError("scalesweep.predict", [Problem("run_id", run_id, f"no such MLflow run at "
                                                        f"{uri}")]) from None
    frame = pd.DataFrame(json.loads(json.dumps(prediction_records(sp), default=str)))
    frame.attrs.update(experiment=sp.experiment, parent_run_id=sp.parent_run_id,
                       world_size=sp.world_size, target=sp.target)
    if record:
        frame.attrs["prediction_id"] = record_prediction(uri, sp)
    return frame
