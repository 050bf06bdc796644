"""The loop settings are one typed record from load on (spec/training.py): the layers merged
and judged once, each trial's read as attributes, a ramp axis's value only in its own trials."""

from __future__ import annotations

import math

import pytest

from scalesweep.orchestrator.plan.rows import make_plan
from scalesweep.orchestrator.spec.load import load_sweep
from scalesweep.orchestrator.spec.training import Training
from tests.support.helpers import SWEEPS


def test_the_smoke_sweeps_settings_are_its_file_over_the_defaults_typed() -> None:
    sweep = load_sweep(str(SWEEPS / "smoke.yaml"))
    assert sweep.training == Training(per_worker_batch=16, epochs=6.0, eval_every_epochs=0.5)
    assert type(sweep.training.epochs) is float and sweep.training.checkpoint_every is None
    # a recipe fills what the sweep leaves out: WeNet's batch and clip
    wenet = load_sweep(str(SWEEPS / "wenet_4v16.yaml"))
    assert wenet.training == Training(per_worker_batch=16, epochs=4.0, eval_every_epochs=0.125,
                                      grad_clip=5.0)
    assert wenet.base.origins["training.grad_clip"] == "recipes/wenet_conformer.yaml: grad_clip"


def test_updates_and_evals_follow_the_file() -> None:
    t = Training(per_worker_batch=16, epochs=6, eval_every_epochs=0.5)
    assert (t.total_updates(31), t.eval_every_at(31)) == (math.ceil(6 * 31), 16)  # round(15.5)
    # max_updates caps epochs; an update cadence wins over the epochs' one
    capped = Training(per_worker_batch=16, epochs=6, max_updates=100, eval_every=7)
    assert (capped.total_updates(31), capped.eval_every_at(31)) == (100, 7)
    assert Training(per_worker_batch=1, max_updates=9).total_updates(31) == 9
    # a ramp's stages count their own updates; the rest of the epochs run at the trial's pace
    assert t.total_updates(31, ramp_epochs=2, ramp_updates=250) == 250 + 4 * 31
    assert Training(per_worker_batch=4, eval_every_epochs=0.01, epochs=1).eval_every_at(10) == 1


def test_a_ramp_axis_sets_only_its_own_trials_and_the_sweeps_record_is_untouched() -> None:
    sweep = load_sweep(str(SWEEPS / "ramp_16.yaml"))
    rows = make_plan(sweep).rows
    ramps = {row.trial.batch_ramp != () for row in rows}
    assert ramps == {True, False}
    assert sweep.training.batch_ramp is None


@pytest.mark.parametrize("merged", [{"per_worker_batch": 8, "eval_every": 0},
                                    {"per_worker_batch": 8, "max_updates": 0, "epochs": 1}])
def test_a_zero_cadence_or_cap_is_none_given(merged: dict[str, object]) -> None:
    record = Training.of(merged)
    assert record.eval_every is None and record.max_updates is None
