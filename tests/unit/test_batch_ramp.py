"""Batch-size ramps (#15 item 3): a global batch that grows in stages of whole epochs.

* The data plan by hand: which world size, epoch, samples and schedule position every update
  has; without a ramp, exactly the plan of before (position == update).
* The loop: a ramp's first stage under warmup_rule fixed and lr rule none is, update for update,
  a trial at the stage's world size (float64, exact); the lr of every update is the stage's
  multiplier times the schedule at the stage's clock; a resume mid-ramp is the uninterrupted
  run; real DDP (a gloo group of 2, no Ray) makes simulate's updates through the stages.
* The planner: stages, their lr multipliers and clocks from the sweep's rules, totals and
  epochs counted right, the `plan` note and the `lr --plot` panel; bad ramps are exit 2 by name.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from scalesweep.science import schedules
from scalesweep.science.batch_ramp import DataPlan, Stage, check, describe, parse
from scalesweep.trainables import loop
from scalesweep.trainables.config import RampStage, TrialConfig
from scalesweep.trainables.world import LocalWorld
from tests.support.helpers import SCALESWEEP, cli_env

ROOT = Path(__file__).resolve().parents[2]
#: 256 samples, batch 8: V = 2 -> 16 updates per epoch, V = 4 -> 8, V = 8 -> 4
MLP = {"train_size": 256, "dev_size": 64}


def _plan_2_4_8(**final: Any) -> DataPlan:
    """Stages 2 and 4 (one epoch each) before 8, clocks 1/4 and 1/2 (warmup_rule scaled)."""
    stages = [RampStage(world_size=2, epochs=1, lr_multiplier=0.25, clock=0.25, eval_every=8),
              RampStage(world_size=4, epochs=1, lr_multiplier=0.5, clock=0.5, eval_every=4)]
    args: dict[str, Any] = {"dataset_size": 256, "per_worker_batch": 8, "accum_grad": 1,
                            "world_size": 8, "total_updates": 28, "eval_every": 2, **final}
    return DataPlan(stages=stages, **args)


def test_the_data_plan_by_hand() -> None:
    plan = _plan_2_4_8()
    assert [(s.world_size, s.first_update, s.updates, s.first_epoch, s.updates_per_epoch,
             s.global_batch, s.clock_before, s.samples_before) for s in plan.segments] == [
        (2, 1, 16, 0, 16, 16, 0.0, 0),
        (4, 17, 8, 1, 8, 32, 4.0, 256),  # 16 updates x 1/4
        (8, 25, 4, 2, 4, 64, 8.0, 512),  # 4 + 8 x 1/2
    ]  # fmt: skip
    # a schedule counted from 0 (LambdaLR-style): position 1 + the clock before the update
    assert [plan.position(k) for k in (1, 2, 16, 17, 18, 24, 25, 28)] == [
        1, 1.25, 4.75, 5, 5.5, 8.5, 9, 12]
    # counted from 1 (WeNet's step_num = k): the clock through the update itself
    wenet = _plan_2_4_8(counts_from=1)
    assert [wenet.position(k) for k in (1, 2, 16, 17, 18, 24, 25, 28)] == [
        0.25, 0.5, 4, 4.5, 5, 8, 9, 12]
    # counted from -1 (DeepSpeed's last_batch_iteration = k - 2)
    deepspeed = _plan_2_4_8(counts_from=-1)
    assert [deepspeed.position(k) for k in (1, 2, 3, 17, 25, 28)] == [1.75, 2, 2.25, 5.5, 9, 12]
    assert [plan.epoch(k) for k in (1, 16, 20, 24, 26, 28)] == [1 / 16, 1, 1.5, 2, 2.5, 3]
    assert [plan.samples(k) for k in (1, 16, 17, 24, 28)] == [16, 256, 288, 512, 768]
    # (epochs completed, updates into the next) after each update; a resume checks it
    assert [plan.done(k) for k in (0, 15, 16, 20, 24, 27, 28)] == [
        (0, 0), (0, 15), (1, 0), (1, 4), (2, 0), (2, 3), (3, 0)]
    # each stage evaluates on its own cadence, counted from its start
    assert [k for k in range(1, 29) if plan.eval_due(k)] == [8, 16, 20, 24, 26, 28]
    # the warmup's end in epochs: 300 final-stage updates' worth without a ramp is 300 / upe
    assert plan.epoch_at_position(4.75) == 1.0  # the first stage's last update
    assert plan.epoch_at_position(10) == 2.5  # the final stage's second update
    assert wenet.epoch_at_position(4) == 1.0 and wenet.epoch_at_position(10) == 2.5
    # max_updates may end the run inside a stage
    short = _plan_2_4_8(total_updates=20)
    assert [(s.world_size, s.updates) for s in short.segments] == [(2, 16), (4, 4)]


@pytest.mark.parametrize("counts_from", [-1, 0, 1])
def test_without_a_ramp_the_plan_is_the_plain_one(counts_from: int) -> None:
    plan = DataPlan(dataset_size=256, per_worker_batch=8, accum_grad=1, world_size=4,
                    total_updates=30, eval_every=4, counts_from=counts_from)
    for k in range(1, 31):
        position = plan.position(k)
        assert position == k and isinstance(position, int)  # the schedules see what they saw
        assert plan.done(k) == divmod(k, 8)
        assert plan.epoch(k) == k / 8 and plan.samples(k) == 32 * k
        assert plan.eval_due(k) == (k % 4 == 0)
    assert plan.epoch_at_position(12) == 12 / 8


def test_parse_describe_and_check() -> None:
    assert parse("4:1, 8:2") == (Stage(4, 1), Stage(8, 2))
    assert parse(None) == parse("none") == parse("") == ()
    assert describe(parse(" 4 :1,8:2")) == "4:1,8:2" and describe(()) == "none"
    for bad in ("4", "4:1;8:1", "4:x", "4:1,", "-4:1", 4):
        with pytest.raises(ValueError, match=r"V:epochs|must be a string"):
            parse(bad)  # type: ignore[arg-type]
    assert check(parse("4:1,8:1"), 16, 6) is None
    assert "rise and stay below the trial's world_size(16)" in str(check(parse("8:1,4:1"), 16, 6))
    assert "rise and stay below the trial's world_size(8)" in str(check(parse("4:1,8:1"), 8, 6))
    assert "at least 1" in str(check(parse("4:0"), 16, 6))
    assert "set training.epochs" in str(check(parse("4:1"), 16, None))
    assert "leaves nothing of training.epochs(2)" in str(check(parse("4:1,8:1"), 16, 2))


# -- the loop ----------------------------------------------------------------------------------


def _trial(world: int, stages: tuple[RampStage, ...] = (), **overrides: Any) -> TrialConfig:
    base: dict[str, Any] = {
        "name": "ramp", "workload": "mlp_regression", "workload_options": MLP,
        "world_size": world, "physical_workers": 1, "per_worker_batch": 8, "accum_grad": 1,
        "optimizer": {"type": "adam", "lr": 3e-3}, "scheduler": {"type": "warmuplr", "warmup_steps": 6},
        "total_updates": 40, "eval_every": 4, "dtype": "float64", "fuse": "off",
        "batch_ramp": stages,
    }  # fmt: skip
    return TrialConfig(**{**base, **overrides})


def _train(config: TrialConfig, resume_from: str | None = None,
           keep: dict[int, str] | None = None, tmp: Path | None = None) -> list[dict[str, Any]]:
    reports: list[dict[str, Any]] = []

    def on_report(metrics: dict[str, Any], checkpoint_dir: str | None) -> None:
        reports.append(metrics)
        if checkpoint_dir and keep is not None and tmp is not None:
            keep[metrics["update"]] = str(shutil.copytree(checkpoint_dir, tmp / f"c{metrics['update']}"))

    loop.train(config, LocalWorld(), on_report=on_report, resume_from=resume_from)
    return reports


def _untimed(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in m.items() if k != "wall_s"} for m in reports]


#: V = 2 for one epoch (16 updates), then V = 4 (8 updates per epoch)
FIXED_NONE = (RampStage(world_size=2, epochs=1, lr_multiplier=1.0, clock=1.0, eval_every=4),)


def test_the_first_stage_is_a_trial_at_its_world_size() -> None:
    """warmup fixed, lr rule none: clock and multiplier 1, so updates 1-16 are exactly those of
    a world-size-2 trial (same samples, same lr, same seeds); then the batch doubles."""
    ramp = _train(_trial(4, FIXED_NONE))
    plain = _train(_trial(2, total_updates=16))
    assert _untimed([m for m in ramp if m["update"] <= 16]) == [
        {**m, "status": "running"} for m in _untimed(plain)]  # the plain one ends at 16
    after = [m for m in ramp if m["update"] > 16]
    assert [m["update"] for m in after] == [20, 24, 28, 32, 36, 40]
    assert all(m["global_batch"] == 32 for m in after) and ramp[0]["global_batch"] == 16
    assert [m["epoch"] for m in after] == [1.5, 2, 2.5, 3, 3.5, 4]
    assert [m["samples_seen"] for m in after] == [256 + 32 * (k - 16) for k in (20, 24, 28, 32, 36, 40)]


def test_each_updates_lr_is_the_stage_multiplier_times_the_schedule_on_its_clock() -> None:
    stages = (RampStage(world_size=2, epochs=1, lr_multiplier=0.5, clock=0.5, eval_every=1),)
    config = _trial(4, stages, eval_every=1, total_updates=24)
    reports = _train(config)
    schedule = schedules.build(config.scheduler, 3e-3)
    for m in reports:
        k = m["update"]
        # WeNet's WarmupLR counts from 1: position = the clock through update k (16 x 1/2 = 8
        # after the first stage)
        position = k / 2 if k <= 16 else 8 + (k - 16)
        want = schedule.lr(position) * (0.5 if k <= 16 else 1.0)
        assert m["lr"] == pytest.approx(want, rel=1e-15), k


@pytest.mark.parametrize("scheduler", [
    {"type": "warmuplr", "warmup_steps": 6},  # counted from 1
    {"type": "gradual_warmup", "warmup_steps": 6, "start_lr": 0.0},  # from 0
    {"type": "ds_warmuplr", "warmup_num_steps": 6, "warmup_type": "linear",  # from -1
     "warmup_max_lr": 6e-3},
])
def test_a_scaled_first_stage_is_the_trial_at_its_batch_with_scaled_counts(
        scheduler: dict[str, Any]) -> None:
    """Linear lr, warmup scaled: the stage at half the batch runs half the lr on a clock of
    1/2, i.e. what a world-size-2 trial runs with every count doubled (12). For each way the
    originals count updates, lr and losses agree through the stage (rounding of the clock
    arithmetic only)."""
    from scalesweep.science.scaling import apply

    stages = (RampStage(world_size=2, epochs=1, lr_multiplier=0.5, clock=0.5, eval_every=2),)
    ramp = _train(_trial(4, stages, optimizer={"type": "adam", "lr": 6e-3}, scheduler=scheduler,
                         eval_every=2, total_updates=16))
    # the world-size-2 trial: the schedule tuned at 4 brought down to 2 by the same rules
    small, lr, _ = apply(schedules.resolve(scheduler), 6e-3, lr_factor=0.5, warmup_rule="scaled",
                         global_batch=16, reference_global_batch=32)
    plain = _train(_trial(2, optimizer={"type": "adam", "lr": lr}, scheduler=small,
                          eval_every=2, total_updates=16))
    assert [m["update"] for m in ramp] == [m["update"] for m in plain]
    for r, p in zip(ramp, plain, strict=True):
        assert r["lr"] == pytest.approx(p["lr"], rel=1e-14), r["update"]
        assert r["dev_loss"] == pytest.approx(p["dev_loss"], rel=1e-9), r["update"]


def test_a_resume_mid_ramp_is_the_uninterrupted_run(tmp_path: Path) -> None:
    stages = (RampStage(world_size=2, epochs=1, lr_multiplier=0.5, clock=0.5, eval_every=4),)
    config = _trial(4, stages, checkpoint_every=6)
    kept: dict[int, str] = {}
    whole = _train(config, keep=kept, tmp=tmp_path)
    for at in (12, 18):  # inside the first stage; inside the second
        resumed = _train(config, resume_from=kept[at])
        assert _untimed(resumed) == _untimed([m for m in whole if m["update"] > at])


def test_a_checkpoint_from_before_ramps_resumes_and_a_ramp_cannot_take_it(tmp_path: Path) -> None:
    """Checkpoints written before batch_ramp existed have no such field: the trial they belong
    to had no ramp, so they resume a trial without one, and no trial with one."""
    from scalesweep.trainables.checkpointing import META_FILE

    config = _trial(4, checkpoint_every=8, total_updates=16)
    kept: dict[int, str] = {}
    whole = _train(config, keep=kept, tmp=tmp_path)
    meta_file = Path(kept[8]) / META_FILE
    meta = json.loads(meta_file.read_text())
    del meta["config"]["batch_ramp"]
    meta_file.write_text(json.dumps(meta))
    assert _untimed(_train(config, resume_from=kept[8])) == _untimed(
        [m for m in whole if m["update"] > 8])
    with pytest.raises(ValueError, match=r"different trajectory.*batch_ramp"):
        _train(_trial(4, FIXED_NONE, total_updates=16), resume_from=kept[8])


def test_a_trial_with_more_workers_than_a_stage_has_ranks_is_refused() -> None:
    config = _trial(4, FIXED_NONE, physical_workers=3, backend="ddp")

    class _Three(LocalWorld):
        @property
        def size(self) -> int:
            return 3

    with pytest.raises(ValueError,
                       match=r"physical_workers\(3\) must be at most world_size\(2 in the batch ramp"):
        loop.train(config, _Three(), on_report=lambda m, c: None)


def test_real_ddp_makes_simulates_updates_through_the_stages(tmp_path: Path) -> None:
    """P = 2 gloo processes (no Ray) on a ramp 2 -> 4 with a fused final stage, against
    simulate: the same losses, lr, samples and parameters (float64)."""
    from tests.integration.test_uneven_ranks import (
        _assert_same,
        _assert_same_parameters,
        _run_group,
        _simulate,
    )

    stages = (RampStage(world_size=2, epochs=1, lr_multiplier=0.5, clock=0.5, eval_every=4),)
    trials = [
        _trial(4, stages, physical_workers=2, backend="ddp", name="ramp-p2"),
        _trial(6, (RampStage(world_size=2, epochs=1, lr_multiplier=1 / 3, clock=1 / 3, eval_every=4),
                   RampStage(world_size=4, epochs=1, lr_multiplier=2 / 3, clock=2 / 3, eval_every=4)),
               physical_workers=2, backend="ddp", name="ramp-p2-fused", fuse="auto",
               fuse_max_samples=16, total_updates=36),
    ]
    sim = {t.name: _simulate(t, tmp_path) for t in trials}
    by_rank = _run_group(2, [{"trial": t.model_dump(mode="json")} for t in trials], tmp_path)
    for trial in trials:
        _assert_same(by_rank[0][trial.name], sim[trial.name])
        _assert_same_parameters(tmp_path / f"{trial.name}.pt", tmp_path / f"{trial.name}-sim.pt")
        assert [m["global_batch"] for m in by_rank[0][trial.name]][-1] == trial.global_batch


# -- the planner -------------------------------------------------------------------------------

STUDY = ROOT / "sweeps" / "ramp_16.yaml"


def _plan(*sets: str) -> Any:
    from scalesweep.orchestrator.plan.cluster import ClusterInfo
    from scalesweep.orchestrator.plan.rows import make_plan
    from scalesweep.orchestrator.spec.load import load_sweep

    return make_plan(load_sweep(str(STUDY), list(sets)),
                     ClusterInfo(cpus=64, gpus=0, memory_gb=512, where="a test box"))


def test_the_shipped_study_plans_a_ramp_with_the_sweeps_rules() -> None:
    plan = _plan("axes.seed=[0]")
    rows = {r.batch_ramp: r for r in plan.rows}
    fixed, ramp = rows["none"], rows["4:1,8:1"]
    assert fixed.trial.batch_ramp == () and ramp.name.endswith("-ramp4x1-8x1")
    # 8192 utterances, batch 16: V = 4 -> 128 updates per epoch, 8 -> 64, 16 -> 32
    assert (fixed.total_updates, ramp.total_updates) == (6 * 32, 128 + 64 + 4 * 32)
    assert fixed.epochs == ramp.epochs == 6
    # linear lr and a scaled warmup: each stage at its batch's lr, the schedule in samples
    assert [(s.world_size, s.lr_multiplier, s.clock) for s in ramp.trial.batch_ramp] == [
        (4, 0.25, 0.25), (8, 0.5, 0.5)]
    # the warmup covers the same samples, so the same epochs, with or without the ramp
    assert ramp.warmup_epochs == pytest.approx(fixed.warmup_epochs, abs=0.01)
    assert any("batch ramp: 4 ranks for 1 epoch (batch 64, 128 updates, lr x 0.25" in n
               for n in ramp.notes)
    assert plan.baseline_for(ramp) is fixed
    # warmup fixed and lr rule none: the stages run the schedule in updates, at the same lr
    plan = _plan("axes.seed=[0]", "axes.warmup_rule=[fixed]", "axes.scaling_rule=[none]",
                 "baseline={world_size: 16, warmup_rule: fixed, scaling_rule: none, "
                 "training.batch_ramp: none}")
    ramp = next(r for r in plan.rows if r.batch_ramp != "none")
    assert [(s.lr_multiplier, s.clock) for s in ramp.trial.batch_ramp] == [(1, 1), (1, 1)]


def test_an_auto_total_ends_the_decay_where_the_ramped_run_ends() -> None:
    """wsd with ``total_steps: auto``: under the scaled clock a ramp's stages count B_s / B per
    update, so the run's length in the schedule's counts is the fixed-batch trial's (192), and
    the last update is the decay's last; in updates (fixed) it is the ramped run's 320."""
    wsd = "scheduler={type: wsd, warmup_steps: 30, decay_steps: 40, total_steps: auto}"
    for rule, want in (("scaled", 6 * 32), ("fixed", 128 + 64 + 4 * 32)):
        plan = _plan("axes.seed=[0]", wsd, f"axes.warmup_rule=[{rule}]",
                     f"baseline={{world_size: 16, warmup_rule: {rule}, scaling_rule: linear, "
                     "training.batch_ramp: none}")
        ramp = next(r for r in plan.rows if r.batch_ramp != "none")
        assert ramp.trial.scheduler["total_steps"] == want
        data = ramp.trial.data_plan(8192)
        assert round(data.position(ramp.total_updates)) == want  # the last update ends it
        fixed = next(r for r in plan.rows if r.batch_ramp == "none")
        assert fixed.trial.scheduler["total_steps"] == fixed.total_updates == 6 * 32


@pytest.mark.parametrize(("sets", "path", "rule"), [
    (["axes.training.batch_ramp=[none, '4:1,16:1']"], "axes.training.batch_ramp",
     "rise and stay below the trial's world_size(16)"),
    (["axes.world_size=[4, 16]"], "axes.training.batch_ramp",  # the hint that fixes the grid
     "to leave this combination out: exclude: [{world_size: 4, training.batch_ramp: '4:1,8:1'}]"),
    (["axes.training.batch_ramp=[none, '4-1']"], "axes.training.batch_ramp[1] -> training.batch_ramp",
     "is not V:epochs"),
    (["axes.training.batch_ramp=[none, '4:3,8:3']"], "axes.training.batch_ramp",
     "leaves nothing of training.epochs(6)"),
    (["axes.scaling_rule=[sqrt_adam]", "baseline.scaling_rule=sqrt_adam"], "axes.training.batch_ramp",
     "sqrt_adam changes Adam's betas"),
])
def test_a_bad_ramp_is_refused_by_name(sets: list[str], path: str, rule: str) -> None:
    from scalesweep.orchestrator.spec.errors import InputError

    with pytest.raises(InputError) as info:
        _plan(*sets)
    assert any(p.path.startswith(path) and rule in p.rule for p in info.value.problems), \
        info.value.problems


def test_plan_and_lr_plot_show_the_stages(tmp_path: Path) -> None:
    env = cli_env()
    out = subprocess.run([SCALESWEEP, "plan", str(STUDY), "--set", "axes.seed=[0]"],
                         capture_output=True, text=True, env=env, check=True).stdout
    assert "ramp" in out.splitlines()[1].split()  # the column
    assert "4:1,8:1" in out and "then 16 (batch 256)" in out
    png = tmp_path / "lr.png"
    run = subprocess.run([SCALESWEEP, "lr", str(STUDY), "--updates", "400", "--plot", str(png)],
                         capture_output=True,
                         text=True, env=env)
    assert run.returncode == 0, run.stderr
    assert png.stat().st_size > 10_000
    # the ramp panel: one curve per arm, stage boundaries marked (the panel's title names them)
    assert "batch ramp" in run.stdout + run.stderr


def test_the_ramp_needs_epochs() -> None:
    from scalesweep.orchestrator.spec.errors import InputError

    with pytest.raises(InputError) as info:
        _plan("training.epochs=null", "training.max_updates=400")
    assert any("set training.epochs" in p.rule for p in info.value.problems)
