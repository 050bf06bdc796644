"""The best lr at N from a study's own arms (scalesweep.science.recommend.lr_evidence: a bowl in
log lr, Fieller's interval for its bottom) and carried to M through the lr model
(scalesweep.science.recommend.recipe.lr_at): exact on noiseless data, honest where the arms
show no bowl, and a simulation through lr_at whose 90 % interval covers the true factor at M
about 90 % of the time."""

from __future__ import annotations

import math
import random

import pytest

from scalesweep.science.prediction.epochs import BatchPoint
from scalesweep.science.recommend import lr_models as m
from scalesweep.science.recommend.lr_evidence import LrArm, NoLrEvidence, fit_bowl
from scalesweep.science.recommend.recipe import choose_model, epochs_ratio, lr_at, recommend

B_REF, B_N, B_M = 256.0, 1024.0, 2048.0


def arms_for(best: float, factors: tuple[float, ...] = (0.5, 1.0, 2.0), seeds: int = 4,
             curvature: float = 1.0, noise: float = 0.0, offset: float = 0.0,
             rng: random.Random | None = None) -> list[LrArm]:
    """Paired ratios from log r = c (log f − log best)² + seed offset + noise."""
    rng = rng or random.Random(0)
    levels = {s: rng.gauss(0.0, offset) if offset else 0.0 for s in range(seeds)}
    return [LrArm(f, {s: math.exp(curvature * math.log(f / best) ** 2 + levels[s]
                                  + (rng.gauss(0.0, noise) if noise else 0.0))
                      for s in range(seeds)}) for f in factors]


def test_noiseless_bowl_gives_its_bottom() -> None:
    # with the smallest noise the bottom is read back exactly, and the interval is tight round it
    fit = fit_bowl(arms_for(1.3, noise=1e-6))
    assert fit.factor == pytest.approx(1.3, rel=1e-4)
    assert fit.ci[0] < 1.3 < fit.ci[1] and fit.ci[1] / fit.ci[0] < 1.001
    assert fit.blocked and fit.dof == 4 * 3 - 4 - 2  # 12 ratios, 4 seed levels, b and c


def test_seed_offsets_are_taken_out() -> None:
    # a large offset per baseline seed, shared by every arm on that seed, changes nothing
    fit = fit_bowl(arms_for(1.3, noise=1e-6, offset=0.5))
    assert fit.factor == pytest.approx(1.3, rel=1e-4) and fit.ci[1] / fit.ci[0] < 1.001


def test_a_hill_locates_nothing() -> None:
    fit = fit_bowl(arms_for(1.0, curvature=-1.0, noise=0.01))
    assert fit.factor is None and fit.ci == (0.0, math.inf) and not fit.located
    assert fit.best_measured in (0.5, 2.0)
    assert any("no bowl" in n for n in fit.notes)


def test_too_few_factors_or_seeds_refused() -> None:
    with pytest.raises(NoLrEvidence, match="three or more"):
        fit_bowl(arms_for(1.0, factors=(1.0, 2.0)))
    with pytest.raises(NoLrEvidence, match="degrees of freedom"):
        fit_bowl(arms_for(1.0, seeds=1))


def test_a_never_reached_arm_is_left_out_by_name() -> None:
    arms = [*arms_for(1.0, factors=(0.5, 1.0, 2.0), noise=0.01),
            LrArm(8.0, {0: math.inf, 1: math.inf, 2: 3.0, 3: math.inf})]
    fit = fit_bowl(arms)
    assert any("8" in n and "never reached" in n for n in fit.notes)


def test_lr_at_carries_the_bottom_through_the_model() -> None:
    b_noise = 600.0
    f_n = m.lr_factor("surge", B_N, B_REF, b_noise)
    got = lr_at("surge", B_M, B_REF, batch_n=B_N, arms=arms_for(f_n, noise=1e-6))
    assert got.b_noise == pytest.approx(b_noise, rel=1e-3)
    assert got.factor == pytest.approx(m.lr_factor("surge", B_M, B_REF, b_noise), rel=1e-4)
    assert got.confidence == 0.90 and "solved from the arms" in got.source


