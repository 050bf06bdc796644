"""`scalesweep recommend`'s text (scalesweep/dashboards/recommend/text.py) on recommendations
made here from the science alone: a range is called one, a missing lr or epochs ratio says so."""

from __future__ import annotations

import math

from scalesweep.dashboards.recommend.text import band, render
from scalesweep.science.prediction.epochs import BatchPoint
from scalesweep.science.recommend.recipe import Recipe, recommend
from scalesweep.science.recommend.recommendation import LrEvidence, Recommendation


def _rec(recipe: Recipe, *, reference_lr: float | None = 0.1, noise: float | None = None,
         arms: tuple[LrEvidence, ...] = ()) -> Recommendation:
    return Recommendation(
        experiment="s", parent_run_id="p", target=1.5, family=recipe.lr.model,
        reference_world_size=4, reference_batch=64.0, reference_lr=reference_lr,
        reference_warmup=100.0, world_size_n=16, batch_n=256.0, world_size_m=32, batch_m=512.0,
        noise_scale=noise, lr_arms=arms, warmup_arms_factor=None, n_arm="ws16-scaled-linear",
        n_epochs_median=5.0, recipe=recipe)


def test_band_says_a_range_is_not_an_interval_and_writes_inf() -> None:
    assert band((1.0, 8.0), 0.9) == "[1, 8] (90%)"
    assert band((0.5, math.inf), None) == "[0.5, inf] (a range, not a confidence interval)"


def test_no_evidence_no_noise_scale_no_epochs() -> None:
    recipe = recommend("sgd", reference_batch=64, batch_n=256, batch_m=512, reference_warmup=100)
    text = render(_rec(recipe, reference_lr=None))
    lines = text.splitlines()
    assert lines[0] == ("study s (parent run p): recipe at 32 workers (global batch 512) from "
                        "N = 16 workers (256); reference 4 workers (64)")
    # sqrt(1 x 8): the centre of SGD's whole range at k = 8, a range and no lr (none logged)
    assert lines[1] == ("lr factor: 2.83 [1, 8] (a range, not a confidence interval) x the "
                        "reference's lr")
    assert lines[2] == ("  model: sgd: the optimizer's family; the model's whole range at M, its "
                        "centre as the point")
    assert lines[3] == "warmup: 12 updates (rule scaled: 12.5 from the reference's 100)"
    assert lines[5] == "epochs ratio M/N: none (see the notes)"
    assert "noise scale (late training, median): not measured" in lines
    assert "  - no tuned epochs at the reference and N: no epochs ratio" in lines
    assert "  - no lr evidence locates the best and no noise scale was measured: the factor is " \
           "only known to lie in the model's range" in lines


def test_the_lr_its_interval_and_the_epochs_ratio() -> None:
    recipe = recommend("sgd", reference_batch=64, batch_n=256, batch_m=512, reference_warmup=100,
                       reference_epochs=BatchPoint(64, (4.0, 4.1, 4.2)),
                       n_epochs=BatchPoint(256, (5.0, 5.1, 4.9)), noise_scale=300.0)
    e = recipe.epochs_ratio
    assert e is not None
    lo, hi = recipe.lr.ci
    text = render(_rec(recipe, noise=300.0, arms=(LrEvidence(arm="a", factor=4.0, seeds=3,
                                                             median_ratio=1.25),)))
    f = recipe.lr.factor
    assert (f"lr factor: {f:.3g} [{lo:.3g}, {hi:.3g}] (a range, not a confidence interval) x the "
            f"reference's lr 0.1 = lr {0.1 * f:.4g} [{0.1 * lo:.3g}, {0.1 * hi:.3g}] (a range, not "
            "a confidence interval)") in text
    assert (f"epochs ratio M/N: {e.median:.3g} [{e.ci[0]:.3g}, {e.ci[1]:.3g}] (90%), against N's "
            "best arm ws16-scaled-linear (5 epochs to target)") in text
    assert "lr arms at N, median epochs ratio to the baseline: x4 1.25 (3 seeds)" in text
    assert "noise scale (late training, median): 300 samples" in text
    assert "upper end raised" not in text  # no bowl: nothing raised, and the note says so
    assert "the lr's own uncertainty is not carried into the epochs" in text
