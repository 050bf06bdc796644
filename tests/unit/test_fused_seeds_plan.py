"""resources.seeds_per_trial (docs/design.md, "Fused seeds"): what the load refuses, how a
round's seeds are grouped into trials, what `plan` says, and the Tune job of a fused trial."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalesweep.orchestrator.plan import adaptive
from scalesweep.orchestrator.plan.cluster import ClusterInfo
from scalesweep.orchestrator.plan.rows import make_plan
from scalesweep.orchestrator.plan.table import format_plan
from scalesweep.orchestrator.spec.errors import InputError
from scalesweep.orchestrator.spec.load import load_sweep
from scalesweep.trainables.config import TrialJob

ROOT = Path(__file__).resolve().parents[2]
LAPTOP = ClusterInfo(cpus=2, gpus=0, memory_gb=24, where="test machine")
SMOKE = ROOT / "sweeps" / "smoke.yaml"


def test_what_fused_seeds_do_not_cover_is_refused_at_load_naming_field_and_value() -> None:
    with pytest.raises(InputError) as err:
        load_sweep(SMOKE, ["resources.seeds_per_trial=2", "backend=ddp", "training.dtype=float16",
                           "axes.training.batch_ramp=[none, '2:1']", "resources.gpus_per_worker=1",
                           "search.trial_scheduler=asha"])
    found = {(p.path, p.value): p.rule for p in err.value.problems}
    assert set(found) == {("backend", "ddp"), ("training.dtype", "float16"),
                          ("training.batch_ramp", "2:1"), ("resources.gpus_per_worker", 1.0),
                          ("search.trial_scheduler", "asha")}
    assert all(rule.startswith("resources.seeds_per_trial 2 (fused seeds) ") for rule in found.values())
    with pytest.raises(InputError) as err:
        load_sweep(SMOKE, ["resources.seeds_per_trial=2", "curtail=true"])
    assert [(p.path, p.value) for p in err.value.problems] == [("curtail", True)]
    with pytest.raises(InputError) as err:
        load_sweep(SMOKE, ["resources.seeds_per_trial=0"])
    assert [p.path for p in err.value.problems] == ["resources.seeds_per_trial"]
    # the same settings without fused seeds load
    load_sweep(SMOKE, ["backend=ddp", "training.dtype=float16"])


def test_a_rounds_seeds_are_grouped_per_arm_at_most_seeds_per_trial_to_a_trial() -> None:
    plan = make_plan(load_sweep(SMOKE, ["axes.seed=[0, 1, 2]", "axes.scaling_rule=[none]",
                                        "resources.seeds_per_trial=2"]), LAPTOP)
    groups = adaptive.fused_trials(plan.rows, 2)
    assert [[r.name for r in g] for g in groups] == [
        ["ws2-warmup20-none-s0", "ws2-warmup20-none-s1"], ["ws2-warmup20-none-s2"],
        ["ws4-warmup20-none-s0", "ws4-warmup20-none-s1"], ["ws4-warmup20-none-s2"]]
    assert [adaptive.fused_name(g) for g in groups] == [
        "ws2-warmup20-none-seeds0+1", "ws2-warmup20-none-s2", "ws4-warmup20-none-seeds0+1",
        "ws4-warmup20-none-s2"]
    # a resumed round: only the seeds not done, still per arm
    todo = [r for r in plan.rows if r.seed != 1]
    assert [[r.name for r in g] for g in adaptive.fused_trials(todo, 2)] == [
        ["ws2-warmup20-none-s0", "ws2-warmup20-none-s2"], ["ws4-warmup20-none-s0", "ws4-warmup20-none-s2"]]
    assert adaptive.fused_trials(plan.rows, 1) == [[r] for r in plan.rows]
    text = format_plan(plan)
    assert ("note: resources.seeds_per_trial 2: an arm's seeds of a round train together, up to 2 in "
            "one trial process (the first round's 6 seed trial(s) in 4 process(es)); each seed "
            "keeps its own MLflow run") in text
    assert "seeds_per_trial" not in format_plan(make_plan(load_sweep(SMOKE), LAPTOP))


def test_an_adaptive_round_fuses_only_its_own_seeds() -> None:
    plan = make_plan(load_sweep(ROOT / "sweeps" / "wenet_4v16.yaml",
                                ["resources.seeds_per_trial=4"]), LAPTOP)
    first = adaptive.first_round(plan)  # min 6 seeds per arm: 4 + 2
    sizes = sorted({len(g) for g in adaptive.fused_trials(first, 4)})
    assert sizes == [2, 4]
    arms = {r.arm for r in first}
    assert len(adaptive.fused_trials(first, 4)) == 2 * len(arms)
    assert all(len({r.arm for r in g}) == 1 for g in adaptive.fused_trials(first, 4))


def test_a_fused_job_names_its_seeds_and_a_solo_jobs_json_has_no_seeds() -> None:
    plan = make_plan(load_sweep(SMOKE, ["axes.seed=[0, 1]", "axes.scaling_rule=[none]"]), LAPTOP)
    a, b = plan.rows[0], plan.rows[1]
    solo = TrialJob(trial=a.trial)
    assert "seeds" not in solo.to_config() and solo.seed_names == [a.name]
    fused = TrialJob(trial=a.trial.model_copy(update={"name": "f"}), seeds=(a.trial, b.trial))
    config = {"trial_config": fused.to_config()}
    assert TrialJob.seed_names_in(config) == [a.name, b.name] == fused.seed_names
    assert TrialJob.name_in(config) == "f"
    assert TrialJob.model_validate(config["trial_config"]) == fused
    other_arm = plan.rows[2].trial
    with pytest.raises(ValueError, match="distinct seeds of the trial's arm"):
        TrialJob(trial=a.trial, seeds=(a.trial, other_arm))
    with pytest.raises(ValueError, match="distinct seeds of the trial's arm"):
        TrialJob(trial=a.trial, seeds=(a.trial, a.trial))


def test_a_seeds_checkpoints_are_found_in_its_fused_trials_and_its_own(tmp_path: Path) -> None:
    import os

    from scalesweep.trainables.trial_driver import simulate_checkpoints

    fused = [tmp_path / "tune" / "arm-seeds0+1" / f"checkpoint_00000{i}" / seed
             for i in (1, 2) for seed in ("arm-s0", "arm-s1")]
    own = tmp_path / "tune1" / "arm-s0" / "checkpoint_000000"
    for i, path in enumerate([*fused, own]):
        path.mkdir(parents=True)
        os.utime(path, (1000 + i, 1000 + i))
    assert simulate_checkpoints(tmp_path, "arm-s0") == [own, fused[2], fused[0]]  # newest first
    assert simulate_checkpoints(tmp_path, "arm-s1") == [fused[3], fused[1]]
    assert simulate_checkpoints(tmp_path, "arm-s2") == []
