"""The ledger's recommend lines (docs/beyond.md, "recommend"): each recorded `scalesweep
recommend` scored against the trials at its global batch M that the experiment's *other*
parent runs hold (a later study that ran M), and the runs of its ``<experiment>-solve``
experiment (a `scalesweep solve` at M logs there). Of those trials, the arm with the fewest
median epochs to target is the best setting measured at M; its median over the study's at N
(recorded) is the observed epochs ratio, against the recorded interval. The recommending
study's own trials never count: a study that ran M itself was not predicting it. Reads only
(the orchestrator writes the outcome).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from scalesweep.dashboards.convergence_table import StudyTrial
from scalesweep.dashboards.prediction import param_number, trial_epochs, usable_trials
from scalesweep.science.recommend.record import RecommendLedgerLine, RecommendOutcome, is_recommend

#: the experiment a solve of study ``<name>`` logs to (orchestrator/launch/solve.py)
SOLVE_EXPERIMENT_SUFFIX = "-solve"


def claims(record: Mapping[str, Any]) -> bool:
    """A recommend record the ledger can score: one with an epochs-ratio interval and N's epochs."""
    return is_recommend(record) and record.get("ratio_ci") is not None \
        and record.get("n_epochs_median") is not None


def recommend_outcome(record: Mapping[str, Any], studies: Mapping[str, Sequence[StudyTrial]]
                      ) -> RecommendOutcome | None:
    """The best arm at the record's global batch in ``studies`` (parent run id -> its trials)
    but the recommending study's; None (pending) where none ran there."""
    batch, own = float(record["global_batch"]), str(record["parent_run_id"])
    n_epochs = float(record["n_epochs_median"])
    arms: dict[str, list[tuple[str, StudyTrial]]] = {}
    for parent, trials in studies.items():
        if parent == own:
            continue
        for t in usable_trials(trials):
            if param_number(t.run["global_batch"]) == batch and trial_epochs(t) is not None:
                arms.setdefault(f"{parent}/{t.summary.arm}", []).append((parent, t))
    if not arms:
        return None

    def median(members: list[tuple[str, StudyTrial]]) -> float:
        return statistics.median(trial_epochs(t) or 0.0 for _, t in members)

    key = min(arms, key=lambda k: (median(arms[k]), k))
    members = arms[key]
    never = [t.summary.epochs_to_target_lo for _, t in members if t.summary.crossing == "never"
             and t.summary.epochs_to_target_lo is not None]
    return RecommendOutcome(
        arm=members[0][1].summary.arm, seeds=len(members), observed=median(members) / n_epochs,
        run_ids=tuple(sorted(t.run_id for _, t in members)), parent_run_ids=(members[0][0],),
        horizon=min(never) / n_epochs if never else None)


def recommend_lines(experiment: str, records: Sequence[Mapping[str, Any]],
                    studies: Mapping[str, Sequence[StudyTrial]]) -> list[RecommendLedgerLine]:
    """One line per recommend record of ``experiment`` that claims an interval, scored against
    ``studies`` (the experiment's parent runs and its solve experiment's)."""
    return [RecommendLedgerLine.of(r, experiment, recommend_outcome(r, studies))
            for r in records if claims(r)]
