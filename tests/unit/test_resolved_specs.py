"""ScheduleSpec and OptimizerSpec (issue 32 §1): resolved once by their ``resolve``, the only
judge, and carried unchanged to the worker; their JSON forms are the dicts the code before
them wrote, so Tune configs, checkpoints and MLflow params read the same."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest
import torch

from scalesweep.orchestrator.plan.loop_config import loop_config
from scalesweep.orchestrator.plan.rows import make_plan
from scalesweep.orchestrator.spec.load import load_sweep
from scalesweep.science import optimizers, scaling, schedules
from scalesweep.science.schedules import _validation
from scalesweep.trainables.config import TrialConfig, loop_schedule
from scalesweep.trainables.loop import build_optimizer
from tests.support.helpers import SWEEPS

ONECYCLE = {"type": "OneCycle", "cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3}


def test_resolve_gives_the_canonical_type_and_every_default() -> None:
    spec = schedules.resolve(ONECYCLE)
    assert spec.type == "onecycle" and spec.kind.name == "onecycle"
    assert list(spec.params) == list(spec.kind.params)  # every param, in the type's order
    assert spec["cycle_first_step_size"] == 2000 and spec["type"] == "onecycle"
    assert spec == {"type": "onecycle", **spec.params} == spec.as_dict()


def test_resolve_names_every_problem_with_field_value_and_rule() -> None:
    with pytest.raises(schedules.ScheduleError) as caught:
        schedules.resolve({"type": "warmuplr", "warmup_steps": -1, "bogus": 2})
    found = {(p.field, p.value) for p in caught.value.problems}
    assert found == {("warmup_steps", -1), ("bogus", 2)}
    assert "warmup_steps = -1: must be >= 0" in str(caught.value)


def test_integral_floats_are_counts_only_where_a_file_gave_them() -> None:
    """YAML's integral floats become counts where the sweep's layers are merged (Settings.layer,
    the one place, for the file, its recipe and each axis value); the science API takes ints."""
    from scalesweep.orchestrator.spec.load import Settings

    given = {"type": "warmuplr", "warmup_steps": 300.0}  # a YAML axis value
    layered = Settings()
    layered.layer("scheduler", given, "sweep")
    assert type(layered.scheduler["warmup_steps"]) is int
    assert schedules.resolve(layered.scheduler)["warmup_steps"] == 300
    layered.layer("scheduler", {"warmup_steps": 75.0}, "axis scheduler.warmup_steps")
    assert type(layered.scheduler["warmup_steps"]) is int
    with pytest.raises(schedules.ScheduleError, match="must be an integer"):
        schedules.resolve(given)
    with pytest.raises(TypeError):
        schedules.resolve(given, yaml_counts=True)  # type: ignore[call-arg]


def test_a_resolved_spec_is_frozen_hashable_picklable_and_json_as_before() -> None:
    spec = schedules.resolve({"type": "wsd", "warmup_steps": 5, "decay_steps": 10,
                              "total_steps": 50})
    with pytest.raises(AttributeError):
        spec.type = "constant"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(spec)) == spec and len({spec, spec}) == 1
    assert json.loads(json.dumps(spec.as_dict())) == spec


def test_build_and_the_worker_never_judge_a_resolved_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk's one validation: from the trial's record to the lr, nothing calls the rules."""
    trial = TrialConfig(name="t", workload="mlp_regression", world_size=2, physical_workers=1,
                        per_worker_batch=4, optimizer=optimizers.resolve({"type": "sgd", "lr": 0.1}),
                        scheduler=schedules.resolve(ONECYCLE), total_updates=8, eval_every=4)
    wire = trial.model_dump(mode="json")  # what Tune carries

    def judged(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a resolved schedule was judged again")

    monkeypatch.setattr(_validation, "problems", judged)
    monkeypatch.setattr(schedules._spec, "problems", judged)
    back = TrialConfig.model_validate(wire)
    assert back == trial and back.scheduler == trial.scheduler
    lr = schedules.build(back.scheduler, back.optimizer.lr).lr(3)
    assert lr == schedules.build(trial.scheduler, 0.1).lr(3)


def test_a_trial_json_written_before_the_specs_loads() -> None:
    """A Tune state or checkpoint of the code before: plain dicts, a schedule with a default
    left out; the record fills it in as resolve would have."""
    old = {"name": "t", "workload": "mlp_regression", "world_size": 2, "physical_workers": 1,
           "per_worker_batch": 4, "total_updates": 8, "eval_every": 4,
           "optimizer": {"type": "adam", "lr": 0.001, "betas": [0.8, 0.99]},
           "scheduler": {"type": "ds_warmuplr", "warmup_num_steps": 5}}
    trial = TrialConfig.model_validate(old)
    assert trial.scheduler == schedules.resolve({"type": "WarmupLR", "warmup_num_steps": 5})
    assert trial.optimizer == old["optimizer"]
    assert trial.model_dump(mode="json")["optimizer"] == old["optimizer"]


def test_scaling_apply_returns_a_new_spec_and_leaves_its_input() -> None:
    spec = schedules.resolve({"type": "gradual_warmup", "warmup_steps": 100})
    out, lr, notes = scaling.apply(spec, 0.1, lr_factor=4.0, warmup_rule="scaled",
                                   global_batch=64, reference_global_batch=16)
    assert isinstance(out, schedules.ScheduleSpec) and spec["start_lr"] is None
    assert (out["warmup_steps"], out["start_lr"], lr) == (25, 0.1, 0.4)
    assert notes == ["optimizer.lr 0.1 -> 0.4 (x 4)",
                     "scheduler.start_lr null -> 0.1 (gradual warmup starts at the reference lr)",
                     "scheduler.warmup_steps 100 -> 25 (scaled x 16/64)"]


def test_the_hooks_return_changes() -> None:
    wsd = schedules.SCHEDULE_TYPES["wsd"]
    params = {"warmup_steps": 25, "decay_steps": 75, "total_steps": 100}
    assert wsd.scale_counts is not None
    changes = wsd.scale_counts(params, [], lambda n: (n + 1) // 2, "x 1/2")
    assert [(c.key, c.value) for c in changes] == [("warmup_steps", 13), ("total_steps", 50),
                                                   ("decay_steps", 37)]
    assert params == {"warmup_steps": 25, "decay_steps": 75, "total_steps": 100}


def test_one_optimizer_table_for_the_checks_the_loop_and_the_rules() -> None:
    for name, kind in optimizers.OPTIMIZER_TYPES.items():
        built = build_optimizer(iter([torch.nn.Parameter(torch.zeros(1))]),
                                optimizers.resolve({"type": name, "lr": 0.1}))
        assert type(built).__name__ == kind.torch_class
        assert ("betas" in built.defaults) == kind.has_betas == (name in scaling.ADAM_TYPES)
    with pytest.raises(optimizers.OptimizerError) as caught:
        optimizers.resolve({"type": "sgd", "lr": 0, "betas": [0.9, 0.99]})
    assert [p.path for p in caught.value.problems] == ["lr", "betas"]


def test_an_optimizer_spec_is_its_block_betas_a_list_for_json_a_tuple_for_torch() -> None:
    spec = optimizers.resolve({"type": "adamw", "lr": 0.01, "betas": [0.9, 0.95]})
    assert spec.as_dict() == {"type": "adamw", "lr": 0.01, "betas": [0.9, 0.95]} == spec
    assert spec.torch_kwargs() == {"lr": 0.01, "betas": (0.9, 0.95)} and spec.lr == 0.01
    assert pickle.loads(pickle.dumps(spec)) == spec and hash(spec) == hash(spec.with_params({}))


def test_the_planner_judges_a_trials_schedule_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep's schedule is judged once, at load, into Sweep.scheduler; per trial, the
    rules' result (scaling.apply) once: the warmup_steps walk's validations (docs/design.md §2)."""
    calls: list[dict[str, Any]] = []
    judge = schedules._spec.problems

    def counted(spec: Any, base_lr: Any = None) -> Any:
        calls.append(dict(spec))
        return judge(spec, base_lr)

    monkeypatch.setattr(schedules._spec, "problems", counted)
    monkeypatch.setattr(schedules._validation, "problems", counted)
    sweep = load_sweep(SWEEPS / "wenet_4v16.yaml")
    assert len(calls) == 1 and isinstance(sweep.scheduler, schedules.ScheduleSpec)
    calls.clear()
    plan = make_plan(sweep)
    trials = len(plan.rows) + sum(len(r.also) for r in plan.rows)
    assert len(calls) == trials


def test_a_user_loops_config_has_one_scheduler_the_spec() -> None:
    sweep = load_sweep(SWEEPS / "smoke.yaml")
    row = make_plan(sweep).rows[0]
    config = loop_config(row, sweep.workload.train_size())
    assert config["scheduler"] == row.trial.scheduler.as_dict()
    assert json.loads(json.dumps(config)) == config  # a Tune config: plain JSON values
    assert loop_schedule(config) == row.trial.scheduler
    # a config of an older version: scheduler the name, the spec under schedule
    older = {**config, "scheduler": row.scheduler, "schedule": config["scheduler"]}
    assert loop_schedule(older) == row.trial.scheduler
