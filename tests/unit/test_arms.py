"""Arms (scalesweep.science.stats.arms) and time to quality (scalesweep.science.stats.levels) on
hand-made curves: the decision at the target, the ratio at every level, the conditioning check,
the arms.json fields, the texts the tables show and the table `run` prints."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from scalesweep.dashboards.arm_text import conditioning_text, interval_text, levels_text, median_text
from scalesweep.dashboards.run_tables import format_arms
from scalesweep.science.stats import levels as L
from scalesweep.science.stats.arms import (
    ArmSummary,
    TrialCrossing,
    summarize_arms,
)
from scalesweep.science.stats.convergence import EvalPoint, locate
from scalesweep.science.stats.replicates import Estimate, MedianInterval
from scalesweep.science.stats.rules import StudyRules

#: evals every tenth of an epoch (updates = 10 per epoch)
EPOCHS = [0.1 * i for i in range(1, 61)]


def _curve(values: list[float]) -> list[EvalPoint]:
    return [EvalPoint(update=10 * e, samples_seen=100 * e, epoch=e, wall_s=e, value=v)
            for e, v in zip(EPOCHS, values, strict=True)]


def _decaying(scale: float, floor: float = 0.5, start: float = 4.0) -> list[float]:
    """A loss that falls like start · 2^(-epoch / scale) onto a floor: ``scale`` > 1 is slower."""
    return [floor + (start - floor) * 2 ** (-e / scale) for e in EPOCHS]


def _trials(arm: str, scales: list[float], target: float) -> list[TrialCrossing]:
    out = []
    for seed, s in enumerate(scales):
        pts = _curve(_decaying(s))
        out.append(TrialCrossing(arm, seed, locate(pts, target, "min"), pts))
    return out


BASE = [1.0, 1.02, 0.98, 1.01, 0.99]
RULES = StudyRules(levels=(0.5, 1.0, 2.0), margin=0.10)


def _summaries(other: list[float], target: float = 1.5) -> dict[str, ArmSummary]:
    trials = _trials("base", BASE, target) + _trials("other", other, target)
    out = summarize_arms(trials, {"base": "base", "other": "base"}, RULES, {"other": {"world_size": 4}})
    return {a.arm: a for a in out}


def _arms(other: list[float], target: float = 1.5) -> dict[str, dict[str, Any]]:
    return {name: a.as_json() for name, a in _summaries(other, target).items()}


def test_a_uniformly_slower_arm_is_slower_at_the_target_and_every_level() -> None:
    arms = _arms([1.3, 1.32, 1.28, 1.31, 1.29])
    other = arms["other"]
    assert arms["base"]["decision"] == "baseline" and arms["base"]["ratio_by_target"] == []
    assert other["decision"] == "slower" and other["equivalence_margin"] == 0.10
    levels = other["ratio_by_target"]
    assert [lv["level"] for lv in levels] == [0.5, 1.0, 2.0]
    assert [lv["decision"] for lv in levels] == ["slower"] * 3
    assert all(lv["n_paired"] == 5 for lv in levels)
    # the target at level r is the baseline arm's mean curve's best x (1 + r)
    best = L.baseline_best([_curve(_decaying(s)) for s in BASE], "min")
    assert best is not None
    assert [lv["target"] for lv in levels] == pytest.approx([best * 1.5, best * 2.0, best * 3.0])
    assert other["axes"] == {"world_size": 4} and arms["base"]["axes"] == {}
    text = levels_text(_summaries([1.3, 1.32, 1.28, 1.31, 1.29])["other"])
    assert text == "slower at every level"


def test_the_same_curves_are_equivalent() -> None:
    other = _arms([1.0, 1.02, 0.98, 1.01, 0.99])["other"]
    assert other["decision"] == "equivalent"
    assert {lv["decision"] for lv in other["ratio_by_target"]} == {"equivalent"}
    lo, hi = other["epochs_ratio_vs_baseline_ci"]
    assert 1 / 1.1 <= lo <= 1.0 <= hi <= 1.1
    assert other["direction_vs_baseline"] == "within"  # read off the decision


def test_mixed_seeds_are_not_resolved_and_say_so() -> None:
    other = _arms([1.3, 0.8, 1.28, 0.75, 1.29])["other"]
    assert other["decision"] == "not resolved"
    assert other["verdict"].startswith("not resolved with 5 seeds")
    assert other["n_tied_within_evals"] == 0 and "evaluating more often" not in other["verdict"]


def test_crossings_within_one_eval_of_the_baseline_ask_for_more_evals() -> None:
    other = _arms([1.3, 1.32, 1.28, 1.01, 1.0])["other"]
    assert other["decision"] == "not resolved"
    assert other["n_tied_within_evals"] == 2
    assert "2 of 5 seeds crossed within the same evals" in other["verdict"]
    assert "training.eval_every_epochs" in other["verdict"]


def test_a_range_median_is_shown_with_its_two_ends() -> None:
    def median(lo: float, hi: float, n: int = 2) -> MedianInterval:
        return MedianInterval(n, Estimate(lo, hi), None, None, None)

    assert median_text(median(1.25, 1.3)) == "1.25–1.3"
    assert median_text(median(1.2, math.inf)) == "≥ 1.2"
    assert median_text(median(0.0, 1.0)) == "≤ 1"
    assert median_text(median(math.inf, math.inf)) == "never"
    assert median_text(median(0.0, math.inf, n=0)) == median_text(None) == "—"


def test_an_interval_reads_never_for_an_unbounded_end() -> None:
    def interval(ci: tuple[float, float] | None) -> MedianInterval:
        return MedianInterval(3, Estimate(1.0, 1.0), ci, 0.75, None)

    assert interval_text(interval((4.0, 4.5))) == "[4, 4.5]"
    assert interval_text(interval((6.0, math.inf))) == "[6, never]"
    assert interval_text(interval(None)) == interval_text(None) == "n/a"


def test_the_baseline_arm_shows_no_levels_and_the_answer_baseline() -> None:
    arms = _summaries([1.3, 1.32, 1.28, 1.31, 1.29])
    assert (arms["base"].answer, levels_text(arms["base"])) == ("baseline", "")
    assert (arms["other"].answer, arms["other"].confidence) == ("slower", 0.9)
    undecided = summarize_arms(_trials("lone", [1.0], 1.5), {"lone": "elsewhere"})[0]
    assert (undecided.answer, levels_text(undecided), undecided.epochs_ratio) == ("not resolved", "", None)


def test_the_run_table_shows_decisions_levels_and_the_margin() -> None:
    text = format_arms(list(_summaries([1.3, 1.32, 1.28, 1.31, 1.29]).values()))
    header, base, other = text.splitlines()[:3]
    assert "decision" in header and "decided at levels" in header
    assert "baseline" in base and "slower" in other and "slower at every level" in other
    assert "equivalent = the ratio's interval inside [0.909, 1.1]" in text
    assert "other: slower per epoch than the baseline (29-31 % slower; 5 seeds)" in text


def test_the_conditioning_scale_is_the_shamos_estimate_and_the_half_width_the_hl_one() -> None:
    # within-arm differences: 0.1, 0.2, 0.1 (first arm) and 0 (second): median 0.1
    c = L.conditioning([[0.0, 0.1, 0.2], [0.05, 0.05]], 1.5, seeds=10, confidence=0.9, margin=0.1)
    assert c is not None and (c.n_pairs, c.n_arms) == (5, 2)
    assert c.scale == pytest.approx(0.1 / (math.sqrt(2) * 0.6744897501960817), rel=1e-12)
    z = 1.6448536269514722  # the normal's 95th percentile: a two-sided 90 % interval
    assert c.expected_half_width == pytest.approx(z * c.scale * math.sqrt(math.pi / 30), rel=1e-12)
    assert c.threshold == pytest.approx(math.log(1.1) / 2) and not c.ok
    assert L.conditioning([[0.0, 0.01, 0.02]], 1.5, seeds=10, confidence=0.9, margin=0.1).ok  # type: ignore[union-attr]


def test_conditioning_needs_three_differences_of_uncensored_pairs() -> None:
    assert L.conditioning([[0.0, 0.1]], 1.5, seeds=10, confidence=0.9) is None
    assert L.conditioning([[0.0, 0.1], [0.2], []], 1.5, seeds=10, confidence=0.9) is None
    # an arm that never reached has no uncensored pair: the check is not judged from it
    never = _summaries([9.0] * 5)["other"].epochs_ratio
    assert never is not None and never.point_log_ratios == ()


def test_seed_shared_noise_cancels_in_the_check_as_in_the_decision() -> None:
    # the baseline's seeds cross far apart (time scales 0.7 to 1.3), and so does the arm's same
    # seed: the pairs agree, so the target is well conditioned; the same spread drawn
    # independently per arm is noise the pairs cannot cancel, and is flagged
    shared = [0.7, 1.3, 0.85, 1.15, 1.0]
    rules = dataclasses.replace(RULES, target=1.5)
    for other, ok in ((shared, True), ([1.15, 0.85, 1.3, 0.7, 1.0], False)):
        trials = _trials("base", shared, 1.5) + _trials("other", other, 1.5)
        base = summarize_arms(trials, {"base": "base", "other": "base"}, rules)[0]
        assert base.conditioning is not None and base.conditioning.ok is ok


def _floors_study(levels: tuple[float, ...] = (0.1, 0.5, 1.0)) -> list[ArmSummary]:
    """Seeds that fall at one rate onto floors 0.47 to 0.53, the arm's floors in another seed
    order: near the floors the pairs' crossings differ a lot, early in training little."""
    floors = {"base": [0.50, 0.53, 0.47, 0.52, 0.48], "other": [0.52, 0.47, 0.50, 0.48, 0.53]}
    curves = {arm: [_curve(_decaying(1.0, floor=f)) for f in fs] for arm, fs in floors.items()}
    best = L.baseline_best(curves["base"], "min")
    assert best is not None
    target = L.level_target(best, levels[0], "min")
    trials = [TrialCrossing(arm, s, locate(c, target, "min"), c, best) for arm, cs in curves.items()
              for s, c in enumerate(cs)]
    rules = StudyRules(levels=levels, target=target, headline_level=levels[0])
    return summarize_arms(trials, {"base": "base", "other": "base"}, rules)


