"""The planner and sweep-file additions of "Beyond the anchors": the sqrt_adam rule, the
cluster wall-time projection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scalesweep.orchestrator.plan.cluster import ClusterInfo
from scalesweep.orchestrator.plan.rows import make_plan
from scalesweep.orchestrator.spec.errors import InputError
from scalesweep.orchestrator.spec.load import load_sweep

ROOT = Path(__file__).resolve().parents[2]
LAPTOP = ClusterInfo(cpus=2, gpus=0, memory_gb=24, where="test machine")


def plan_of(name: str, *sets: str):  # type: ignore[no-untyped-def]
    return make_plan(load_sweep(ROOT / "sweeps" / name, list(sets)), LAPTOP)


def wenet(*sets: str):  # type: ignore[no-untyped-def]
    return plan_of("wenet_4v16.yaml", "exclude=[]", "axes.warmup_rule=[fixed]", "replicates=null",
                   "axes.seed=[0]", *sets)


# --- sqrt_adam ----------------------------------------------------------------------------


def test_sqrt_adam_refuses_sgd_and_schedules_that_drive_beta1() -> None:
    with pytest.raises(InputError, match=r"axes.scaling_rule = 'sqrt_adam'.*optimizer.type") as info:
        plan_of("smoke.yaml", "axes.scaling_rule=[sqrt_adam]")  # SGD
    assert "got 'sgd' (trial world_size=2" in info.value.message()
    onecycle = ("scheduler={type: onecycle, cycle_min_lr: 0.0001, cycle_max_lr: 0.002, "
                "cycle_first_step_size: 100}")
    with pytest.raises(InputError, match="onecycle schedule sets beta1"):
        wenet("axes.scaling_rule=[sqrt_adam]", onecycle)
    # 4 -> 64 workers: k = 16, beta1 = 1 - 16 * 0.1 < 0
    with pytest.raises(InputError, match=r"beta1 = 1 - k\(1 - beta1\) = 1 - 16"):
        wenet("axes.scaling_rule=[sqrt_adam]", "axes.world_size=[4, 64]")


def test_sqrt_adam_trial_carries_scaled_lr_betas_and_eps() -> None:
    """WeNet recipe (adam, lr 0.002, torch's default betas and eps), 4 -> 16 workers: k = 4."""
    plan = wenet("axes.scaling_rule=[none, sqrt_adam]", "axes.warmup_rule=[scaled]")
    rows = {r.name: r for r in plan.rows}
    row = rows["ws16-warmup75-sqrt_adam"]
    opt: dict[str, Any] = row.trial.optimizer
    assert opt["lr"] == pytest.approx(0.004) and row.peak_lr == pytest.approx(0.004)
    assert opt["betas"] == pytest.approx([0.6, 0.996], abs=1e-15)
    assert opt["eps"] == pytest.approx(5e-9)
    assert "optimizer.betas (0.9, 0.999) -> (0.6, 0.996) (1 - k(1 - beta); sqrt_adam, k = 4)" in row.notes
    assert "optimizer.eps 1e-08 -> 5e-09 (eps / sqrt(k); sqrt_adam, k = 4)" in row.notes
    assert any(n.startswith("optimizer.lr 0.002 -> 0.004") for n in row.notes)
    json.dumps(row.to_json())  # the trial travels as JSON
    # at the reference world size sqrt_adam is the same trial as none: merged
    assert "ws4-warmup300-sqrt_adam" not in rows
    assert rows["ws4-warmup300-none"].also == [
        {"world_size": 4, "warmup_rule": "scaled", "scaling_rule": "sqrt_adam", "seed": 0}]


# --- projection ---------------------------------------------------------------------------


def test_projection_is_validated_all_at_once() -> None:
    bad = "projection={seconds_per_epoch: {'4': 407.17, 0: 5, 16: -1, 8: .nan}, label: ''}"
    with pytest.raises(InputError) as info:
        plan_of("wenet_4v16.yaml", bad)
    message = info.value.message()
    for part in ("seconds_per_epoch.4 = '4': Input should be a valid integer",
                 "seconds_per_epoch[0] = 0: Input should be greater than or equal to 1",
                 "seconds_per_epoch[16] = -1: Input should be greater than 0",
                 "seconds_per_epoch[8] = nan", "projection.label = ''"):
        assert part in message
    with pytest.raises(InputError, match="at least 1 item"):
        plan_of("wenet_4v16.yaml", "projection={seconds_per_epoch: {}, label: x}")


def test_projection_is_a_json_parent_param() -> None:
    from scalesweep.orchestrator.tracking.sweep_runs import parent_params as _parent_params
    from scalesweep.orchestrator.tracking.tracker import _param_str

    plan = plan_of("wenet_4v16.yaml")
    projection = plan.sweep.spec.projection
    assert projection is not None and projection.seconds_per_epoch == {4: 407.17, 8: 204.36, 16: 121.7}
    logged = json.loads(_param_str(_parent_params(plan)["projection"]))
    assert logged == {"seconds_per_epoch": {"4": 407.17, "8": 204.36, "16": 121.7},
                      "label": "WeNet AISHELL conformer, 8-GPU nodes (blog)"}
    assert "projection" not in _parent_params(plan_of("smoke.yaml"))
