"""The plateau check (scalesweep/science/stats/plateau.py): the last share of the run must
improve the best of the baseline arm's mean curve by less than the threshold."""

from __future__ import annotations

import pytest

from scalesweep.science.stats.convergence import EvalPoint
from scalesweep.science.stats.plateau import check_plateau


def curve(values: list[float], every: float = 1.0) -> list[EvalPoint]:
    return [EvalPoint(update=10.0 * (i + 1), samples_seen=0.0, epoch=every * (i + 1), wall_s=0.0, value=v)
            for i, v in enumerate(values)]


def test_a_baseline_still_falling_is_told_to_train_longer() -> None:
    # 10 evals, epochs 1..10: the last 20 % is epochs after 8; best before 8 is the mean at 8
    a = curve([10, 8, 6, 5, 4, 3, 2.5, 2.0, 1.8, 1.6])
    b = curve([10, 8, 6, 5, 4, 3, 2.5, 2.2, 2.0, 1.8])
    p = check_plateau([a, b], "min")
    assert p is not None
    assert (p.horizon, p.cut) == (10.0, 8.0)
    assert p.best_before == pytest.approx(2.1) and p.best == pytest.approx(1.7)
    assert p.improvement == pytest.approx(0.4 / 2.1)
    assert not p.reached
    assert p.text().startswith("still falling: train longer: the last 20% of the run (epochs 8-10)")
    assert "19.0% (2.1 -> 1.7), not under 2%" in p.text()


def test_a_flat_end_is_a_plateau_and_the_eval_at_the_cut_counts_before_it() -> None:
    p = check_plateau([curve([5, 3, 2, 1.5, 1.2, 1.1, 1.05, 1.0, 0.99, 0.985])], "min")
    assert p is not None and p.best_before == 1.0 and p.best == 0.985
    assert p.improvement == pytest.approx(0.015) and p.reached
    assert p.text().startswith("plateau reached: ") and "1.5% (1 -> 0.985), under 2%" in p.text()


def test_the_best_not_the_last_eval_decides_an_overfitting_curve() -> None:
    # dev loss that rises after its minimum: the last eval (naively compared) is worse than
    # the cut's, which must not read as "still falling" nor as a negative improvement
    p = check_plateau([curve([5, 2, 1, 0.8, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95])], "min")
    assert p is not None and p.improvement == 0.0 and p.reached


def test_the_mean_curve_decides_not_one_seed() -> None:
    # one seed dips in the last 20 %, the other rises as much: the mean is flat, a plateau;
    # read per seed, the first would say "still falling"
    a = curve([4, 2, 1.5, 1.2, 1.1, 1.0, 1.0, 1.0, 0.9, 0.9])
    b = curve([4, 2, 1.5, 1.2, 1.1, 1.0, 1.0, 1.0, 1.1, 1.1])
    p = check_plateau([a, b], "min")
    assert p is not None and p.best_before == 1.0 and p.best == 1.0 and p.reached


def test_a_max_metric_and_the_settings() -> None:
    acc = curve([0.1, 0.5, 0.7, 0.8, 0.9])  # epochs 1..5; last_share 0.4 -> cut at epoch 3
    p = check_plateau([acc], "max", metric="dev_acc", last_share=0.4, min_improvement=0.3)
    assert p is not None and p.cut == pytest.approx(3.0) and (p.best_before, p.best) == (0.7, 0.9)
    assert p.improvement == pytest.approx(0.2 / 0.7) and p.reached  # under 30 %
    assert "dev_acc" in p.text()
    with pytest.raises(ValueError, match="last_share"):
        check_plateau([acc], "max", last_share=1.0)
    with pytest.raises(ValueError, match="min_improvement"):
        check_plateau([acc], "max", min_improvement=0.0)


def test_it_is_not_judged_without_two_evals() -> None:
    assert check_plateau([], "min") is None
    assert check_plateau([curve([1.0])], "min") is None