def test_the_baseline_arm_carries_the_conditioning_warning_into_the_table() -> None:
    summaries = _floors_study()
    arms = [a.as_json() for a in summaries]
    cond = arms[0]["conditioning"]
    assert cond["ok"] is False and cond["suggested_level"] == 1.0 and "conditioning" not in arms[1]
    assert (cond["seeds"], cond["confidence"], cond["n_pairs"]) == (5, 0.9, 5)
    assert conditioning_text(summaries[1]) is None
    # the expected half-width is the width the arm's interval has: about ±14 % both
    lo, hi = arms[1]["epochs_ratio_vs_baseline_ci"]
    assert math.expm1(cond["expected_half_width"]) == pytest.approx((hi - lo) / 2, rel=0.1)
    text = format_arms(summaries)
    target = summaries[0].conditioning.target  # type: ignore[union-attr]
    assert text.splitlines()[-1].startswith(f"warning: at the target {target:.4g} the paired epochs ratios")
    assert "more than half the margin (±5%)" in text
    assert "level 1 is well conditioned" in text


def test_a_study_with_no_level_well_conditioned_says_so() -> None:
    summaries = _floors_study((0.1, 0.15))
    assert summaries[0].suggested_level is None
    assert "no level of target.levels is better conditioned" in (conditioning_text(summaries[0]) or "")


