"""Curtailment on the stored curves of a full run of the shipped study (sweeps/wenet_4v16.yaml,
the block of seeds 10-19; tests/data/wenet_4v16_curves.json, made by scripts/stored_curves.py):
every decision (headline, each level in the family and alone, at every adaptive look) is the
same with the trials cut where the rule stops them, and the Tune stopper stops each trial where
the rule says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scalesweep.orchestrator.launch.curtail_stopper import (
    CurtailStopper,
    baseline_names,
    split_round,
    trial_gates,
)
from scalesweep.orchestrator.plan.rows import Plan, PlanRow, make_plan
from scalesweep.orchestrator.spec.load import load_sweep
from scalesweep.orchestrator.tracking.summary import arm_summaries, points
from scalesweep.science.stats import curtail

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "wenet_4v16_curves.json"
Curves = dict[str, list[dict[str, Any]]]
Stored = tuple[Plan, list[PlanRow], Curves]


@pytest.fixture(scope="module")
def stored() -> Stored:
    data = json.loads(DATA.read_text(encoding="utf-8"))
    plan = make_plan(load_sweep(str(ROOT / data["sweep"]), [*data["overrides"], "curtail=true"]))
    curves = {name: t["evals"] for name, t in data["trials"].items()}
    rows = [r for r in plan.rows if r.name in curves]
    return plan, rows, curves


def test_the_stored_run_is_a_complete_run_of_the_shipped_study(stored: Stored) -> None:
    _, rows, curves = stored
    data = json.loads(DATA.read_text(encoding="utf-8"))
    assert len(rows) == len(curves) == 30  # every stored trial is a trial of today's plan
    assert {t["status"] for t in data["trials"].values()} == {"completed"}
    for row in rows:  # each ran to its last update, an eval every eval_every
        evals = curves[row.name]
        assert evals[-1]["update"] == row.total_updates and evals[-1]["epoch"] == row.epochs == 4.0
        assert len(evals) == row.total_updates // row.eval_every == 32
    seeds = {a: sorted(r.seed for r in rows if r.arm == a) for a in {r.arm for r in rows}}
    assert seeds == {"ws4-warmup300-none": list(range(10, 20)), "ws16-warmup75-linear": list(range(10, 20)),
                     "ws16-warmup300-none": list(range(10, 15)), "ws16-warmup19-none": list(range(10, 15))}


def cut(plan: Plan, rows: list[PlanRow], curves: Curves) -> dict[str, int | None]:
    """Trial -> the index of the eval curtailment stops it after (None: to its end)."""
    spec = plan.sweep.spec.target
    out: dict[str, int | None] = {}
    for row in rows:
        gates = trial_gates(plan, curves, row, lambda name: True)
        out[row.name] = None if gates is None else curtail.stop_index(
            points(curves[row.name], spec.metric), gates, "min", spec.smoothing)
    return out


def decisions(plan: Plan, curves: Curves, rows: list[PlanRow]) -> dict[str, Any]:
    return {a.arm: (a.answer, [(lv.level, lv.decision, lv.marginal) for lv in a.levels])
            for a in arm_summaries(plan, curves, rows)}


def test_every_decision_is_the_same_with_and_without_curtailment(stored: Stored) -> None:
    plan, rows, curves = stored
    stops = cut(plan, rows, curves)
    short = {n: c if (i := stops[n]) is None else c[: i + 1] for n, c in curves.items()}
    # the baseline trials run in full; here every other trial (20) is cut short
    bases = baseline_names(plan)
    assert {n for n, i in stops.items() if i is None} == {r.name for r in rows if r.name in bases}
    full = decisions(plan, curves, rows)
    assert decisions(plan, short, rows) == full
    # the run was made when the first look was at 5 seeds: the two arms decided there then
    # ran 5 seeds, too few for today's first look at 6; the 10-seed arm is decided
    assert {a: d[0] for a, d in full.items()} == {
        "ws4-warmup300-none": "baseline", "ws16-warmup300-none": "not resolved",
        "ws16-warmup19-none": "not resolved", "ws16-warmup75-linear": "slower"}
    # and at each adaptive look (seeds 10..10+n-1 of the arms that ran them)
    for n in range(5, 11):
        look = [r for r in rows if r.seed < 10 + n]
        assert decisions(plan, short, look) == decisions(plan, curves, look), n
    trained = [(short[r.name][-1]["epoch"], r.epochs) for r in rows]
    saved = curtail.saving(trained)
    # (the targets are frozen at today's first look, 6 seeds)
    assert (saved.full, saved.curtailed, saved.n_curtailed) == (120.0, 110.625, 20)
    assert saved.text().endswith("110.6 trial-epochs trained against 120 run to the end (9.375 saved, 8%)")


def test_the_stopper_stops_each_trial_where_the_rule_does(stored: Stored) -> None:
    plan, rows, curves = stored
    stops = cut(plan, rows, curves)
    bases = baseline_names(plan)
    logged: Curves = {n: c for n, c in curves.items() if n in bases}  # they ran first, in full
    stopper = CurtailStopper(plan, logged, ended=lambda name: name in logged)
    for row in rows:
        stopped_at = None
        for i, ev in enumerate(curves[row.name]):
            result = {**ev, "config": {"trial_config": {"trial": {"name": row.name}}}}
            if stopper(f"id-{row.name}", result):
                stopped_at = i
                break
            if row.name not in bases:
                logged.setdefault(row.name, []).append(ev)  # what the callback does after it
        assert stopped_at == stops[row.name], row.name
    assert set(stopper.stopped) == {n for n, i in stops.items() if i is not None}


def test_nothing_is_stopped_before_the_baselines_it_reads_have_ended(stored: Stored) -> None:
    plan, rows, curves = stored
    bases = baseline_names(plan)
    logged = {n: c for n, c in curves.items() if n in bases}
    waiting = CurtailStopper(plan, logged, ended=lambda name: name != "ws4-warmup300-none-s12")
    row = next(r for r in rows if r.name == "ws16-warmup300-none-s10")  # seed 12 is first-look
    assert not any(waiting("x", {**ev, "config": {"trial_config": {"trial": {"name": row.name}}}})
                   for ev in curves[row.name])
    first, rest = split_round(plan, rows)
    assert {r.name for r in first} == bases & {r.name for r in rows}
    assert not {r.name for r in rest} & bases
