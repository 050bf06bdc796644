"""scalesweep.loop_helpers against the built-in loop (scalesweep.trainables.loop): the planned
schedule as a torch LRScheduler gives the built-in loop's lr (and Adam betas) at every update,
and a loop written with VirtualRanks makes the built-in loop's updates, in one process and in
a real gloo DDP group of 2 processes (no Ray) playing 3 virtual ranks unevenly; restore() and
the adapters' last_checkpoint() read the checkpoint ray.train.get_checkpoint() hands a loop (Ray
Train V2's local mode, which starts no Ray)."""

from __future__ import annotations

import io
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from scalesweep import loop_helpers
from scalesweep.science.batching import updates_per_epoch
from scalesweep.trainables import workloads
from scalesweep.trainables.config import TrialConfig
from scalesweep.trainables.loop import build_optimizer, train
from scalesweep.trainables.sharding import Sharding
from scalesweep.trainables.world import LocalWorld
from tests.support import gloo_group

MLP = {"train_size": 96, "dev_size": 32}
WARMUPLR = {"type": "warmuplr", "warmup_steps": 7}
DS_WARMUPLR = {"type": "ds_warmuplr", "warmup_min_lr": 1e-4, "warmup_max_lr": 3e-3,
               "warmup_num_steps": 9, "warmup_type": "log"}
ONECYCLE = {"type": "onecycle", "cycle_min_lr": 1e-4, "cycle_max_lr": 2e-3,
            "cycle_first_step_size": 6, "cycle_min_mom": 0.85, "cycle_max_mom": 0.95,
            "decay_lr_rate": 0.1, "decay_step_size": 4}


def _trial(world: int, scheduler: dict[str, Any], *, updates: int = 30, accum: int = 1,
           optimizer: dict[str, Any] | None = None, eval_every: int = 1) -> TrialConfig:
    return TrialConfig(
        name=f"helpers-v{world}", workload="mlp_regression", workload_options=MLP,
        world_size=world, physical_workers=1, per_worker_batch=4, accum_grad=accum,
        optimizer=optimizer or {"type": "adam", "lr": 2e-3}, scheduler=scheduler,
        total_updates=updates, eval_every=eval_every, dtype="float64", fuse="off")


def _loop_config(trial: TrialConfig) -> dict[str, Any]:
    """What a train_loop trial's config holds of these settings (orchestrator.plan.loop_config)."""
    size = MLP["train_size"]
    return {"world_size": trial.world_size, "per_worker_batch": trial.per_worker_batch,
            "accum_grad": trial.accum_grad, "seed": trial.seed, "train_size": size,
            "global_batch": trial.global_batch, "total_updates": trial.total_updates,
            "eval_every": trial.eval_every, "optimizer": trial.optimizer.as_dict(),
            "scheduler": trial.scheduler.as_dict(), "lr": trial.optimizer["lr"],
            "updates_per_epoch": updates_per_epoch(size, trial.world_size, trial.per_worker_batch,
                                                   trial.accum_grad)}


def _builtin(trial: TrialConfig, final: Path | None = None) -> list[dict[str, Any]]:
    """The built-in loop's reports (simulate, P = 1); its final parameters to ``final``."""
    reports: list[dict[str, Any]] = []

    def on_report(metrics: dict[str, Any], checkpoint_dir: str | None) -> None:
        reports.append(metrics)
        if final is not None and checkpoint_dir and metrics["status"] != "running":
            state = torch.load(Path(checkpoint_dir) / "state.pt", weights_only=True)
            torch.save(state["model"], final)

    train(trial, LocalWorld(), on_report=on_report)
    return reports


def _planned(trial: TrialConfig) -> tuple[list[float], list[tuple[float, float] | None]]:
    """The group's lr (and betas) before each update, from the helper's torch scheduler."""
    param = torch.nn.Parameter(torch.zeros(2))
    optimizer = build_optimizer(iter([param]), trial.optimizer)
    scheduler = loop_helpers.lr_scheduler(optimizer, _loop_config(trial))
    lrs, betas = [], []
    for _ in range(trial.total_updates):
        group = optimizer.param_groups[0]
        lrs.append(group["lr"])
        betas.append(tuple(group["betas"]) if "betas" in group else None)
        param.grad = torch.ones(2)
        optimizer.step()
        scheduler.step()
    return lrs, betas


@pytest.mark.parametrize("scheduler", [WARMUPLR, DS_WARMUPLR, ONECYCLE],
                         ids=["wenet_warmuplr", "deepspeed_warmuplr", "deepspeed_onecycle"])