@pytest.mark.parametrize("levels", [[], [0.1, 0.1], [0.0], [-1.0], [float("nan")]])
def test_levels_must_be_distinct_and_positive(levels: list[float]) -> None:
    with pytest.raises(ValueError, match="levels must be distinct positive numbers"):
        L.check_levels(levels)


def test_the_levels_are_a_fixed_sequence_from_the_loosest() -> None:
    levels = [0.1, 0.25, 0.5, 1.0, 2.0]
    # the headline's level (0.1) takes the headline's decision; the others run 2, 1, 0.5, 0.25
    # and stop at the first not decided as the loosest was
    marginal: list[L.Decision] = ["slower", "slower", "not resolved", "slower", "slower"]
    assert L.fixed_sequence(levels, marginal, 0.1, "not resolved") == [
        "not resolved", "not resolved", "not resolved", "slower", "slower"]
    # a level decided otherwise than the loosest stops the sequence too
    mixed: list[L.Decision] = ["slower", "equivalent", "slower", "slower", "slower"]
    assert L.fixed_sequence(levels, mixed, 0.1, "slower") == [
        "slower", "not resolved", "slower", "slower", "slower"]
    # the loosest undecided: nothing past it, however the others read alone
    first_open: list[L.Decision] = ["slower"] * 4 + ["not resolved"]
    assert L.fixed_sequence(levels, first_open, None, None) == ["not resolved"] * 5


