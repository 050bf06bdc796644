"""The gradient noise scale: the pure estimator, and the loop's measurement against a problem
whose per-sample gradient covariance is known in closed form.

Linear regression y = x·w* + σε with x ~ N(0, I_d), ε ~ N(0, 1), per-sample loss
½(x·w − y)², held at a fixed w = w* + δ (SGD with lr 0). The per-sample gradient is
g = x xᵀδ − σεx, so G = E g = δ and, by Isserlis, E[g gᵀ] = 2δδᵀ + |δ|²I + σ²I; hence
Σ = δδᵀ + (|δ|² + σ²) I, tr Σ = (d + 1)|δ|² + dσ² and B_simple = tr Σ / |δ|².
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from scalesweep.science import noise_scale as ns
from scalesweep.trainables.config import TrialConfig
from scalesweep.trainables.loop import train
from scalesweep.trainables.world import LocalWorld

D, SIGMA, DELTA_SQ = 8, 1.0, 1.0
TRUE_TRACE = (D + 1) * DELTA_SQ + D * SIGMA**2
TRUE_B_SIMPLE = TRUE_TRACE / DELTA_SQ  # 17


# --- the pure estimator -------------------------------------------------------------------


@pytest.mark.parametrize(("b_small", "b_big"), [(0, 8), (-1, 8), (8, 8), (8, 4)])
def test_estimate_rejects_bad_batches(b_small: float, b_big: float) -> None:
    with pytest.raises(ValueError, match="must be"):
        ns.estimate(1.0, 1.0, b_small, b_big)
    with pytest.raises(ValueError, match="must be"):
        ns.NoiseScale(b_small=b_small, b_big=b_big)


def test_noise_scale_rejects_bad_decay() -> None:
    with pytest.raises(ValueError, match="decay"):
        ns.NoiseScale(b_small=2, b_big=8, decay=1.0)


def test_estimate_inverts_the_expected_norms_exactly() -> None:
    # E|G_B|^2 = |G|^2 + tr(Σ)/B: feed the expectations, get the truth back
    g_sq, trace = 2.0, 30.0
    g_small, g_big = g_sq + trace / 4, g_sq + trace / 64
    assert ns.estimate(g_small, g_big, 4, 64) == pytest.approx((g_sq, trace), rel=1e-12)


def test_ema_is_bias_corrected_and_the_ratio_comes_last() -> None:
    est = ns.NoiseScale(b_small=4, b_big=64, decay=0.5)
    assert math.isnan(est.value) and math.isnan(est.g_sq)
    est.update(2.0 + 30.0 / 4, 2.0 + 30.0 / 64)  # |G|^2 = 2, tr Σ = 30
    assert (est.g_sq, est.trace, est.value) == pytest.approx((2.0, 30.0, 15.0))
    est.update(4.0 + 10.0 / 4, 4.0 + 10.0 / 64)  # |G|^2 = 4, tr Σ = 10
    # weights 1/3, 2/3 (0.5 * 0.5 and 0.5, over 1 - 0.5^2)
    assert (est.g_sq, est.trace) == pytest.approx((10 / 3, 50 / 3))
    assert est.value == pytest.approx(5.0)  # 50/3 over 10/3: not the mean of 15 and 2.5
    est.update(math.nan, 1.0)  # a diverging update is skipped
    assert est.value == pytest.approx(5.0) and est.updates == 2
    again = ns.NoiseScale.from_state(est.state())
    assert again == est


def test_negative_signal_estimate_gives_nan() -> None:
    est = ns.NoiseScale(b_small=4, b_big=8, decay=0.0)
    est.update(1.0, 0.1)  # |G|^2 estimate = (8*0.1 - 4*1)/4 < 0
    assert est.g_sq < 0 and math.isnan(est.value)


def test_estimator_on_sampled_gradients_recovers_the_truth() -> None:
    """Numpy only: per-sample gradients of the closed-form problem, split into small batches."""
    gen = np.random.default_rng(0)
    delta = np.full(D, math.sqrt(DELTA_SQ / D))
    est = ns.NoiseScale(b_small=8, b_big=64, decay=0.99)
    values = []
    for _ in range(3000):
        x = gen.standard_normal((64, D))
        g = x * (x @ delta - SIGMA * gen.standard_normal(64))[:, None]
        small = g.reshape(8, 8, D).mean(axis=1)
        est.update(float((small**2).sum(axis=1).mean()), float((g.mean(axis=0) ** 2).sum()))
        values.append(est.value)
    assert est.value == pytest.approx(TRUE_B_SIMPLE, rel=0.1)
    assert float(np.mean(values[100:])) == pytest.approx(TRUE_B_SIMPLE, rel=0.05)


# --- the loop's measurement ---------------------------------------------------------------


class _LinearRegression:
    """The closed-form problem as a workload (``tests.unit.test_noise_scale:make_linear``)."""

    metrics: Mapping[str, str] = {"loss": "min"}
    defaults: Mapping[str, Any] = {}

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.n = int(options.get("train_size", 16384))
        gen = np.random.default_rng(int(options.get("data_seed", 0)))
        self.w_star = gen.standard_normal(D)
        x = gen.standard_normal((self.n, D))
        self.x = torch.from_numpy(x)
        self.y = torch.from_numpy(x @ self.w_star + SIGMA * gen.standard_normal(self.n))

    def train_size(self) -> int:
        return self.n

    def dev_size(self) -> int:
        return 256

    def build_model(self) -> nn.Module:
        model = nn.Linear(D, 1, bias=False)
        with torch.no_grad():  # w = w* + δ, |δ|^2 = DELTA_SQ
            model.weight.copy_(torch.from_numpy(self.w_star + math.sqrt(DELTA_SQ / D))[None])
        return model

    def train_batch(self, indices: Sequence[int]) -> Any:
        idx = torch.as_tensor(list(indices), dtype=torch.long)
        dtype = torch.get_default_dtype()
        return self.x[idx].to(dtype), self.y[idx].to(dtype)

    def dev_batches(self, batch_size: int) -> Iterator[Any]:
        yield self.train_batch(range(256))

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        x, y = batch
        return 0.5 * (model(x).squeeze(1) - y) ** 2

    def evaluate(self, model: nn.Module, batch: Any) -> Mapping[str, torch.Tensor]:
        with torch.no_grad():
            return {"loss": self.loss(model, batch)}


def make_linear(options: Mapping[str, Any]) -> _LinearRegression:
    return _LinearRegression(options)


def _reports(**overrides: Any) -> list[dict[str, Any]]:
    config: dict[str, Any] = {
        "name": "noise", "workload": "tests.unit.test_noise_scale:make_linear", "world_size": 8,
        "physical_workers": 1, "per_worker_batch": 4, "accum_grad": 2,
        "optimizer": {"type": "sgd", "lr": 0.0}, "scheduler": {"type": "constant"},
        "total_updates": 400, "eval_every": 40, "dtype": "float64", **overrides,
    }  # fmt: skip
    reports: list[dict[str, Any]] = []
    train(TrialConfig(**config), LocalWorld(), on_report=lambda m, _: reports.append(m))
    return reports


def test_loop_measures_the_closed_form_noise_scale_within_20_percent() -> None:
    """V = 8 virtual ranks x (4 samples x accum 2): B_small = 8, B_big = 64, truth 17."""
    reports = _reports()
    values = [m["noise_scale"] for m in reports]
    assert all(math.isfinite(v) for v in values)
    print(f"\nnoise scale, truth {TRUE_B_SIMPLE:g}: " + " ".join(f"{v:.3g}" for v in values))
    # every report (each an EMA over >= 40 updates), and their median, within 20 %
    for v in values:
        assert v == pytest.approx(TRUE_B_SIMPLE, rel=0.2)
    assert float(np.median(values)) == pytest.approx(TRUE_B_SIMPLE, rel=0.1)


def test_no_noise_scale_with_one_virtual_rank() -> None:
    reports = _reports(world_size=1, per_worker_batch=64, accum_grad=1, total_updates=2, eval_every=1)
    assert all("noise_scale" not in m for m in reports)
