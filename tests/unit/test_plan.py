"""The planner: derived numbers, dedupe, placement and feasibility."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalesweep.orchestrator.plan.cluster import ClusterInfo
from scalesweep.orchestrator.plan.rows import PLAN_FIELDS, make_plan
from scalesweep.orchestrator.spec.errors import InputError
from scalesweep.orchestrator.spec.load import load_sweep

ROOT = Path(__file__).resolve().parents[2]
LAPTOP = ClusterInfo(cpus=2, gpus=0, memory_gb=24, where="test machine")
GPU_BOX = ClusterInfo(cpus=64, gpus=16, memory_gb=512, where="gpu cluster")


def plan_of(name: str, *sets: str, cluster: ClusterInfo = LAPTOP):  # type: ignore[no-untyped-def]
    return make_plan(load_sweep(ROOT / "sweeps" / name, list(sets)), cluster)


def test_wenet_fixed_warmup_peaks_four_times_later_in_epochs() -> None:
    plan = plan_of("wenet_4v16_rules.yaml", "axes.seed=[0]")
    rows = {r.name: r for r in plan.rows}
    base = rows["ws4-warmup300-none"]
    fixed = rows["ws16-warmup300-none"]
    scaled = rows["ws16-warmup75-none"]
    assert base.updates_per_epoch == 4 * fixed.updates_per_epoch == 8192 // 64
    # WeNet warmuplr peaks at update == warmup_steps, so peak epoch == warmup epochs
    assert fixed.warmup_epochs == pytest.approx(4 * base.warmup_epochs, rel=1e-12)
    assert scaled.warmup_epochs == pytest.approx(base.warmup_epochs, rel=1e-12)
    assert rows["ws16-warmup19-none"].warmup_steps == 19
    assert rows["ws16-warmup75-linear"].peak_lr == pytest.approx(4 * base.peak_lr)
    assert rows["ws16-warmup75-sqrt"].peak_lr == pytest.approx(2 * base.peak_lr)
    assert base.global_batch * 4 == fixed.global_batch


def test_the_quick_start_study_is_four_arms_of_adaptive_seeds() -> None:
    from scalesweep.orchestrator.plan import adaptive

    plan = plan_of("wenet_4v16.yaml")
    arms: dict[str, list[int]] = {}
    for row in plan.rows:
        arms.setdefault(row.arm, []).append(row.trial.seed)
    assert sorted(arms) == ["ws16-warmup19-none", "ws16-warmup300-none", "ws16-warmup75-linear",
                            "ws4-warmup300-none"]
    # every seed that may run is planned; the first round is seeds 0-5 of every arm
    assert all(sorted(seeds) == list(range(10)) for seeds in arms.values())
    assert sorted({r.trial.seed for r in adaptive.first_round(plan)}) == [0, 1, 2, 3, 4, 5]


def test_identical_trials_are_merged_and_excludes_apply() -> None:
    plan = plan_of("wenet_4v16_rules.yaml", "axes.seed=[0]")
    names = [r.name for r in plan.rows]
    # 1 + 3 x 3 - 1: the /16 warmup with sqrt is excluded, as is every /16 at the reference
    assert len(names) == len(set(names)) == 9 and "ws16-warmup19-sqrt" not in names
    assert len(plan_of("wenet_4v16_rules.yaml").rows) == 27  # three seeds of each
    (base,) = [r for r in plan.rows if r.world_size == 4]
    # every rule and the scaled warmup give the same trial at the reference world size
    assert {(a["warmup_rule"], a["scaling_rule"]) for a in base.also} == {
        ("fixed", "linear"), ("fixed", "sqrt"), ("scaled", "none"), ("scaled", "linear"),
        ("scaled", "sqrt")}
    assert plan.baseline_for(plan.rows[5]) is base


def test_plan_json_has_the_documented_fields() -> None:
    row = plan_of("smoke.yaml").rows[0].to_json()
    for key in ("world_size", "scaling_rule", "warmup_rule", "global_batch", "peak_lr",
                "warmup_steps", "warmup_epochs", "updates_per_epoch", "total_updates", "backend",
                "physical_workers", "accum_grad", "seed", "feasible"):
        assert key in row
    assert set(PLAN_FIELDS) <= set(row)


def test_ddp_on_a_small_machine_becomes_hybrid_with_the_same_updates() -> None:
    plan = plan_of("smoke.yaml", "backend=ddp")
    by_ws = {r.world_size: r for r in plan.rows}
    assert by_ws[2].physical_workers == 2 and by_ws[2].feasible
    w4 = by_ws[4]
    assert w4.physical_workers == 2 and w4.trial.virtual_per_physical == 2
    assert any("each plays 2 virtual ranks" in n for n in w4.notes)
    sim = {r.world_size: r for r in plan_of("smoke.yaml").rows}
    assert w4.updates_per_epoch == sim[4].updates_per_epoch


def test_explicit_workers_that_do_not_fit_are_infeasible_with_the_arithmetic() -> None:
    plan = plan_of("smoke.yaml", "backend=ddp", "physical_workers=2",
                   "resources.cpus_per_worker=2")
    row = plan.rows[0]
    assert not row.feasible
    assert "physical_workers(2) * cpus_per_worker(2) = 4 CPUs > 2" in (row.reason or "")


def test_auto_backend_picks_ddp_only_where_the_gpus_are() -> None:
    sets = ("backend=auto", "resources.gpus_per_worker=1")
    assert {r.backend for r in plan_of("smoke.yaml", *sets).rows} == {"simulate"}
    gpu = plan_of("smoke.yaml", *sets, cluster=GPU_BOX)
    assert {r.backend for r in gpu.rows} == {"ddp"}
    assert all(r.physical_workers == r.world_size and r.trial.use_gpu for r in gpu.rows)
    assert any("auto -> ddp" in n for n in gpu.rows[0].notes)


def test_random_search_is_seeded() -> None:
    sets = ("search={type: random, samples: 5, seed: 3}",
            "axes.optimizer.lr={loguniform: [0.001, 0.1]}")
    a = [r.trial.optimizer["lr"] for r in plan_of("smoke.yaml", *sets).rows]
    b = [r.trial.optimizer["lr"] for r in plan_of("smoke.yaml", *sets).rows]
    c = [r.trial.optimizer["lr"] for r in plan_of("smoke.yaml", *sets[:1], "search.seed=4",
                                                  sets[1]).rows]
    assert a == b and a != c
    assert all(0.001 <= lr <= 0.1 * 2 for lr in a)  # linear may double the drawn lr


def test_simulate_rejects_physical_workers() -> None:
    with pytest.raises(InputError, match="simulate backend runs one process"):
        plan_of("smoke.yaml", "physical_workers=2")


def test_checkpoint_cadence_is_wall_time_unless_given_in_updates() -> None:
    trial = plan_of("smoke.yaml").rows[0].trial
    assert (trial.checkpoint_every, trial.checkpoint_every_s) == (0, 60.0)
    trial = plan_of("smoke.yaml", "training.checkpoint_every_s=5").rows[0].trial
    assert (trial.checkpoint_every, trial.checkpoint_every_s) == (0, 5.0)
    trial = plan_of("smoke.yaml", "training.checkpoint_every=40").rows[0].trial
    assert (trial.checkpoint_every, trial.checkpoint_every_s) == (40, None)
    trial = plan_of("smoke.yaml", "training.checkpoint_every=0").rows[0].trial
    assert (trial.checkpoint_every, trial.checkpoint_every_s) == (0, None)


def test_plan_warns_when_a_trial_makes_too_few_evaluations() -> None:
    coarse = make_plan(load_sweep(str(ROOT / "sweeps" / "smoke.yaml"), ["training.eval_every_epochs=2"]))
    (warning,) = [n for n in coarse.notes if "fewer than 10 evaluations" in n]
    assert "ws2-warmup20-none" in warning and "training.eval_every_epochs" in warning
    fine = make_plan(load_sweep(str(ROOT / "sweeps" / "smoke.yaml")))  # 6 epochs, every 0.5: 12 evals
    assert not [n for n in fine.notes if "fewer than 10 evaluations" in n]


def test_narrowing_an_axis_on_the_command_line_leaves_the_files_excludes_as_notes() -> None:
    # `--set axes.world_size=[4]` to debug the study: its exclude entries for 16 exclude nothing
    plan = plan_of("wenet_4v16.yaml", "axes.world_size=[4]", "replicates=null", "axes.seed=[0]")
    assert [r.name for r in plan.rows] == ["ws4-warmup300-none"]
    assert sum("names world_size=16, not among the axis values [4] given with --set" in n
               for n in plan.notes) == 3


def test_an_exclude_value_the_files_own_axes_lack_is_still_refused(tmp_path: Path) -> None:
    # written in the file against the file's axes: a typo, exit 2 as before
    text = (ROOT / "sweeps" / "wenet_4v16.yaml").read_text().replace(
        "- {world_size: 16, warmup_rule: fixed, scaling_rule: linear}",
        "- {world_size: 61, warmup_rule: fixed, scaling_rule: linear}")
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "wenet_conformer.yaml").write_text(
        (ROOT / "recipes" / "wenet_conformer.yaml").read_text())
    (tmp_path / "typo.yaml").write_text(text)
    with pytest.raises(InputError) as err:
        load_sweep(tmp_path / "typo.yaml", ["replicates=null", "axes.seed=[0]"])
    assert any(p.path == "exclude[1].world_size" and p.value == 61 for p in err.value.problems)


def test_elastic_trials_are_ddp_with_at_most_p_as_their_minimum() -> None:
    with pytest.raises(InputError) as err:
        load_sweep(ROOT / "sweeps" / "smoke.yaml", ["resources.elastic={min_workers: 2}"])
    assert [p.path for p in err.value.problems] == ["resources.elastic"]
    with pytest.raises(InputError) as err:
        load_sweep(ROOT / "sweeps" / "smoke.yaml", ["backend=ddp", "physical_workers=2",
                                                    "resources.elastic={min_workers: 3}"])
    assert [(p.path, p.value) for p in err.value.problems] == [("resources.elastic.min_workers", 3)]
    big = ClusterInfo(cpus=8, gpus=0, memory_gb=64, where="a test cluster")
    plan = plan_of("smoke.yaml", "backend=ddp", "physical_workers=2",
                   "resources.elastic={min_workers: 1}", cluster=big)
    assert {r.trial.min_workers for r in plan.rows} == {1}
    assert {r.trial.min_workers for r in plan_of("smoke.yaml", "backend=ddp", "physical_workers=2",
                                                  cluster=big).rows} == {None}


DS_DECAY = "scheduler={type: WarmupDecayLR, warmup_num_steps: 20, total_num_steps: auto}"


def test_a_deepspeed_warmup_max_lr_unlike_the_optimizer_lr_is_noted_once() -> None:
    from scalesweep.orchestrator.plan.table import format_plan
    plan = plan_of("smoke.yaml", DS_DECAY)
    note = ("scheduler.warmup_max_lr (0.001, ds_warmup_decay's default, as DeepSpeed's), not "
            "optimizer.lr (0.05), sets the peak lr: ds_warmup_decay overwrites the optimizer's lr "
            "at every update, and an lr rule scales warmup_max_lr (peak_lr); warmup_max_lr: null "
            "follows optimizer.lr")
    assert plan.notes.count(note) == 1
    assert f"note: {note}" in format_plan(plan)
    # the peak the trial trains at, not the optimizer lr: DeepSpeed's 0.001, times k = 2
    rows = {r.name: r for r in plan.rows}
    assert [rows["ws4-warmup20-none"].peak_lr, rows["ws4-warmup20-linear"].peak_lr] == [
        0.001, 0.002]
    given = plan_of("smoke.yaml", DS_DECAY, "scheduler.warmup_max_lr=0.01")
    assert [n for n in given.notes if "warmup_max_lr" in n] == [note.replace(
        "0.001, ds_warmup_decay's default, as DeepSpeed's", "0.01")]
    for same in ("scheduler.warmup_max_lr=0.05", "scheduler.warmup_max_lr=null"):
        assert not [n for n in plan_of("smoke.yaml", DS_DECAY, same).notes if "warmup_max_lr" in n]


def test_base_lr_lr_and_peak_lr_in_the_plan_the_loop_config_and_the_mlflow_params() -> None:
    """docs/workloads.md's three lrs: the optimizer lr stays the sweep's where the schedule sets
    its own lrs (warmup_max_lr given), and only peak_lr carries the lr rule there."""
    from scalesweep.orchestrator.plan.loop_config import loop_config
    from scalesweep.orchestrator.tracking.sweep_runs import trial_params
    for sets, lr, peak in (
            # gradual_warmup reads the optimizer lr: linear x 2 scales it, and it is the peak
            ((), 0.1, 0.1),
            # WarmupDecayLR with warmup_max_lr 0.01: the optimizer lr is never trained at
            ((DS_DECAY, "scheduler.warmup_max_lr=0.01"), 0.05, 0.02)):
        plan = plan_of("smoke.yaml", *sets)
        row = next(r for r in plan.rows if r.name == "ws4-warmup20-linear")
        params = trial_params(row, plan.sweep)
        config = loop_config(row, plan.sweep.workload.train_size())
        for got in (params, config):
            assert (got["base_lr"], got["lr"], got["peak_lr"]) == (0.05, lr, peak)
        assert config["optimizer"]["lr"] == lr
