"""The envelope Tune hands a trial is one typed record (trainables/config.py ``TrialJob``): what
the sweep and the solve's search put in is what the trial driver reads back, and a key that no
field names is refused rather than set by no one or read by no one."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from scalesweep.orchestrator.plan.rows import make_plan
from scalesweep.orchestrator.spec.load import load_sweep
from scalesweep.trainables import trial_driver
from scalesweep.trainables.config import LoopHandover, TrialJob
from tests.support.helpers import SWEEPS


def _job(**changes: object) -> TrialJob:
    row = make_plan(load_sweep(str(SWEEPS / "smoke.yaml"))).rows[0]
    return TrialJob(trial=row.trial, storage_path="/sweeps/x/train", max_failures=0,
                    cpus_per_worker=2.0, gpus_per_worker=0.5, **changes)  # type: ignore[arg-type]


def test_a_job_is_what_it_was_after_tunes_json() -> None:
    job = _job(loop=LoopHandover(loop_config={"updates_per_epoch": 8, "global_batch": 32},
                                 wall_offset=1.5, resumed_report={"update": 16.0}))
    config = json.loads(json.dumps({"trial_config": job.to_config()}))  # as Tune keeps it
    assert TrialJob.model_validate(config["trial_config"]) == job
    assert TrialJob.name_in(config) == job.trial.name
    # the driver reserves what the job asks for: a simulate trial's one process, 2 CPUs
    (bundle,) = trial_driver.resources(config).bundles
    assert bundle == {"CPU": 2.0}


@pytest.mark.parametrize("key", ["memory_per_worker_gb", "checkpoints_to_keep"])
def test_a_key_no_field_names_is_refused(key: str) -> None:
    config = {**_job().to_config(), key: 1}
    with pytest.raises(ValidationError, match=key):
        TrialJob.model_validate(config)
