"""Fused virtual ranks (scalesweep.trainables.fusion): the passes, the flag, and the loop's updates.

A fused update runs a process's micro-batches in a few passes grouped by length instead of one
per virtual rank; its gradient is the same weighted sum, so in float64 a fused run reports the
same losses as an unfused one to 1e-9 relative (only float summation order differs). Real DDP
against both: tests/integration/test_equivalence_ddp.py.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from scalesweep.science.noise_scale import EMA_DECAY, NoiseScale
from scalesweep.trainables import fusion, loop, workloads
from scalesweep.trainables.config import TrialConfig
from scalesweep.trainables.loop import NOISE_EVERY, train
from scalesweep.trainables.world import LocalWorld

RTOL = 1e-9
#: one conformer block of width 32, short utterances: float64 convolutions are slow on a CPU
ASR = {"train_size": 256, "dev_size": 16, "d_model": 32, "num_blocks": 1, "max_frames": 64}
MLP = {"train_size": 512, "dev_size": 96}


def _config(**overrides: Any) -> TrialConfig:
    base: dict[str, Any] = {
        "name": "fused", "workload": "mlp_regression", "workload_options": MLP,
        "world_size": 4, "physical_workers": 1, "per_worker_batch": 8, "accum_grad": 2,
        "optimizer": {"type": "adam", "lr": 3e-3}, "scheduler": {"type": "warmuplr", "warmup_steps": 5},
        "total_updates": 12, "eval_every": 4, "dtype": "float64",
    }  # fmt: skip
    return TrialConfig(**{**base, **overrides})


def _reports(config: TrialConfig) -> list[dict[str, Any]]:
    reports: list[dict[str, Any]] = []
    train(config, LocalWorld(), on_report=lambda m, _: reports.append(m))
    return reports


def _assert_same_losses(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> float:
    """Equal updates and losses to RTOL; returns the largest relative deviation seen."""
    assert [m["update"] for m in a] == [m["update"] for m in b]
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        for key in [k for k in y if k == "train_loss" or k.startswith("dev_")]:
            assert x[key] == pytest.approx(y[key], rel=RTOL), (key, x["update"])
            worst = max(worst, abs(x[key] - y[key]) / abs(y[key]))
    return worst


# -- the passes ------------------------------------------------------------------------------


def test_plan_passes_fewest_equal_passes_keeping_every_sample() -> None:
    indices = [9, 3, 3, 7, 1, 5, 0]  # a duplicate, as DistributedSampler's padding makes
    passes = fusion.plan_passes(indices, 3)
    assert [len(p) for p in passes] == [2, 2, 3]  # ceil(7 / 3) = 3 passes, sizes within one
    assert [i for p in passes for i in p] == indices  # no lengths: the sharding's order
    assert fusion.plan_passes(indices, 7) == [indices]
    assert fusion.plan_passes([], 4) == []
    with pytest.raises(ValueError, match="max_samples"):
        fusion.plan_passes(indices, 0)


def test_plan_passes_groups_by_length_stably() -> None:
    indices = [10, 11, 12, 13, 14, 15]
    lengths = [50, 10, 50, 20, 10, 30]
    passes = fusion.plan_passes(indices, 2, lengths)
    assert passes == [[11, 14], [13, 15], [10, 12]]  # ties (11/14, 10/12) keep their order
    padded = sum(len(p) * max(lengths[indices.index(i)] for i in p) for p in passes)
    assert padded == 2 * 10 + 2 * 30 + 2 * 50  # against 6 * 50 in one pass


def test_budget_from_config_or_device() -> None:
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert fusion.pass_budget(_config(), cpu) == fusion.CPU_PASS_SAMPLES
    assert fusion.pass_budget(_config(per_worker_batch=128), cpu) == 128  # never below a micro-batch
    assert fusion.pass_budget(_config(), gpu) == 8  # what the user showed fits
    assert fusion.pass_budget(_config(fuse_max_samples=5), gpu) == 5


def test_the_flag_is_on_for_the_builtins_that_qualify_and_off_by_default() -> None:
    assert fusion.fusable(workloads.make("mlp_regression", {}))
    assert fusion.fusable(workloads.make("digits_cnn", {}))
    asr = workloads.make("mini_asr", ASR)
    assert fusion.fusable(asr)
    # dropout draws masks per micro-batch from the reseeded RNG: not fusable
    assert not fusion.fusable(workloads.make("mini_asr", {**ASR, "dropout": 0.1}))
    # a workload that says nothing is not fused (the noise-scale test's own workload)
    assert not fusion.fusable(workloads.make("tests.unit.test_noise_scale:make_linear", {"train_size": 64}))
    assert fusion.sample_lengths(workloads.make("mlp_regression", {}), [0, 1]) is None
    frames = fusion.sample_lengths(asr, [3, 1, 4])
    assert frames == [int(n) for n in asr.train_batch([3, 1, 4]).feat_lens]
    assert fusion.fuses(_config(), workloads.make("mlp_regression", {}))
    assert not fusion.fuses(_config(fuse="off"), workloads.make("mlp_regression", {}))


def test_a_fused_pass_gives_each_sample_the_loss_it_has_alone() -> None:
    """The flag's promise for mini_asr: padding to a longer utterance changes nothing."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        asr = workloads.make("mini_asr", ASR)
        torch.manual_seed(0)
        model = asr.build_model()
        together = asr.loss(model, asr.train_batch(list(range(12))))
        alone = torch.cat([asr.loss(model, asr.train_batch([i])) for i in range(12)])
    finally:
        torch.set_default_dtype(previous)
    assert torch.allclose(together, alone, rtol=1e-12, atol=0)


