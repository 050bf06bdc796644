"""A sweep started before the Tune trainable moved from ``scalesweep.orchestrator.launch`` to
``scalesweep.trainables`` (issue 32 §2) still runs and resumes its trials: Ray pickles a
function trainable by reference (its module path and name), and the old path imports as the
very same module."""

from __future__ import annotations

import importlib
import pickle
from pathlib import Path
from typing import Any

import pytest
import ray.tune

from scalesweep.trainables import trial_driver
from scalesweep.trainables.loop import train
from scalesweep.trainables.world import LocalWorld
from tests.unit.test_checkpoints import OLD, _config

OLD_PATH = "scalesweep.orchestrator.launch.trial_driver"
#: ray.cloudpickle of ``tune.with_resources(trial_driver.trainable, trial_driver.resources)``,
#: what Tune's registry hands each trial process, made by commit ad81e48 (before the move)
OLD_TRAINABLE = Path(__file__).parents[1] / "data" / "trainable_before_trainables_move.pkl"


def test_the_old_module_path_is_the_trainables_module() -> None:
    assert importlib.import_module(OLD_PATH) is trial_driver
    from scalesweep.orchestrator.launch import trial_driver as through_the_package

    assert through_the_package is trial_driver
    # pickled from now on by the new path
    assert trial_driver.trainable.__module__ == "scalesweep.trainables.trial_driver"


def test_a_trainable_pickled_before_the_move_resumes_its_trial(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = OLD_TRAINABLE.read_bytes()
    assert OLD_PATH.encode() in raw
    trainable = pickle.loads(raw)
    assert trainable is trial_driver.trainable
    # run as a Tune trial process runs it: Tune hands it the checkpoint an earlier sweep left
    # (written before the science split, at update 6) and takes its reports
    reports: list[dict[str, Any]] = []
    monkeypatch.setattr(ray.tune, "get_checkpoint", lambda: ray.tune.Checkpoint.from_directory(OLD))
    monkeypatch.setattr(ray.tune, "report", lambda metrics, checkpoint=None: reports.append(metrics))
    trainable({"trial_config": {"trial": _config().model_dump(mode="json")}})
    assert [m["update"] for m in reports] == [8, 12, 14]
    whole: list[dict[str, Any]] = []
    train(_config(), LocalWorld(), on_report=lambda m, d: whole.append(m))
    for a, b in zip([m for m in whole if m["update"] > 6], reports, strict=True):
        # float64; the stored state was computed on another machine, so not bit for bit
        assert b["dev_loss"] == pytest.approx(a["dev_loss"], rel=1e-9)
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-9)
