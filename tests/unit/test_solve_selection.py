"""solve's answer is the best of K verified candidates: each is read at the design for α / K
(Bonferroni), so that the interval quoted for the pick holds whichever is picked
(scalesweep.orchestrator.launch.solve_answer). On the stored curves of a full run of the
shipped study (tests/data/wenet_4v16_curves.json), as a verification of its three arms."""

from __future__ import annotations

import json
from pathlib import Path

from scalesweep.orchestrator.launch.run import Outcome
from scalesweep.orchestrator.launch.solve_answer import _judged_for_selection, selection_design
from scalesweep.orchestrator.plan.rows import make_plan
from scalesweep.orchestrator.spec.load import load_sweep
from scalesweep.orchestrator.tracking.summary import summarize
from scalesweep.science.stats import sequential

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "wenet_4v16_curves.json"


def _verification() -> tuple[object, Outcome]:
    data = json.loads(DATA.read_text(encoding="utf-8"))
    plan = make_plan(load_sweep(str(ROOT / data["sweep"]), data["overrides"]))
    curves = {name: t["evals"] for name, t in data["trials"].items()}
    summaries = summarize(plan, curves)
    ran = [summaries[r.name] for r in plan.rows if r.name in curves]
    return plan.sweep, Outcome(parent_run_id="p", experiment="e", sweep_dir=ROOT, tracking_uri="",
                               summaries=ran)


def test_the_selection_design_spends_alpha_over_k() -> None:
    sweep, _ = _verification()
    one, three = selection_design(sweep, 1), selection_design(sweep, 3)
    assert one == sequential.design((6, 10), 0.9) and three == sequential.design((6, 10), 1 - 0.1 / 3)
    assert three.error <= 0.1 / 3 and three.confidence_at(10) > one.confidence_at(10)


def test_a_verification_of_one_seed_per_arm_has_a_design_that_decides_nothing() -> None:
    # sweeps/smoke.yaml's seed axis is [0]: no interval, so no look at any confidence
    sweep = load_sweep(str(ROOT / "sweeps" / "smoke.yaml"), [])
    d = selection_design(sweep, 3)
    assert d.looks == (1,) and d.error == 0.0


def test_each_candidate_is_read_at_the_selection_design() -> None:
    sweep, outcome = _verification()
    alone = {a.arm: a for a in _judged_for_selection(sweep, outcome, 1)}
    of_three = {a.arm: a for a in _judged_for_selection(sweep, outcome, 3)}
    arm = "ws16-warmup75-linear"  # 10 seeds in the stored run
    one, three = alone[arm].epochs_ratio, of_three[arm].epochs_ratio
    assert one is not None and three is not None and one.ratios.ci and three.ratios.ci
    # read at 1 - 0.1/3 the interval holds the 1 - 0.1 one: the pick's claim is a wider one
    assert three.confidence == selection_design(sweep, 3).confidence_at(10) > one.confidence
    assert three.ratios.ci[0] <= one.ratios.ci[0] and three.ratios.ci[1] >= one.ratios.ci[1]
    assert three.ratios.ci != one.ratios.ci
