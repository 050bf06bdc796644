"""The ledger's solve lines (docs/solve.md, "Checking the recipe later"): each recorded
`scalesweep solve` answer scored against its recipe's arm under the experiment's *other*
parent runs (a rerun of the verification's ``verify.yaml`` with new seeds logs one). Per such
run, the pairs are what that study's own analysis gives (its trials' crossings against their
own targets, paired by seed with the baseline arm, as its arms' ``epochs_ratio`` pairs them);
all the runs' pairs are pooled into one median. The verification's own trials never count:
they chose the recipe and set its interval. Reads only (the orchestrator writes the outcome).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scalesweep.dashboards.convergence_table import StudyTrial
from scalesweep.mlflow_names import ARM_PARAM, BASELINE_ARM_PARAM
from scalesweep.science.solve_record import KIND, SolveLedgerLine, SolveOutcome
from scalesweep.science.stats.arms import paired_epochs_ratios
from scalesweep.science.stats.replicates import Observation


def is_solve(record: Mapping[str, Any]) -> bool:
    return record.get("kind") == KIND


def solve_outcome(record: Mapping[str, Any], studies: Mapping[str, Sequence[StudyTrial]]
                  ) -> SolveOutcome | None:
    """The recipe's pairs in every parent run but the verification's (``studies``: parent run
    id -> its trials, as :func:`~scalesweep.dashboards.convergence_table.study_trials` reads
    them), pooled; None (pending) where no other run has a pair."""
    arm, base = str(record[ARM_PARAM]), str(record[BASELINE_ARM_PARAM])
    ratios: list[Observation] = []
    run_ids: list[str] = []
    parents: list[str] = []
    for parent, trials in studies.items():
        if parent == record["parent_run_id"]:
            continue  # the verification's own trials made the claim: they cannot check it
        pairs = paired_epochs_ratios([t.summary for t in trials], arm, base)
        if not pairs:
            continue
        ratios += pairs.values()
        run_ids += [t.run_id for t in trials if t.summary.arm in (arm, base) and t.summary.seed in pairs]
        parents.append(parent)
    return SolveOutcome.pooled(ratios, run_ids, parents)


def solve_lines(experiment: str, records: Sequence[Mapping[str, Any]],
                studies: Mapping[str, Sequence[StudyTrial]]) -> list[SolveLedgerLine]:
    """One line per solve record of ``experiment``, scored against ``studies``."""
    return [SolveLedgerLine.of(r, experiment, solve_outcome(r, studies)) for r in records if is_solve(r)]