def test_unlocated_bowl_falls_back_to_the_noise_scale_band_then_the_model_range() -> None:
    hill = arms_for(1.0, curvature=-1.0, noise=0.01)
    got = lr_at("surge", B_M, B_REF, batch_n=B_N, arms=hill, noise_scale=300.0)
    assert got.confidence is None and "noise scale" in got.source
    assert got.ci == pytest.approx(m.factor_between("surge", B_M, B_REF, (300.0, 3000.0)))
    bare = lr_at("surge", B_M, B_REF, batch_n=B_N, arms=hill)
    assert bare.ci == pytest.approx(m.factor_range("surge", B_M, B_REF))


def test_arms_past_the_surge_range_choose_the_sgd_model() -> None:
    # an Adam study whose best at N (k = 4) is 3x: above sqrt(k) = 2, which the surge cannot give
    fit = fit_bowl(arms_for(3.0, factors=(1.0, 2.0, 4.0), noise=1e-6))
    model, why = choose_model("surge", fit, B_N, B_REF)
    assert model == "sgd" and "outside" in why


def test_epochs_ratio_against_n() -> None:
    ref = BatchPoint(B_REF, (10.0, 10.5, 9.8, 10.2))
    at_n = BatchPoint(B_N, (12.0, 12.4, 11.8, 12.1))
    f_n = m.lr_factor("surge", B_N, B_REF, 600.0)
    lr = lr_at("surge", B_M, B_REF, batch_n=B_N, arms=arms_for(f_n, noise=0.02))
    got = epochs_ratio(ref, at_n, B_M, lr)
    # the line through (256, ~10.1) and (1024, ~12.05) rises at 2048: a ratio above 1
    assert 1.0 < got.median < 1.4 and got.ci[0] <= got.median <= got.ci[1]
    assert got.lr_penalty > 1.0


def test_interval_covers_the_true_factor_at_m_at_its_rate() -> None:
    # studies drawn from the surge with a known b_noise, three lr factors x four seeds at N,
    # Gaussian noise on the log ratio and a level per baseline seed: the 90 % interval at M
    # (through lr_at, the real function) should hold the true factor about 90 % of the time
    rng = random.Random(20261129)
    sims, hits = 600, 0
    for _ in range(sims):
        b_noise = math.exp(rng.uniform(math.log(200.0), math.log(4000.0)))
        f_n = m.lr_factor("surge", B_N, B_REF, b_noise)
        arms = arms_for(f_n, noise=0.08, offset=0.1, curvature=rng.uniform(0.6, 1.5), rng=rng)
        got = lr_at("surge", B_M, B_REF, batch_n=B_N, arms=arms)
        hits += got.ci[0] <= m.lr_factor("surge", B_M, B_REF, b_noise) <= got.ci[1]
    # 0.90 ± 3 binomial standard errors (0.012 each at 600 draws)
    assert 0.864 <= hits / sims <= 0.936, hits / sims


def test_recommend_puts_the_three_together_and_names_each_source() -> None:
    f_n = m.lr_factor("surge", B_N, B_REF, 600.0)
    got = recommend("surge", reference_batch=B_REF, batch_n=B_N, batch_m=B_M, reference_warmup=1000,
                    arms=arms_for(f_n, noise=0.02),
                    reference_epochs=BatchPoint(B_REF, (10.0, 10.5, 9.8)),
                    n_epochs=BatchPoint(B_N, (12.0, 12.4, 11.8)), noise_scale=500.0)
    assert got.warmup.updates == pytest.approx(125.0) and "Goyal" in got.warmup.source
    assert "solved from the arms" in got.lr.source
    assert got.epochs_ratio is not None and "McCandlish" in got.epochs_ratio.source
    # 16x past the measured batches: predict's cap refuses the epochs, the lr and warmup stand
    far = recommend("surge", reference_batch=B_REF, batch_n=B_N, batch_m=16 * B_N,
                    reference_warmup=1000, reference_epochs=BatchPoint(B_REF, (10.0, 10.5)),
                    n_epochs=BatchPoint(B_N, (12.0, 12.4)))
    assert far.epochs_ratio is None and any("refused" in n for n in far.notes)