def test_a_level_past_the_sequences_stop_is_exploratory() -> None:
    # 5 seeds all slower at levels 0.5 and 1, but the loosest level (2) read at a confidence
    # 5 pairs cannot reach: the sequence stops there, the others are exploratory only
    trials = _trials("base", BASE, 1.5) + _trials("other", [1.3, 1.32, 1.28, 1.31, 1.29], 1.5)
    rules = StudyRules(levels=(0.5, 1.0, 2.0), margin=0.10)
    other = summarize_arms(trials, {"base": "base", "other": "base"}, rules)[1]
    assert [lv.decision for lv in other.levels] == ["slower"] * 3
    assert other.every_level == "slower" and other.as_json()["decision_at_every_level"] == "slower"
    assert levels_text(other) == "slower at every level"
    last = dataclasses.replace(other.levels[2], decision="not resolved", marginal="not resolved")
    open_ = [dataclasses.replace(lv, decision="not resolved") for lv in other.levels[:2]]
    stopped = dataclasses.replace(other, levels=(*open_, last))
    assert stopped.every_level is None
    assert levels_text(stopped) == "none (exploratory, past the family's stop: slower at 0.5, 1)"
    assert stopped.as_json()["ratio_by_target"][0]["exploratory_decision"] == "slower"


def test_an_equivalent_arm_says_equivalent_in_every_field() -> None:
    # truly 5 % slower, resolved above 1 but inside the 10 % band: one word, equivalent
    other = _summaries([1.05 * b for b in BASE], target=0.6)["other"]
    assert other.decision == "equivalent" and other.epochs_ratio is not None
    assert other.epochs_ratio.direction == "above"
    out = other.as_json()
    assert out["verdict"].startswith("equivalent within 10 % (") and "slower per epoch" not in out["verdict"]
    assert out["resolved_vs_baseline"] is True and out["decision"] == "equivalent"


def test_a_ratio_that_is_a_bound_is_never_written_as_the_median() -> None:
    # the arm's seeds never reach the target the baseline's reach: "at least" ratios
    trials = _trials("base", BASE, 1.5) + _trials("other", [1.0] * 5, 1.5)
    never = [TrialCrossing("other", s, locate(_curve(_decaying(1.0, floor=2.0)), 1.5, "min"),
                           _curve(_decaying(1.0, floor=2.0))) for s in range(5)]
    trials = [t for t in trials if t.arm == "base"] + never
    other = summarize_arms(trials, {"base": "base", "other": "base"}, RULES)[1].as_json()
    assert other["epochs_ratio_vs_baseline_median_kind"] == "at_least"
    assert other["epochs_ratio_vs_baseline_median"] is None
    assert other["epochs_ratio_vs_baseline_lower_bound"] > 1.0
    assert other["epochs_to_target_median"] is None and other["decision"] == "slower"


@pytest.mark.parametrize("own", [0.0, 0.15])
def test_the_conditioning_check_does_not_move_with_eval_spacing(own: float) -> None:
    # crossings interpolated inside their evals: a finer eval grid changes the pairs' log
    # ratios by the interpolation error only, not the check's verdict
    def study(spacing: float) -> L.Conditioning | None:
        epochs = [spacing * i for i in range(1, round(6 / spacing) + 1)]
        scales = {"base": [1.0, 1.1, 0.9, 1.05, 0.95],
                  "other": [x * math.exp(own * z) for x, z in zip([1.0, 1.1, 0.9, 1.05, 0.95],
                                                                 [1.0, -1.0, 0.5, -0.5, 0.0], strict=True)]}
        trials = []
        for arm, ss in scales.items():
            for seed, sc in enumerate(ss):
                pts = [EvalPoint(10 * e, 100 * e, e, e, 0.5 + 3.5 * 2 ** (-e / sc)) for e in epochs]
                trials.append(TrialCrossing(arm, seed, locate(pts, 1.4, "min"), pts))
        rules = StudyRules(target=1.4, margin=0.1)
        return summarize_arms(trials, {"base": "base", "other": "base"}, rules)[0].conditioning

    coarse, fine = study(0.2), study(0.05)
    assert coarse is not None and fine is not None and fine.ok == coarse.ok == (own == 0.0)
    assert fine.scale == pytest.approx(coarse.scale, rel=0.15, abs=0.01)


