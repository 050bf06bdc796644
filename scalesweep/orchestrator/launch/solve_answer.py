"""The answer `scalesweep solve` prints (docs/solve.md, "The answer"): the verified candidate
whose decision is best, its interval at every level, what the solve cost, and the recipe's
settings in the recipe's own keys, ready to paste.

The answer is the best of K verified candidates, picked after seeing their intervals, so each
candidate's interval is read again at the design for an error of α / K (Bonferroni): the
chance that any of the K intervals misses its candidate's truth is then at most α, whichever
is picked. The group-sequential design bounds the chance that any planned look's interval
misses, whatever the rule that stopped the seeds, so the verification's own looks (decided at
α) can be read at α / K afterwards."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from scalesweep.mlflow_names import ARM_PARAM
from scalesweep.orchestrator.launch.run import Outcome
from scalesweep.orchestrator.launch.solve_search import Spent
from scalesweep.orchestrator.launch.solve_state import candidate_number, trial_epochs
from scalesweep.orchestrator.plan import rules as plan_rules
from scalesweep.orchestrator.plan.rows import PlanRow, row_for
from scalesweep.orchestrator.plan.solve_plan import SolvePlan
from scalesweep.orchestrator.spec.load import Sweep
from scalesweep.science.solve import answer_order, at_edge
from scalesweep.science.stats import sequential
from scalesweep.science.stats.arms import ArmSummary, summarize_arms
from scalesweep.science.stats.levels import ratio_median_json
from scalesweep.science.stats.replicates import CONFIDENCE


def _arm_of(arms: list[ArmSummary], name: str) -> ArmSummary | None:
    return next((a for a in arms if a.arm == name), None)


def selection_design(sweep: Sweep, k: int) -> sequential.Design:
    """The verification's looks at an error of α / k: what each of k candidates is read at (a
    verification of one seed per arm decides nothing, at any confidence)."""
    return plan_rules.design(sweep, 1.0 - (1.0 - CONFIDENCE) / max(k, 1))


def _judged_for_selection(sweep: Sweep, verification: Outcome, k: int) -> list[ArmSummary]:
    """The verification's arms judged again at the selection design (α / k)."""
    d = selection_design(sweep, k)
    base = plan_rules.study_rules(sweep)
    rules = replace(base, confidence=d.per_look, last_confidence=d.last)
    pairs = {s.arm: s.baseline_arm for s in verification.summaries}
    return summarize_arms(verification.summaries, pairs, rules)


def answer(sweep: Sweep, sp: SolvePlan, picks: list[tuple[float, int]], verification: Outcome | None,
           spent: Spent, curves: Mapping[str, Iterable[Mapping[str, Any]]], cluster: Any) -> dict[str, Any]:
    """The JSON answer (docs/solve.md): the verified recipe whose decision is best."""
    base = sp.baseline_rows[0]
    # the baseline seeds' epochs, and the candidates' as the budget counted them (those a dead
    # driver cut short included)
    search_epochs = spent.used + sum(trial_epochs(evals) for name, evals in curves.items()
                                     if candidate_number(name) is None)
    verified: list[tuple[tuple[int, float, float], PlanRow, ArmSummary]] = []
    verify_epochs = 0.0
    if verification is not None:
        verify_epochs = sum(float(t.get("epochs") or 0.0) for t in verification.trials)
        judged = _judged_for_selection(sweep, verification, len(picks))
        for factor, warmup in picks:
            row = row_for(sweep, {**base.axes, "world_size": sp.world_size, "warmup_rule": warmup,
                                  "scaling_rule": factor}, cluster)
            arm = _arm_of(judged, row.arm)
            if arm is None or arm.epochs_ratio is None:
                continue
            mi = arm.epochs_ratio.ratios
            key = answer_order(arm.decision, mi.ci, mi.median.value if mi.median.kind == "value" else None)
            verified.append((key, row, arm))
    trials = len(curves) + (len(verification.trials) if verification is not None else 0)
    out: dict[str, Any] = {
        "world_size": sp.world_size, "recipe": None, "peak_lr": None, "warmup_steps": None,
        "decision": None, "ratio_median": None, "ratio_ci": None, "ratio_by_target": [],
        "trials_used": trials, "trial_epochs_used": round(search_epochs + verify_epochs, 3),
        "grid_trial_epochs": sp.grid_trial_epochs, "sampler": sp.sampler, "space": sp.space_json(),
        "search_trial_epochs_used": round(spent.used, 3), "candidates_run": spent.finished,
        "best_of": len(picks) if verification is not None else 0,
        "selection_confidence": None if verification is None else
        1.0 - (1.0 - CONFIDENCE) / max(len(picks), 1),
        "verification_parent_run_id": verification.parent_run_id if verification else None}
    if not verified:
        return out
    _, row, arm = min(verified, key=lambda v: v[0])
    ratios = arm.epochs_ratio.ratios if arm.epochs_ratio is not None else None
    out.update({
        "recipe": recipe_lines(sweep, base, row), ARM_PARAM: row.arm,
        "lr_factor": row.axes["scaling_rule"], "peak_lr": row.peak_lr, "lr": row.lr,
        "warmup_steps": row.warmup_steps, "decision": arm.decision,
        "ratio_median": ratio_median_json(ratios)["ratio_median"],
        "ratio_ci": None if ratios is None or ratios.ci is None else [
            _finite(ratios.ci[0]), _finite(ratios.ci[1])],
        "ratio_by_target": [level.as_json() for level in arm.levels],
        "at_edge": at_edge(sp.space, float(row.axes["scaling_rule"]), row.warmup_steps)})
    return out


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def recipe_lines(sweep: Sweep, base: PlanRow, row: PlanRow) -> dict[str, Any]:
    """What changes from the baseline's settings, in the recipe's own keys (WeNet's
    ``optim_conf``/``scheduler_conf``, DeepSpeed's JSON paths) where the sweep reads one, else
    in the sweep file's: ready to paste."""
    changes: dict[str, Any] = {}
    if row.trial.optimizer.get("lr") != base.trial.optimizer.get("lr"):
        changes["optimizer.lr"] = row.trial.optimizer["lr"]
    for key, value in row.trial.scheduler.params.items():
        if base.trial.scheduler.params.get(key) != value:
            changes[f"scheduler.{key}"] = value
    recipe = sweep.recipe
    origins = recipe.origins if recipe is not None else {}
    kind = recipe.kind if recipe is not None else "scalesweep"
    return {"format": kind, "settings": {origins.get(k, k): v for k, v in changes.items()}}
