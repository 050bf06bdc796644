"""scalesweep.science.stats.trial_summary, the one per-trial summary of the driver, the report and
`advise`, on hand-made curves with exact expected numbers: a bracketed crossing, one met at the
first eval, one never met (censored: still in every median of its arm), the baseline's
speedups, and the summary JSON's fields at the output edge."""

from __future__ import annotations

import math

import pytest

from scalesweep.mlflow_names import BRACKETS, SUMMARY_METRICS, TARGET_BEST_METRIC, TARGET_METRIC
from scalesweep.science.stats.arms import summarize_arms
from scalesweep.science.stats.convergence import EvalPoint
from scalesweep.science.stats.trial_summary import (
    JSON_FIELDS,
    Reading,
    TrialEvals,
    TrialSummary,
    summarize_trial,
)


def make_curve(values: list[float], every: int = 100, batch: int = 64) -> tuple[EvalPoint, ...]:
    """Evals every ``every`` updates from update 0; 200 updates per epoch, 0.1 s per update."""
    return tuple(EvalPoint(update=i * every, samples_seen=i * every * batch, epoch=i * every / 200,
                           wall_s=i * every * 0.1, value=v) for i, v in enumerate(values))


def trial(values: list[float], *, name: str = "t", arm: str = "a", seed: int = 0, every: int = 100,
          batch: float | None = 256, dev_loss: list[float] | None = None) -> TrialEvals:
    """A trial whose target metric is its dev loss unless ``dev_loss`` says otherwise."""
    return TrialEvals(name=name, arm=arm, seed=seed, global_batch=batch, curve=make_curve(values, every),
                      dev_loss=tuple(values if dev_loss is None else dev_loss), train_seconds=12.5)


#: the baseline crosses 2.5 halfway between updates 400 (3.0) and 800 (2.0): 600 updates, 3 epochs
BASELINE = trial([4.0, 3.0, 2.0, 1.0], name="base", arm="b", every=400, batch=64)


def test_a_bracketed_crossing_is_interpolated_between_its_two_evals() -> None:
    s = summarize_trial(trial([4.0, 3.0, 2.0, 2.25]), 2.5, BASELINE)
    # 3.0 at update 100 misses, 2.0 at update 200 meets: halfway, on every clock
    assert s.crossing == "interpolated"
    assert (s.updates_to_target, s.samples_to_target, s.epochs_to_target, s.seconds_to_target) == (
        150.0, 9600.0, 0.75, 15.0)
    assert (s.updates_to_target_lo, s.updates_to_target_hi) == (100.0, 200.0)
    assert (s.epochs_to_target_lo, s.epochs_to_target_hi) == (0.5, 1.0)
    assert (s.final_dev_loss, s.best_dev_loss) == (2.25, 2.0)
    # baseline 600 updates / 150, 3 epochs / 0.75; batch 256 over 64: perfect scaling
    assert (s.speedup_vs_baseline, s.speedup_by_epochs, s.scaling_efficiency) == (4.0, 4.0, 1.0)
    assert (s.target_value, s.baseline_trial, s.baseline_arm, s.train_seconds) == (2.5, "base", "b", 12.5)
    assert s.located is not None and s.located.bracket("epochs") == (0.5, 1.0)


def test_after_a_diverged_eval_the_crossing_is_the_meeting_eval_itself() -> None:
    s = summarize_trial(trial([4.0, math.nan, 2.0]), 2.5, None)
    # no line to interpolate on from a NaN: the meeting eval, bracketed by the NaN eval's update
    assert (s.crossing, s.updates_to_target, s.epochs_to_target) == ("interpolated", 200.0, 1.0)
    assert (s.updates_to_target_lo, s.updates_to_target_hi) == (100.0, 200.0)
    assert s.speedup_vs_baseline is None and s.scaling_efficiency is None  # no baseline


def test_smoothing_moves_the_crossing_to_the_smoothed_curve() -> None:
    # EMA 0.5 of 4, 2, 2 is 4, 3, 2.5: 2.5 is met at update 200, not at update 100
    s = summarize_trial(trial([4.0, 2.0, 2.0]), 2.5, None, Reading("min", 0.5))
    assert (s.crossing, s.updates_to_target) == ("interpolated", 200.0)
    assert s.best_dev_loss == 2.0  # the losses are the raw ones


def test_a_trial_that_never_reaches_is_censored_at_its_last_eval() -> None:
    s = summarize_trial(trial([4.0, 3.5, math.nan]), 2.0, BASELINE)
    assert s.crossing == "never"
    assert (s.updates_to_target, s.samples_to_target, s.epochs_to_target, s.seconds_to_target) == (
        None, None, None, None)
    # after the last eval, if ever: lo = the last eval, hi unbounded (None, not inf: valid JSON)
    assert (s.updates_to_target_lo, s.updates_to_target_hi) == (200.0, None)
    assert (s.epochs_to_target_lo, s.epochs_to_target_hi) == (1.0, None)
    assert (s.final_dev_loss, s.best_dev_loss) == (None, 3.5)  # diverged: a NaN final is None
    assert (s.speedup_vs_baseline, s.speedup_by_epochs, s.scaling_efficiency) == (None, None, None)