def test_no_more_seeds_are_advised_than_the_design_plans() -> None:
    trials = _trials("base", BASE, 1.5) + _trials("other", [1.3, 0.8, 1.28, 1.31, 1.29], 1.5)
    pairs = {"base": "base", "other": "base"}
    # a fixed design advises no more seeds: another block is a new study
    fixed = summarize_arms(trials, pairs, RULES)[1]
    assert fixed.decision == "not resolved" and fixed.seeds_needed is None
    assert "a fixed design ends here" in fixed.verdict()
    # an adaptive one says when pairs like these would decide, within its most seeds
    free = summarize_arms(trials, pairs, StudyRules(levels=(), max_seeds=20))[1]
    assert free.seeds_needed is not None and 5 < free.seeds_needed <= 20
    assert f"would decide at ~{free.seeds_needed} seeds" in free.verdict()
    spent = summarize_arms(trials, pairs, StudyRules(levels=(), max_seeds=5))[1]
    assert spent.seeds_needed is None and spent.as_json()["seeds_needed"] is None
    assert "the design's most seeds (5) are spent: it ends undecided" in spent.verdict()
    # a decided arm needs no more seeds
    decided = summarize_arms(_trials("base", BASE, 1.5) + _trials("other", [1.3] * 5, 1.5), pairs,
                             StudyRules(levels=(), max_seeds=20))[1]
    assert decided.decision == "slower" and decided.seeds_needed is None


@pytest.mark.parametrize(("raw", "expected"), [
    ('{"min": 5, "max": 10, "step": 1, "first_seed": 0}', 10), ("null", None), ("None", None), (None, None),
])
def test_the_report_reads_the_designs_max(raw: str | None, expected: int | None) -> None:
    import pandas as pd

    from scalesweep.dashboards.mlflow_data import Study
    from scalesweep.mlflow_names import REPLICATES_PARAM

    params = {} if raw is None else {REPLICATES_PARAM: raw}
    study = Study("e", "p", "p", params, pd.DataFrame(), pd.DataFrame(), pd.DataFrame())
    assert study.rules.max_seeds == expected


def test_every_arm_has_the_same_arms_json_keys() -> None:
    arms = _arms([1.3, 1.32, 1.28, 1.31, 1.29])
    base, other = set(arms["base"]), set(arms["other"])
    assert other - base == set() and base - other <= {"target_notes", "conditioning"}


def test_the_ratio_figure_stays_readable_when_a_target_sits_above_the_starting_loss() -> None:
    """Level 7 is a target of 4.0 over the floor 0.5: above every arm's first eval (about 3.8)
    but the slow arm's, which starts at 8. The slow arm's ratio there is only a bound, "at
    least" its crossing over the baseline's first eval, far above its other levels; the arm
    that matches the baseline has no ratio at all there (both reached at their first eval)."""
    from scalesweep.dashboards.arm_figures import RATIO_RANGE_FACTOR, plot_ratio_by_level

    def seeds(arm: str, start: float) -> list[TrialCrossing]:
        out = []
        for seed, s in enumerate(BASE):
            pts = _curve(_decaying(s, start=start))
            out.append(TrialCrossing(arm, seed, locate(pts, 1.5, "min"), pts))
        return out

    rules = StudyRules(levels=(0.5, 1.0, 2.0, 7.0), margin=0.10)
    trials = seeds("base", 4.0) + seeds("slow", 8.0) + seeds("same", 4.0)
    arms = summarize_arms(trials, {"base": "base", "slow": "base", "same": "base"}, rules)
    slow, same = (next(a for a in arms if a.arm == name) for name in ("slow", "same"))
    top_level = slow.levels[-1]
    assert top_level.ratios is not None and top_level.ratios.median.kind == "at_least"
    assert same.levels[-1].ratios is not None and same.levels[-1].ratios.median.kind == "unknown"
    bound = top_level.ratios.median.value
    assert bound is not None and bound > 5
    values = [lv.ratios.median.value for a in (slow, same) for lv in a.levels[:-1]
              if lv.ratios is not None and lv.ratios.median.kind == "value"]
    assert len(values) == 6

    ax = plot_ratio_by_level(arms).axes[0]
    low, high = ax.get_ylim()
    # the axis is the finite ratios' (and the band's), not the bound's
    assert low < min(values) and max(values) < high < bound
    assert high <= max(values) * RATIO_RANGE_FACTOR * 1.3
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert f"bound beyond the axis, at its edge: slow ≥ {bound:.3g} at {top_level.target:.3g}" in legend
    assert "?: both reached the target at their first eval, no ratio" in legend
    assert f"≥ {bound:.3g}" in [t.get_text() for t in ax.texts]