def test_the_torch_scheduler_gives_the_builtin_loops_lr_at_every_update(
        scheduler: dict[str, Any]) -> None:
    trial = _trial(2, scheduler)
    reports = _builtin(trial)
    assert [m["update"] for m in reports] == list(range(1, trial.total_updates + 1))
    lrs, betas = _planned(trial)
    assert lrs == [m["lr"] for m in reports]  # to the bit
    if "momentum" in reports[0]:  # OneCycle cycles Adam's beta1 and holds beta2 at 0.99
        assert [b[0] if b else None for b in betas] == [m["momentum"] for m in reports]
        assert {b[1] if b else None for b in betas} == {0.99}


def test_the_torch_scheduler_follows_the_schedules_formulas() -> None:
    # WeNet WarmupLR: base * w^0.5 * min(k^-0.5, k * w^-1.5), update k at step_num k
    lrs, _ = _planned(_trial(2, WARMUPLR))
    w, base = 7, 2e-3
    for k, lr in enumerate(lrs, 1):
        assert lr == pytest.approx(base * w**0.5 * min(k**-0.5, k * w**-1.5), rel=1e-12)
    assert max(lrs) == pytest.approx(base) and lrs.index(max(lrs)) == w - 1
    # DeepSpeed WarmupLR, log: update k runs at last_batch_iteration i = k - 2 (update 1 holds
    # the constructor's warmup_min_lr); lr = min + (max - min) * log(i + 1) / log(n) while i < n
    lrs, _ = _planned(_trial(2, DS_WARMUPLR))
    lo, hi, n = 1e-4, 3e-3, 9
    expected = [lo] + [lo + (hi - lo) * (math.log(i + 1) / math.log(n) if i < n else 1.0)
                       for i in range(0, len(lrs) - 1)]
    assert lrs == pytest.approx(expected, rel=1e-12)
    assert lrs[:2] == [lo, lo] and lrs[-1] == hi


def test_the_scheduler_state_is_the_update_count() -> None:
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=0.1)
    config = _loop_config(_trial(1, WARMUPLR, optimizer={"type": "sgd", "lr": 0.1}))
    scheduler = loop_helpers.lr_scheduler(optimizer, config)
    for _ in range(4):
        optimizer.step()
        scheduler.step()
    state = scheduler.state_dict()
    assert state["last_epoch"] == 4 and "schedule" not in state
    torch.save(state, Path(os.devnull))  # plain data: a checkpoint can hold it
    assert scheduler.get_last_lr() == [loop_helpers.planned_schedule(config).lr(5)]


def test_micro_batches_are_the_samplers_and_cover_every_virtual_rank_once() -> None:
    config = _loop_config(_trial(5, WARMUPLR, accum=2))
    sharding = Sharding(MLP["train_size"], 5, 4, 2, seed=0)
    shares = [loop_helpers.VirtualRanks(config, rank=r, physical_workers=3) for r in range(3)]
    assert [list(s.virtual_ranks) for s in shares] == [[0, 1], [2, 3], [4]]
    for update in (1, 2, 5):
        passes = [mb for s in shares for mb in s.micro_batches(update)]
        assert [(mb.virtual_rank, mb.index) for mb in passes] == [(v, m) for v in range(5)
                                                                   for m in range(2)]
        assert [mb.indices for mb in passes] == [sharding.micro_batches(update, v)[m]
                                                 for v in range(5) for m in range(2)]
        assert [mb.last for mb in shares[0].micro_batches(update)] == [False, False, False, True]
    assert shares[0].loss_weight == 3 / (5 * 4 * 2)


def _builtin_float64(trial: TrialConfig, final: Path) -> list[dict[str, Any]]:
    """:func:`_builtin` with float64 the default dtype while it runs (the trial's dtype)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return _builtin(trial, final=final)
    finally:
        torch.set_default_dtype(previous)


def _helper_loop(config: dict[str, Any], *, rank: int | None = None,
                 physical_workers: int | None = None) -> tuple[list[float], torch.nn.Module]:
    """A loop of the user's written with the helpers around mlp_regression's model and data:
    each update's summed loss over the global batch, and the model."""
    workload = workloads.make("mlp_regression", MLP)
    torch.manual_seed(config["seed"])
    model = workload.build_model()
    ddp: torch.nn.Module = model
    if torch.distributed.is_initialized():
        ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = build_optimizer(model.parameters(), config["optimizer"])
    scheduler = loop_helpers.lr_scheduler(optimizer, config)
    ranks = loop_helpers.VirtualRanks(config, rank=rank, physical_workers=physical_workers)
    losses = []
    for update in range(1, config["total_updates"] + 1):
        optimizer.zero_grad(set_to_none=True)
        local = torch.zeros((), dtype=torch.float64)
        for mb in ranks.passes(ddp, update):
            per_sample = workload.loss(ddp, workload.train_batch(mb.indices))
            (per_sample.sum() * ranks.loss_weight).backward()
            local += per_sample.detach().sum()
        if torch.distributed.is_initialized():
            torch.distributed.all_reduce(local)
        optimizer.step()
        scheduler.step()
        losses.append(float(local))
    return losses, model


