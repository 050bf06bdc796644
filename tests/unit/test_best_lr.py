"""The best lr at an unmeasured batch (scalesweep.science.prediction.best_lr): the power law through
the per-batch best grid lr, the grid and seed terms of its interval, and what it cannot say."""

from __future__ import annotations

import math

import pytest

from scalesweep.science.prediction.best_lr import BestLrUnknown, predict_best_lr

GRID = (0.025, 0.05, 0.1, 0.2, 0.4)  # a factor-2 grid


def bowl(batch: float, lr: float, k: float = 0.5) -> float:
    """Epochs to target: least at lr* = 0.1 (B/128)^k, growing with the log distance from it."""
    best = 0.1 * (batch / 128) ** k
    return 10.0 * (1 + math.log(lr / best) ** 2)


def cells(batches: tuple[float, ...], k: float = 0.5, seeds: int = 3,
          grid: tuple[float, ...] = GRID) -> dict[float, dict[float, list[float]]]:
    return {b: {lr: [bowl(b, lr, k)] * seeds for lr in grid} for b in batches}


def test_the_power_law_through_the_best_grid_lr_is_read_at_the_target_batch() -> None:
    # k = 1: the best lr doubles with the batch and lands on the grid at 128, 256 and 512
    got = predict_best_lr(cells((128, 256, 512), k=1.0), 1024)
    assert got.best_by_batch == {128: 0.1, 256: 0.2, 512: 0.4}
    assert got.exponent == pytest.approx(1.0) and got.median == pytest.approx(0.8)
    # seeds agree and the line fits: only the grid's half step remains, carried through the fit
    lo, hi = got.ci
    assert got.median / lo == pytest.approx(hi / got.median)
    assert 0.8 * math.sqrt(2) < hi < 0.8 * 2 ** 1.5
    assert got.at_grid_edge == (512,)  # 0.4 is the grid's top: the optimum may lie beyond


def test_the_interval_holds_the_true_best_lr_off_the_grid() -> None:
    # k = 0.5: the true best lr falls between grid values at 256 and 1024
    got = predict_best_lr(cells((64, 128, 256, 512)), 1024)
    truth = 0.1 * (1024 / 128) ** 0.5
    assert got.ci[0] <= truth <= got.ci[1]


def test_noisy_seeds_widen_the_interval() -> None:
    quiet = predict_best_lr(cells((128, 256, 512), k=1.0), 1024)
    noisy_cells = cells((128, 256, 512), k=1.0)
    for b in noisy_cells:  # the runner-up lr ties the best on one seed in three
        best = max(noisy_cells[b], key=lambda lr: -noisy_cells[b][lr][0])
        up = GRID[min(GRID.index(best) + 1, len(GRID) - 1)]
        noisy_cells[b][up] = [noisy_cells[b][up][0], 1.0, noisy_cells[b][up][0]]
        noisy_cells[b][best] = [noisy_cells[b][best][0], 30.0, noisy_cells[b][best][0] * 0.99]
    noisy = predict_best_lr(noisy_cells, 1024)
    assert noisy.ci[1] / noisy.ci[0] > quiet.ci[1] / quiet.ci[0]


@pytest.mark.parametrize(("data", "batch", "says"), [
    ({128: {0.1: [5.0]}, 256: {0.1: [6.0]}}, 512, "the study did not sweep lr"),
    ({128: {0.1: [5.0], 0.2: [4.0]}, 256: {0.1: [6.0]}}, 512,
     "usable best at 1 batch size(s) (128): how the best lr moves with the batch needs two"),
    ({128: {0.1: [5.0], 0.2: [4.0]}, 256: {0.1: [math.inf], 0.2: [math.inf]}}, 512,
     "at 256 no lr reached the target"),
    (cells((128, 256)), 4096, "batch 4096 is more than 4x outside the batches with an lr sweep"),
])
def test_what_it_cannot_say_it_names(data: dict[float, dict[float, list[float]]], batch: float,
                                     says: str) -> None:
    with pytest.raises(BestLrUnknown) as e:
        predict_best_lr(data, batch)
    assert says in str(e.value)