# -- the loop --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("world", "accum", "budget"),
    [(4, 2, None), (4, 2, 5), (16, 1, None), (16, 1, 24)],
    ids=["V4-auto", "V4-5-per-pass", "V16-auto", "V16-24-per-pass"],
)
def test_fused_equals_unfused_mlp(world: int, accum: int, budget: int | None) -> None:
    config = _config(world_size=world, accum_grad=accum, fuse_max_samples=budget)
    worst = _assert_same_losses(_reports(config), _reports(config.model_copy(update={"fuse": "off"})))
    print(f"\nV={world} budget {budget}: largest relative deviation {worst:.1e}")


@pytest.mark.parametrize(("world", "budget"), [(4, None), (16, None), (16, 12)])
def test_fused_equals_unfused_mini_asr(world: int, budget: int | None) -> None:
    """Passes grouped by utterance length, several per update at V = 16."""
    config = _config(workload="mini_asr", workload_options=ASR, world_size=world, per_worker_batch=4,
                     accum_grad=1, total_updates=2, eval_every=1, fuse_max_samples=budget)  # fmt: skip
    worst = _assert_same_losses(_reports(config), _reports(config.model_copy(update={"fuse": "off"})))
    print(f"\nmini_asr V={world} budget {budget}: largest relative deviation {worst:.1e}")


class _CountingMLP:
    """mlp_regression, keeping the size of every training pass the loop runs."""

    def __init__(self) -> None:
        self.inner = workloads.make("mlp_regression", MLP)
        self.passes: list[int] = []
        self.fusable = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def loss(self, model: torch.nn.Module, batch: Any) -> torch.Tensor:
        self.passes.append(len(batch[0]))
        return self.inner.loss(model, batch)


@pytest.mark.parametrize(
    ("fuse", "budget", "expected"),
    [("auto", None, [64]), ("auto", 24, [21, 21, 22]), ("off", None, [8] * 8)],
)
def test_passes_per_update(fuse: str, budget: int | None, expected: list[int]) -> None:
    """V = 4 x accum 2 x 8 samples: fused, one pass (CPU budget 64) or the fewest the budget
    allows; every NOISE_EVERY-th update one pass per micro-batch, for the noise scale."""
    workload = _CountingMLP()
    config = _config(total_updates=NOISE_EVERY, eval_every=NOISE_EVERY, fuse=fuse, fuse_max_samples=budget)
    train(config, LocalWorld(), on_report=lambda m, _: None, workload=workload)  # type: ignore[arg-type]
    per_micro_batch = [8] * 8
    assert workload.passes == expected * (NOISE_EVERY - 1) + per_micro_batch


