"""Fused seeds (scalesweep.trainables.seed_fusion): K seeds trained at once make exactly the
updates of their solo trials (the loop, simulate, P = 1).

float64 on a CPU, each seed's reports (train loss, dev metrics, lr) and final parameters equal
its solo trial's to 1e-6 relative: initialisation, data order and, with dropout, every mask
come from the seed as in the solo trial; only float summation order differs. A seed that stops
leaves the others' trajectories as they were.
"""

from __future__ import annotations

import shutil
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch

from scalesweep.trainables import checkpointing, seed_fusion
from scalesweep.trainables.config import TrialConfig
from scalesweep.trainables.loop import train
from scalesweep.trainables.world import LocalWorld

RTOL = 1e-6
MLP = {"train_size": 256, "dev_size": 64}
#: one narrow conformer block, short utterances, dropout on: float64 convolutions are slow
ASR = {"train_size": 64, "dev_size": 8, "d_model": 16, "num_blocks": 1, "max_frames": 48, "dropout": 0.1}
KEYS = ("update", "samples_seen", "epoch", "global_batch", "train_loss", "lr", "status")

Run = tuple[list[dict[str, Any]], dict[str, torch.Tensor]]  # reports, final parameters


def _config(**overrides: Any) -> TrialConfig:
    base: dict[str, Any] = {
        "name": "seeds", "workload": "mlp_regression", "workload_options": MLP,
        "world_size": 2, "physical_workers": 1, "per_worker_batch": 4, "accum_grad": 2,
        "optimizer": {"type": "adam", "lr": 3e-3}, "scheduler": {"type": "warmuplr", "warmup_steps": 3},
        "total_updates": 6, "eval_every": 2, "dtype": "float64",
    }  # fmt: skip
    return TrialConfig(**{**base, **overrides})


def _asr(**overrides: Any) -> TrialConfig:
    return _config(**{"workload": "mini_asr", "workload_options": ASR, "accum_grad": 1,
                      "total_updates": 4, **overrides})


def _solo(config: TrialConfig) -> Run:
    """The loop's own trial: its reports and the parameters of its last checkpoint (once per
    config: the tests share the solo trials)."""
    return _solo_json(config.model_dump_json())


@cache
def _solo_json(config_json: str) -> Run:
    config = TrialConfig.model_validate_json(config_json)
    reports: list[dict[str, Any]] = []
    final: dict[str, torch.Tensor] = {}

    def on_report(metrics: dict[str, Any], directory: str | None) -> None:
        reports.append(metrics)
        if directory is not None:
            state = torch.load(Path(directory) / checkpointing.STATE_FILE, weights_only=True)
            final.clear()
            final.update(state["model"])

    train(config, LocalWorld(), on_report=on_report)
    return reports, final


def _fused(config: TrialConfig, seeds: tuple[int, ...],
           stop_after: dict[int, int] | None = None) -> dict[int, Run]:
    reports: dict[int, list[dict[str, Any]]] = {s: [] for s in seeds}

    def should_stop(seed: int, metrics: Any) -> bool:
        return stop_after is not None and metrics["update"] >= stop_after.get(seed, 10**9)

    outcomes = seed_fusion.train_seeds(config, seeds, on_report=lambda s, m, _: reports[s].append(m),
                                       should_stop=should_stop)
    return {s: (reports[s], outcomes[s].state_dict) for s in seeds}


def _assert_same(fused: Run, solo: Run, *, stopped_at: int | None = None) -> None:
    (f_reports, f_params), (s_reports, s_params) = fused, solo
    if stopped_at is not None:  # a solo trial as long as the fused seed ran: same values
        s_reports = [r for r in s_reports if r["update"] <= stopped_at]
    assert [r["update"] for r in f_reports] == [r["update"] for r in s_reports]
    for f, s in zip(f_reports, s_reports, strict=True):
        # the same keys as the solo report (noise_scale at V > 1 included); every value but
        # the clock equal
        assert sorted(f) == sorted(s), s["update"]
        for key in sorted(set(s) - {"wall_s"}):
            if key == "status" and stopped_at is not None:
                continue  # the fused seed was stopped, the shorter solo trial completed
            expected = s[key]
            if isinstance(expected, float):  # nan: a noise scale not measured yet
                expected = pytest.approx(expected, rel=RTOL, nan_ok=True)
            assert f[key] == expected, (key, s["update"])
    assert f_params.keys() == s_params.keys()
    for name, value in s_params.items():
        torch.testing.assert_close(f_params[name], value, rtol=RTOL, atol=1e-9, msg=name)


@pytest.mark.parametrize("fuse", ["off", "auto"])
def test_mlp_seeds_fused_equal_their_solo_trials(fuse: str) -> None:
    # "auto": mlp_regression is fusable, so both sides also fuse the virtual ranks' passes
    config = _config(fuse=fuse, grad_clip=0.5)
    fused = _fused(config, (0, 1, 2))
    for seed in (0, 1, 2):
        _assert_same(fused[seed], _solo(config.model_copy(update={"seed": seed})))


def test_mini_asr_with_dropout_seeds_fused_equal_their_solo_trials() -> None:
    # the seeds' batches differ in length: each seed's masks are drawn at its own length
    config = _asr()
    fused = _fused(config, (0, 3))
    for seed in (0, 3):
        _assert_same(fused[seed], _solo(config.model_copy(update={"seed": seed})))