def test_a_crossing_at_the_first_eval_is_a_bound_with_no_speedup() -> None:
    s = summarize_trial(_late(), 2.5, BASELINE)
    assert s.crossing == "at_first_eval"
    assert s.epochs_to_target is None and s.updates_to_target is None
    assert (s.updates_to_target_lo, s.updates_to_target_hi) == (0.0, 100.0)  # "<= 100"
    assert s.speedup_vs_baseline is None and s.scaling_efficiency is None  # unresolved


def _late() -> TrialEvals:
    """First eval at update 100, where 2.0 already meets 2.5."""
    curve = make_curve([3.0, 2.0, 1.5, 1.0])[1:]
    return TrialEvals(name="late", arm="a", seed=0, global_batch=256, curve=curve,
                      dev_loss=tuple(p.value for p in curve))


def test_a_max_metric_takes_its_losses_from_dev_loss() -> None:
    s = summarize_trial(trial([0.1, 0.5, 0.9], dev_loss=[3.0, 2.0, 2.5]), 0.7, None, Reading("max"))
    assert s.updates_to_target == pytest.approx(150.0)
    assert (s.final_dev_loss, s.best_dev_loss) == (2.5, 2.0)


def test_without_a_target_or_evals_there_is_no_crossing_but_the_losses_stand() -> None:
    s = summarize_trial(trial([4.0, 3.0]), None, BASELINE)
    assert s.crossing is None and s.located is None
    assert all(getattr(s, k) is None for k in (*BRACKETS, "updates_to_target", "speedup_vs_baseline"))
    assert (s.final_dev_loss, s.best_dev_loss, s.baseline_trial) == (3.0, 3.0, "base")
    empty = summarize_trial(TrialEvals("e", "a", 0, 256), 2.5, BASELINE)
    assert (empty.crossing, empty.final_dev_loss, empty.updates_to_target_lo) == (None, None, None)


def test_an_unknown_batch_has_no_efficiency() -> None:
    s = summarize_trial(trial([4.0, 3.0, 2.0], batch=None), 2.5, BASELINE)
    assert s.speedup_vs_baseline == 4.0 and s.scaling_efficiency is None


def test_never_reached_seeds_stay_in_the_arms_median() -> None:
    # three seeds: 0.75 and 1.0833 epochs, and one that never reaches (+inf in the median)
    seeds = [trial([4.0, 3.0, 2.0, 2.25], seed=0), trial([4.0, 3.0, 2.6, 2.0], seed=1),
             trial([4.0, 3.5, 3.0, 2.8], seed=2)]
    summaries = [summarize_trial(t, 2.5, None) for t in seeds]
    arm = summarize_arms(summaries, {"a": None})[0]
    assert (arm.n_seeds, arm.n_reached, arm.n_at_first_eval) == (3, 2, 0)
    median = arm.medians["epochs"]
    # sorted 0.75, 1.0833, inf: the median is the middle seed (dropping the censored one
    # would have made it (0.75 + 1.0833) / 2)
    assert median.n == 3 and median.median.kind == "value"
    assert median.median.value == pytest.approx(1.0 + 1 / 12)
    assert median.spread == (0.5, math.inf)  # the never seed's bracket reaches +inf
    # two of three never: the median is never
    summaries[1] = summarize_trial(trial([4.0, 3.5, 3.0, 2.8], seed=1), 2.5, None)
    assert summarize_arms(summaries, {"a": None})[0].medians["epochs"].median.kind == "never"


def test_the_output_edge_holds_the_summary_json_fields_in_order() -> None:
    s = summarize_trial(trial([4.0, 3.0, 2.0, 2.25]), 2.5, BASELINE)
    assert list(s.as_json()) == [
        "updates_to_target", "samples_to_target", "epochs_to_target", "seconds_to_target",
        "final_dev_loss", "best_dev_loss", "speedup_vs_baseline", "scaling_efficiency",
        "train_seconds", "crossing", "updates_to_target_lo", "updates_to_target_hi",
        "epochs_to_target_lo", "epochs_to_target_hi", "target_value", "baseline_trial", "baseline_arm",
    ]  # fmt: skip
    assert list(s.as_json()) == list(JSON_FIELDS)
    assert s.as_json()["crossing"] == "interpolated" and s.as_json()["baseline_arm"] == "b"
    assert set(s.metrics()) == {*SUMMARY_METRICS, *BRACKETS, TARGET_METRIC, TARGET_BEST_METRIC}
    assert s.metrics()["updates_to_target"] == 150.0


def test_summaries_compare_by_value_not_by_their_evals() -> None:
    a = summarize_trial(trial([4.0, 3.0, 2.0]), 2.5, None)
    b = summarize_trial(trial([4.0, 3.0, 2.0]), 2.5, None)
    assert a == b and isinstance(a, TrialSummary)
    with pytest.raises(AttributeError):
        a.crossing = "never"  # type: ignore[misc]  # frozen