class _Recording(NoiseScale):
    """NoiseScale that also keeps every (update count, g_small_sq, g_big_sq) it is fed."""

    fed: list[tuple[float, float]]

    def update(self, g_small_sq: float, g_big_sq: float, b_big: float | None = None) -> None:
        assert b_big in (None, self.b_big)  # no batch ramp here
        self.fed.append((g_small_sq, g_big_sq))
        super().update(g_small_sq, g_big_sq, b_big)


def _fed(config: TrialConfig, monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple[float, float]], list[Any]]:
    fed: list[tuple[float, float]] = []
    monkeypatch.setattr(_Recording, "fed", fed, raising=False)
    monkeypatch.setattr(loop, "NoiseScale", _Recording)
    return fed, _reports(config)


def test_noise_scale_is_measured_exactly_every_kth_update(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fused: the probe runs per virtual rank at every NOISE_EVERY-th update and measures there
    exactly what the unfused loop measures at that update; the average forgets per update as
    before (decay EMA_DECAY ** NOISE_EVERY per measurement)."""
    config = _config(total_updates=12, eval_every=4)
    unfused, unfused_reports = _fed(config.model_copy(update={"fuse": "off"}), monkeypatch)
    fused, fused_reports = _fed(config, monkeypatch)
    assert len(unfused) == 12 and len(fused) == 12 // NOISE_EVERY
    for k, (small, big) in enumerate(fused, start=1):
        want = unfused[k * NOISE_EVERY - 1]  # update k * NOISE_EVERY
        assert (small, big) == pytest.approx(want, rel=RTOL)
    expected = NoiseScale(b_small=16, b_big=64, decay=EMA_DECAY**NOISE_EVERY)
    for report, (small, big) in zip(fused_reports, fused, strict=True):  # evals at 4, 8, 12
        expected.update(small, big)
        assert report["noise_scale"] == pytest.approx(expected.value, rel=1e-12)
    # off: every update, as before fusion existed
    assert [m["noise_scale"] for m in unfused_reports] != [m["noise_scale"] for m in fused_reports]


def test_noise_scale_moves_to_another_decay_keeping_its_averages() -> None:
    est = NoiseScale(b_small=4, b_big=64, decay=0.5)
    est.update(2.0 + 30.0 / 4, 2.0 + 30.0 / 64)
    est.update(4.0 + 10.0 / 4, 4.0 + 10.0 / 64)
    moved = est.with_decay(0.9)
    assert (moved.g_sq, moved.trace, moved.value, moved.updates) == pytest.approx(
        (est.g_sq, est.trace, est.value, 2), rel=1e-12)  # fmt: skip
    assert moved.decay == 0.9 and est.with_decay(0.5) == est
    assert math.isnan(NoiseScale(b_small=4, b_big=64).with_decay(0.9).value)


# -- the sweep file --------------------------------------------------------------------------


def test_the_sweep_file_carries_fuse_to_every_trial() -> None:
    from scalesweep.orchestrator.plan.cluster import ClusterInfo
    from scalesweep.orchestrator.plan.rows import make_plan
    from scalesweep.orchestrator.spec.load import load_sweep
    from tests.support.helpers import SWEEPS

    laptop = ClusterInfo(cpus=8, gpus=0, memory_gb=32, where="this machine")

    def trials(*sets: str) -> list[TrialConfig]:
        return [r.trial for r in make_plan(load_sweep(SWEEPS / "wenet_4v16.yaml", list(sets)), laptop).rows]

    assert {(t.fuse, t.fuse_max_samples) for t in trials()} == {("auto", None)}
    off = trials("training.fuse=off", "training.fuse_max_samples=32")  # YAML's off is false
    assert {(t.fuse, t.fuse_max_samples) for t in off} == {("off", 32)}
    assert {t.fuse for t in trials("training.fuse='off'")} == {"off"}