@pytest.fixture
def float64() -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def test_a_helper_loop_in_one_process_makes_the_builtin_loops_updates(
        tmp_path: Path, float64: None) -> None:
    trial = _trial(4, ONECYCLE, updates=12, accum=2)
    reports = _builtin(trial, final=tmp_path / "builtin.pt")
    losses, model = _helper_loop(_loop_config(trial))
    assert [x / trial.global_batch for x in losses] == pytest.approx(
        [m["train_loss"] for m in reports], rel=1e-12)
    builtin = torch.load(tmp_path / "builtin.pt", weights_only=True)
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, builtin[name], rtol=1e-12, atol=0)


def _gloo_job(rank: int, config: dict[str, Any], out: str) -> None:
    torch.set_default_dtype(torch.float64)
    losses, model = _helper_loop(config)  # P and the rank from the process group
    Path(out, f"rank{rank}.json").write_text(json.dumps(losses))
    if rank == 0:
        torch.save(model.state_dict(), Path(out, "helper.pt"))


def test_a_helper_loop_under_real_ddp_plays_uneven_virtual_ranks_as_the_builtin_loop(
        tmp_path: Path) -> None:
    """V = 3 on P = 2 gloo processes (ranks 0-1 and 2): the same updates as the built-in loop
    at P = 1, up to float summation order."""
    trial = _trial(3, WARMUPLR, updates=10, accum=2, optimizer={"type": "sgd", "lr": 0.05,
                                                                 "momentum": 0.9})
    reports = _builtin_float64(trial, final=tmp_path / "builtin.pt")
    gloo_group.run(2, _gloo_job, (_loop_config(trial), str(tmp_path)), tmp_path)
    by_rank = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert by_rank[0] == by_rank[1]
    assert [x / trial.global_batch for x in by_rank[0]] == pytest.approx(
        [m["train_loss"] for m in reports], rel=1e-9)
    helper = torch.load(tmp_path / "helper.pt", weights_only=True)
    builtin = torch.load(tmp_path / "builtin.pt", weights_only=True)
    for name, value in helper.items():
        torch.testing.assert_close(value, builtin[name], rtol=1e-9, atol=1e-12)


def test_reports_carry_the_contracts_keys() -> None:
    config = {"updates_per_epoch": 8, "global_batch": 64, "eval_every": 4, "total_updates": 30}
    out = loop_helpers.build_report(config, update=12, dev_loss=0.5, train_loss=0.75, lr=1e-3,
                                    accuracy=0.9, dev_ter=0.2)
    assert out == {"update": 12, "epoch": 1.5, "samples_seen": 768.0, "dev_loss": 0.5,
                   "dev_accuracy": 0.9, "dev_ter": 0.2, "train_loss": 0.75, "lr": 1e-3}
    assert [u for u in range(1, 31) if loop_helpers.eval_due(config, u)] == [4, 8, 12, 16, 20,
                                                                               24, 28, 30]


def test_data_position_is_the_epoch_and_the_updates_into_it() -> None:
    config = {"updates_per_epoch": 32}
    assert [loop_helpers.data_position(config, u) for u in (0, 8, 31, 32, 40, 96)] == [
        (0, 0), (0, 8), (0, 31), (1, 0), (1, 8), (3, 0)]


def test_report_takes_a_state_or_a_checkpoint_not_both() -> None:
    config = {"updates_per_epoch": 8, "global_batch": 64}
    with pytest.raises(ValueError, match="not both"):
        loop_helpers.report(config, update=8, dev_loss=0.5, state={"update": 8},
                            checkpoint=object())


