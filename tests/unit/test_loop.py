"""The shared training loop in simulate mode (P = 1): reports, stops, checkpoints, resume."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from scalesweep.science.batching import updates_per_epoch
from scalesweep.science.stats.convergence import smooth
from scalesweep.trainables import checkpointing
from scalesweep.trainables.config import TrialConfig
from scalesweep.trainables.loop import build_optimizer, train
from scalesweep.trainables.world import LocalWorld

Reports = list[tuple[dict[str, Any], str | None]]

MLP = {"train_size": 256, "dev_size": 96}  # 4 ranks x 8 x accum 2 -> 4 updates per epoch


def _config(**overrides: Any) -> TrialConfig:
    base: dict[str, Any] = {
        "name": "t",
        "workload": "mlp_regression",
        "workload_options": MLP,
        "world_size": 4,
        "physical_workers": 1,
        "per_worker_batch": 8,
        "accum_grad": 2,
        "optimizer": {"type": "adam", "lr": 3e-3},
        "scheduler": {"type": "warmuplr", "warmup_steps": 5},
        "total_updates": 14,
        "eval_every": 4,
        "dtype": "float64",
    }
    return TrialConfig(**{**base, **overrides})


def _run(
    config: TrialConfig, resume_from: str | Path | None = None, keep_final: Path | None = None
) -> tuple[Reports, dict[str, Any]]:
    """Reports and final result; ``keep_final`` receives a copy of the last checkpoint."""
    reports: Reports = []

    def on_report(metrics: dict[str, Any], checkpoint_dir: str | None) -> None:
        reports.append((metrics, checkpoint_dir))
        if keep_final is not None and checkpoint_dir and metrics["status"] != "running":
            shutil.copytree(checkpoint_dir, keep_final)

    final = train(config, LocalWorld(), on_report=on_report, resume_from=resume_from)
    return reports, final


def _without_time(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if k not in ("wall_s", "train_seconds")}


class _FiveProcesses(LocalWorld):
    @property
    def size(self) -> int:
        return 5


def test_invalid_arguments() -> None:
    # any P up to V plays (tests/integration/test_uneven_ranks.py); beyond V a worker would have no rank
    with pytest.raises(ValueError, match=r"physical_workers\(5\) must be at most world_size\(4\)"):
        train(_config(), _FiveProcesses(), on_report=lambda m, d: None)
    with pytest.raises(ValueError, match="optimizer type"):
        build_optimizer(iter([torch.nn.Parameter(torch.zeros(1))]), {"type": "lamb", "lr": 1})
    with pytest.raises(ValueError, match="global batch"):
        _run(_config(workload_options={"train_size": 40, "dev_size": 8}))


def test_reports_cadence_keys_and_final_result() -> None:
    config = _config()
    reports, final = _run(config)
    assert [m["update"] for m, _ in reports] == [4, 8, 12, 14]
    assert [m["status"] for m, _ in reports] == ["running"] * 3 + ["completed"]
    upe = updates_per_epoch(256, 4, 8, 2)
    assert upe == 4
    for metrics, _ in reports:
        assert set(metrics) == {
            "update", "samples_seen", "epoch", "wall_s", "train_loss", "dev_loss", "lr", "status",
            "global_batch", "noise_scale",  # V = 4 > 1: the gradient noise scale comes for free
        }  # fmt: skip
        assert isinstance(metrics["noise_scale"], float)
        assert metrics["samples_seen"] == metrics["update"] * config.global_batch == (metrics["update"] * 64)
        assert metrics["epoch"] == metrics["update"] / upe
        assert metrics["train_loss"] > 0 and metrics["dev_loss"] > 0
    # warmuplr: lr(k) = base * min(k / w, sqrt(w / k)), the value the update used
    assert reports[0][0]["lr"] == pytest.approx(3e-3 * 4 / 5)
    assert reports[1][0]["lr"] == pytest.approx(3e-3 * (5 / 8) ** 0.5)
    assert reports[0][0]["dev_loss"] > reports[-1][0]["dev_loss"]  # it learns
    assert final == {**reports[-1][0], "train_seconds": final["train_seconds"]}
    assert final["train_seconds"] >= final["wall_s"] > 0
    # only the end checkpoints when checkpoint_every = 0; the directory lives during the call
    assert [d is not None for _, d in reports] == [False, False, False, True]
    assert not Path(str(reports[-1][1])).exists()
    assert torch.get_default_dtype() == torch.float32  # float64 did not leak out


def test_wall_time_checkpoint_cadence_picks_among_evals() -> None:
    """checkpoint_every_s checkpoints at the first eval that long after the last checkpoint:
    a cadence shorter than one eval's work checkpoints at every eval, a long one only at the
    end; either way the reports (and so the evals) are the same."""
    often, _ = _run(_config(checkpoint_every_s=1e-9))
    rarely, _ = _run(_config(checkpoint_every_s=3600.0))
    assert [d is not None for _, d in often] == [True, True, True, True]
    assert [d is not None for _, d in rarely] == [False, False, False, True]
    assert [_without_time(m) for m, _ in often] == [_without_time(m) for m, _ in rarely]


def test_momentum_reported_when_the_schedule_drives_betas() -> None:
    onecycle = {"type": "onecycle", "cycle_min_lr": 1e-4, "cycle_max_lr": 3e-3,
                "cycle_first_step_size": 6, "cycle_min_mom": 0.8, "cycle_max_mom": 0.9}  # fmt: skip
    reports, _ = _run(_config(scheduler=onecycle))
    moms = [m["momentum"] for m, _ in reports]
    assert all(0.8 <= x <= 0.9 for x in moms) and len(set(moms)) > 1
    # SGD has no betas: DeepSpeed leaves it alone, and so do we
    reports, _ = _run(_config(scheduler=onecycle, optimizer={"type": "sgd", "lr": 0.01}))
    assert all("momentum" not in m for m, _ in reports)


def test_accumulation_is_the_mean_over_the_global_batch() -> None:
    """V=4 x accum 2 x batch 8 and V=1 x accum 1 x batch 64 see different samples but both
    take the mean: with one update over the full data (one epoch = one update) they agree."""
    opts = {"train_size": 64, "dev_size": 32}
    sgd = {"type": "sgd", "lr": 0.05}
    common: dict[str, Any] = {
        "workload_options": opts, "optimizer": sgd, "scheduler": {"type": "constant"},
        "total_updates": 1, "eval_every": 1,
    }  # fmt: skip
    a, _ = _run(_config(world_size=4, per_worker_batch=8, accum_grad=2, **common))
    b, _ = _run(_config(world_size=1, per_worker_batch=64, accum_grad=1, **common))
    assert a[0][0]["train_loss"] == pytest.approx(b[0][0]["train_loss"], rel=1e-12)
    assert a[0][0]["dev_loss"] == pytest.approx(b[0][0]["dev_loss"], rel=1e-9)


def test_grad_clip_changes_the_updates() -> None:
    free, _ = _run(_config(optimizer={"type": "sgd", "lr": 0.5}))
    clipped, _ = _run(_config(optimizer={"type": "sgd", "lr": 0.5}, grad_clip=1e-3))
    assert free[0][0]["dev_loss"] != clipped[0][0]["dev_loss"]
    assert clipped[0][0]["dev_loss"] > free[0][0]["dev_loss"]  # tiny steps learn less


def test_divergence_stops_the_trial() -> None:
    reports, final = _run(_config(optimizer={"type": "sgd", "lr": 1e4}, total_updates=40))
    assert final["status"] == "diverged"
    assert reports[-1][0]["status"] == "diverged" and reports[-1][1] is not None
    assert final["update"] < 40
    # above the threshold from update 1 on; the loop reads its training losses at reports and
    # every DIVERGENCE_EVERY-th update (no host sync per update), so the trial ends at the first
    # report, update 4, as diverged (tests/unit/test_host_syncs.py: sparser evals)
    reports, final = _run(_config(divergence_threshold=1e-6))
    assert final["status"] == "diverged" and final["update"] == 4
    assert [(m["update"], m["status"]) for m, _ in reports] == [(4, "diverged")]


def test_stop_at_target() -> None:
    target = {"metric": "dev_loss", "value": 10.0, "mode": "min"}
    reports, final = _run(_config(stop_at_target=target))
    assert [m["status"] for m, _ in reports] == ["stopped"]
    assert final["update"] == 4


def _smoothed_stop(alpha: float) -> tuple[dict[str, Any], int, int]:
    """A stop_at_target with EMA weight ``alpha`` that the raw evals reach before the smoothed
    ones do, and the updates at which each first reaches it (from a run without a stop)."""
    free, _ = _run(_config(eval_every=2, total_updates=40))
    evals = [(m["update"], m["dev_loss"]) for m, _ in free]
    smoothed = smooth([v for _, v in evals], alpha)
    value = smoothed[-2]  # the EMA reaches it at the second-last eval
    raw_at = next(u for u, v in evals if v <= value)
    ema_at = next(u for (u, _), e in zip(evals, smoothed, strict=True) if e <= value)
    assert raw_at < ema_at  # the raw evals reach it first: the case the smoothing decides
    return {"metric": "dev_loss", "value": value, "mode": "min", "smoothing": alpha}, raw_at, ema_at


def test_a_smoothed_target_stops_where_the_study_reads_the_crossing() -> None:
    # the study reads a crossing through the EMA (target.smoothing): a trial stopped where only
    # its raw eval crossed would end before its own crossing and count as never reaching
    stop, _, ema_at = _smoothed_stop(0.8)
    reports, final = _run(_config(eval_every=2, total_updates=40, stop_at_target=stop))
    assert (reports[-1][0]["status"], final["update"]) == ("stopped", ema_at)
    assert all(m["status"] == "running" for m, _ in reports[:-1])


def test_a_resumed_trial_stops_at_the_smoothed_crossing_of_all_its_evals(tmp_path: Path) -> None:
    stop, raw_at, ema_at = _smoothed_stop(0.8)
    config = _config(eval_every=2, total_updates=40, checkpoint_every=2, stop_at_target=stop)
    saved = tmp_path / "ckpt"

    class Crash(Exception):
        pass

    def crash(metrics: dict[str, Any], checkpoint_dir: str | None) -> None:
        if checkpoint_dir is not None and metrics["update"] == raw_at - 2:  # the eval before it
            shutil.copytree(checkpoint_dir, saved)
            raise Crash

    assert raw_at > 2
    with pytest.raises(Crash):
        train(config, LocalWorld(), on_report=crash)
    # the EMA goes on from every eval before the checkpoint, not from the last one alone
    reports, final = _run(config, resume_from=saved)
    assert (reports[-1][0]["status"], final["update"]) == ("stopped", ema_at)


def test_checkpoint_cadence_adds_evaluated_reports() -> None:
    reports, _ = _run(_config(checkpoint_every=6))
    assert [(m["update"], d is not None) for m, d in reports] == [
        (4, False), (6, True), (8, False), (12, True), (14, True)
    ]  # fmt: skip
    assert all("dev_loss" in m for m, _ in reports)  # Tune needs the metric in every result


@pytest.mark.parametrize(
    "optimizer", [{"type": "adam", "lr": 3e-3}, {"type": "sgd", "lr": 0.05, "momentum": 0.9}]
)
def test_interrupted_and_resumed_equals_uninterrupted_bit_for_bit(
    tmp_path: Path, optimizer: dict[str, Any]
) -> None:
    # checkpoint at 6: mid-epoch (4 updates per epoch) and between evals (every 4)
    config = _config(checkpoint_every=6, optimizer=optimizer)
    uninterrupted, final = _run(config, keep_final=tmp_path / "uninterrupted")

    saved = tmp_path / "at6"

    class Crash(Exception):
        pass

    def crash_after_checkpoint(metrics: dict[str, Any], checkpoint_dir: str | None) -> None:
        if checkpoint_dir is not None:
            shutil.copytree(checkpoint_dir, saved)
        if metrics["update"] == 8:  # reported 4, checkpointed 6, dies while reporting 8
            raise Crash

    with pytest.raises(Crash):
        train(config, LocalWorld(), on_report=crash_after_checkpoint)

    resumed, resumed_final = _run(config, resume_from=saved, keep_final=tmp_path / "resumed")
    # continues after its checkpoint: updates 4 and 6 are not reported again; the noise
    # scale's moving averages come back from the checkpoint too
    assert all("noise_scale" in m for m, _ in resumed)
    expected = [_without_time(m) for m, _ in uninterrupted if m["update"] > 6]
    assert [_without_time(m) for m, _ in resumed] == expected  # exact float equality
    assert _without_time(resumed_final) == _without_time(final)
    assert resumed_final["train_seconds"] > 0
    a, b = (
        torch.load(tmp_path / name / checkpointing.STATE_FILE, weights_only=True)
        for name in ("uninterrupted", "resumed")
    )
    for part in ("model", "optimizer"):
        assert _flat(a[part]) == _flat(b[part])


def _flat(state: Any) -> list[Any]:
    """Leaves of a state dict, tensors as bytes, so == is bitwise."""
    if isinstance(state, dict):
        return [x for k in sorted(state, key=str) for x in [k, *_flat(state[k])]]
    if isinstance(state, (list, tuple)):
        return [x for v in state for x in _flat(v)]
    if isinstance(state, torch.Tensor):
        return [state.dtype, tuple(state.shape), state.numpy().tobytes()]
    return [state]


def test_resuming_a_finished_trial_reports_nothing(tmp_path: Path) -> None:
    config = _config(total_updates=4)
    saved = tmp_path / "final"

    def keep(metrics: dict[str, Any], d: str | None) -> None:
        if d is not None:
            shutil.copytree(d, saved)

    final = train(config, LocalWorld(), on_report=keep)
    reports, again = _run(config, resume_from=saved)
    assert reports == []
    assert _without_time(again) == _without_time(final)


def test_checkpoint_of_another_trajectory_is_refused(tmp_path: Path) -> None:
    saved = tmp_path / "ckpt"

    def keep(metrics: dict[str, Any], d: str | None) -> None:
        if d is not None and not saved.exists():
            shutil.copytree(d, saved)

    train(_config(total_updates=8, checkpoint_every=4), LocalWorld(), on_report=keep)
    with pytest.raises(ValueError, match="seed"):
        _run(_config(total_updates=8, seed=1), resume_from=saved)
    # but another backend / number of processes may continue it (virtual ranks)
    reports, _ = _run(_config(total_updates=8, backend="ddp", physical_workers=4), saved)
    assert [m["update"] for m, _ in reports] == [8]


def test_world_size_16_mini_asr_simulates_with_a_quarter_of_the_updates_per_epoch() -> None:
    """The WeNet effect: 16 ranks x the same per-rank batch make 1/4 of the updates per epoch
    that 4 ranks make; and the 16-rank arm runs in one process."""
    asr = {"train_size": 512, "dev_size": 16, "d_model": 32, "num_blocks": 1, "dropout": 0.1}

    def arm(world: int, updates: int) -> TrialConfig:
        return _config(workload="mini_asr", workload_options=asr, world_size=world,
                       per_worker_batch=4, accum_grad=1, total_updates=updates,
                       eval_every=updates, optimizer={"type": "adam", "lr": 1e-3},
                       dtype="float32")  # fmt: skip

    ws16, final16 = _run(arm(16, 2))
    ws4, _ = _run(arm(4, 1))
    upe16, upe4 = (r[-1][0]["update"] / r[-1][0]["epoch"] for r in (ws16, ws4))
    assert (upe16, upe4) == (8, 32) == (updates_per_epoch(512, 16, 4), updates_per_epoch(512, 4, 4))
    assert final16["samples_seen"] == 2 * 64 and final16["status"] == "completed"
    assert {"dev_loss", "dev_ter"} <= set(final16)


def test_batches_move_to_an_accelerator_whatever_their_container() -> None:
    # "meta" stands in for a GPU here: every tensor must move, every container keep its type
    from typing import NamedTuple

    from scalesweep.trainables.loop import _to_device

    class Batch(NamedTuple):
        x: torch.Tensor
        lengths: list[torch.Tensor]

    moved = _to_device({"b": Batch(torch.ones(2), [torch.zeros(1)]), "n": 3},
                       torch.device("meta"))
    assert isinstance(moved["b"], Batch) and moved["n"] == 3
    assert moved["b"].x.device.type == "meta" and moved["b"].lengths[0].device.type == "meta"