def test_mini_asr_without_dropout_fuses_seeds_and_virtual_ranks() -> None:
    # fusable: both sides run the virtual ranks' samples in passes grouped by length
    config = _asr(workload_options={**ASR, "dropout": 0.0})
    fused = _fused(config, (0, 3))
    for seed in (0, 3):
        _assert_same(fused[seed], _solo(config.model_copy(update={"seed": seed})))


def test_a_seed_that_stops_leaves_the_batch_without_changing_the_others() -> None:
    config = _asr()
    fused = _fused(config, (0, 1, 3), stop_after={1: 2})
    # its last report is the solo trial's at update 2 ("running": the stop is decided after
    # it, as a Tune scheduler's), and nothing follows
    assert [r["update"] for r in fused[1][0]] == [2]
    solo_1 = _solo(config.model_copy(update={"seed": 1, "total_updates": 2}))
    _assert_same(fused[1], solo_1, stopped_at=2)
    for seed in (0, 3):
        _assert_same(fused[seed], _solo(config.model_copy(update={"seed": seed})))


def test_a_divergence_is_seen_where_the_solo_trial_sees_it() -> None:
    # every update's loss is above the threshold; the loop reads it at its 16th update (no
    # report before), so both end there, diverged, with the mean loss of those 16 updates
    config = _config(total_updates=40, eval_every=40, divergence_threshold=1e-9)
    fused = _fused(config, (0, 1))
    for seed in (0, 1):
        assert [(r["update"], r["status"]) for r in fused[seed][0]] == [(16, "diverged")]
        _assert_same(fused[seed], _solo(config.model_copy(update={"seed": seed})))


def test_the_noise_scale_of_each_seed_is_its_solo_trials() -> None:
    # V = 4: measured at every update (fuse off) or at every NOISE_EVERY-th (auto), per seed
    for fuse in ("off", "auto"):
        config = _config(world_size=4, accum_grad=1, fuse=fuse, total_updates=8, eval_every=4)
        fused = _fused(config, (0, 5))
        for seed in (0, 5):
            solo = _solo(config.model_copy(update={"seed": seed}))
            assert all(isinstance(r["noise_scale"], float) for r in solo[0])
            _assert_same(fused[seed], solo)


def _resumed(config: TrialConfig, checkpoint: Path) -> Run:
    """The loop's solo trial going on from ``checkpoint``: its reports and final parameters."""
    reports: list[dict[str, Any]] = []
    final: dict[str, torch.Tensor] = {}

    def on_report(metrics: dict[str, Any], directory: str | None) -> None:
        reports.append(metrics)
        if directory is not None:
            state = torch.load(Path(directory) / checkpointing.STATE_FILE, weights_only=True)
            final.update(state["model"])

    train(config, LocalWorld(), on_report=on_report, resume_from=checkpoint)
    return reports, final


def test_each_seeds_checkpoint_resumes_its_solo_trial(tmp_path: Path) -> None:
    # a checkpoint at every report, each seed's under its trial's name, in the loop's format
    config = _config(checkpoint_every=2)
    names = {0: "arm-s0", 4: "arm-s4"}

    def keep(seed: int, metrics: dict[str, Any], directory: str | None) -> None:
        if directory is not None:
            for sub in Path(directory).iterdir():
                shutil.copytree(sub, tmp_path / f"{sub.name}-u{metrics['update']}")

    seed_fusion.train_seeds(config, tuple(names), on_report=keep, names=names)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"{n}-u{u}" for n in names.values() for u in (2, 4, 6)]
    for seed, name in names.items():
        # the solo loop goes on from the fused seed's checkpoint at update 4, as from its own
        resumed = _resumed(config.model_copy(update={"seed": seed, "name": name}), tmp_path / f"{name}-u4")
        whole, whole_final = _solo(config.model_copy(update={"seed": seed}))
        _assert_same(resumed, ([r for r in whole if r["update"] > 4], whole_final))


def test_seeds_resumed_fused_from_their_checkpoints_go_on_as_their_solo_trials(tmp_path: Path) -> None:
    # fused seeds' checkpoints at update 4, then the same seeds fused again from them; and a
    # seed's solo trial's checkpoint serves as well (the format is the loop's)
    config = _config(checkpoint_every=2)
    names = {0: "arm-s0", 4: "arm-s4"}

    def keep(seed: int, metrics: dict[str, Any], directory: str | None) -> None:
        if directory is not None and metrics["update"] == 4:
            for sub in Path(directory).iterdir():
                shutil.copytree(sub, tmp_path / sub.name)

    seed_fusion.train_seeds(config, tuple(names), on_report=keep, names=names)
    reports: dict[int, list[dict[str, Any]]] = {s: [] for s in names}
    outcomes = seed_fusion.train_seeds(
        config, tuple(names), on_report=lambda s, m, _: reports[s].append(m), names=names,
        resume_from={s: tmp_path / n for s, n in names.items()})
    for seed in names:
        whole, whole_final = _solo(config.model_copy(update={"seed": seed}))
        _assert_same((reports[seed], outcomes[seed].state_dict),
                     ([r for r in whole if r["update"] > 4], whole_final))
    with pytest.raises(ValueError, match="every seed's checkpoint"):
        seed_fusion.train_seeds(config, (0, 4, 5), on_report=lambda s, m, _: None,
                                resume_from={s: tmp_path / n for s, n in names.items()})


def test_unsupported_settings_are_refused() -> None:
    with pytest.raises(NotImplementedError, match="float16"):
        seed_fusion.train_seeds(_config(dtype="float16"), (0, 1), on_report=lambda s, m, _: None)
    with pytest.raises(ValueError, match="distinct"):
        seed_fusion.train_seeds(_config(), (0, 0), on_report=lambda s, m, _: None)