def test_a_restored_planned_schedule_goes_on_with_the_same_lr() -> None:
    """The scheduler state a loop checkpoints (its update count) puts the restored loop on the
    planned lr of the next update, as the uninterrupted one."""
    config = {"schedule": WARMUPLR, "optimizer": {"type": "sgd", "lr": 0.1}}
    params = [torch.nn.Parameter(torch.zeros(1))]

    def scheduler() -> tuple[torch.optim.SGD, loop_helpers.PlannedLR]:
        optimizer = torch.optim.SGD(params, lr=0.1)
        return optimizer, loop_helpers.lr_scheduler(optimizer, config)

    optimizer, planned = scheduler()
    for _ in range(5):
        optimizer.step()
        planned.step()
    saved = torch.load(_saved({"optimizer": optimizer.state_dict(),
                               "scheduler": planned.state_dict()}), weights_only=True)
    restored_optimizer, restored = scheduler()
    restored_optimizer.load_state_dict(saved["optimizer"])
    restored.load_state_dict(saved["scheduler"])
    for _ in range(10):
        assert restored.get_last_lr() == planned.get_last_lr()
        assert restored_optimizer.param_groups[0]["lr"] == planned.lr_at(planned.last_epoch + 1)
        for opt, sched in ((optimizer, planned), (restored_optimizer, restored)):
            opt.step()
            sched.step()


def _saved(state: dict[str, Any]) -> io.BytesIO:
    """``state`` through torch.save, as report(state=...) writes it."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return buffer


def _what_the_restore_helpers_see() -> dict[str, Any]:
    """What restore() and the adapters' last_checkpoint() give the loop now."""
    from scalesweep.adapters import hf, lightning

    with hf.last_checkpoint() as directory, lightning.last_checkpoint() as ckpt_path:
        return {"state": loop_helpers.restore(), "hf": directory, "lightning": ckpt_path}


def _loop_restarting_from(config: dict[str, Any]) -> dict[str, Any]:
    """A train function that sees no checkpoint, is handed one (as a restarted worker is) and
    then one without report(state=)'s file."""
    import ray.train

    seen: dict[str, Any] = {"first": _what_the_restore_helpers_see()}
    ray.train.report({"update": 4}, checkpoint=ray.train.Checkpoint.from_directory(config["kept"]))
    seen["restarted"] = _what_the_restore_helpers_see()
    ray.train.report({"update": 8}, checkpoint=ray.train.Checkpoint.from_directory(config["other"]))
    try:
        loop_helpers.restore()
    except FileNotFoundError as error:
        seen["refused"] = str(error)
    return seen


def test_every_restore_helper_reads_the_checkpoint_ray_train_hands_the_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """restore(), hf.last_checkpoint() and lightning.last_checkpoint() read the checkpoint that
    ray.train.get_checkpoint() hands the loop: None on a first start, then report(state=)'s state
    and the adapters' checkpoints, all in that one directory; a checkpoint without the state file
    is refused by name. Ray Train V2's own functions, in its local mode (num_workers=0: the train
    function runs in this process and get_checkpoint() gives the last checkpoint it reported; no
    Ray is started). That every rank of a restarted group gets rank 0's checkpoint is
    tests/integration/test_adapters_e2e.py's (an in-run restart, through the adapters) and
    test_user_loop_e2e.py's (restore() after a resume)."""
    import ray
    from ray.train.torch import TorchTrainer
    from ray.train.v2._internal.execution import train_fn_utils
    from ray.train.v2.api.config import ScalingConfig

    from scalesweep.adapters.lightning import CHECKPOINT_FILE

    # local mode leaves its train function's context behind in this process: put it back after
    monkeypatch.setattr(train_fn_utils, "_train_fn_utils", None)
    kept, other = tmp_path / "kept", tmp_path / "other"
    kept.mkdir()
    other.mkdir()
    # what report(state=) writes (the other ranks write nothing) beside a Lightning checkpoint
    torch.save({"update": 4, "w": torch.ones(2)}, kept / loop_helpers.STATE_FILE)
    (kept / CHECKPOINT_FILE).write_bytes(b"lightning")
    (other / CHECKPOINT_FILE).write_bytes(b"lightning")
    result = TorchTrainer(_loop_restarting_from, scaling_config=ScalingConfig(num_workers=0),
                          train_loop_config={"kept": str(kept), "other": str(other)}).fit()
    assert not ray.is_initialized()
    seen = result.return_value
    assert seen["first"] == {"state": None, "hf": None, "lightning": None}
    restarted = seen["restarted"]
    assert restarted["state"].keys() == {"update", "w"} and restarted["state"]["update"] == 4
    assert torch.equal(restarted["state"]["w"], torch.ones(2))
    assert Path(restarted["hf"]) == kept
    assert Path(restarted["lightning"]) == kept / CHECKPOINT_FILE
    assert seen["refused"].startswith(f"restore: checkpoint {other} has no {loop_helpers.STATE_FILE}")
