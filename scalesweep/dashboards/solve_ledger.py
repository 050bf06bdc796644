"""The ledger's solve lines (docs/solve.md, "Checking the recipe later"): each recorded
`scalesweep solve` answer scored against its recipe's arm under the experiment's *other*
parent runs (a rerun of the verification's ``verify.yaml`` with new seeds logs one). Per such
run, the pairs are what that study's own analysis gives (its trials' crossings against their
own targets, paired by seed with the baseline arm, as its arms' ``epochs_ratio`` pairs them);
all the runs' pairs are pooled into one median. The verification's own trials never count:
they chose the recipe and set its interval. Nor does a pair whose seed the search picked the
recipe on or the verification ran, or an older run already gave a pair: the same seed is the
same initialisation and data order, a repeat of that trial rather than a new test of the claim.
Reads only (the orchestrator writes the outcome).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scalesweep.dashboards.convergence_table import StudyTrial
from scalesweep.mlflow_names import ARM_PARAM, BASELINE_ARM_PARAM
from scalesweep.science.solve_record import KIND, SolveLedgerLine, SolveOutcome
from scalesweep.science.stats.arms import paired_epochs_ratios
from scalesweep.science.stats.replicates import Observation


def is_solve(record: Mapping[str, Any]) -> bool:
    return record.get("kind") == KIND


@dataclass
class _Pairs:
    """The pairs a record is scored on, and how many were left out."""

    ratios: list[Observation] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    #: pairs left out: their seed was the search's or the verification's, or an older run's
    reused: int = 0

    def outcome(self) -> SolveOutcome | None:
        return SolveOutcome.pooled(self.ratios, self.run_ids, self.parents)


def _pairs(record: Mapping[str, Any], studies: Mapping[str, Sequence[StudyTrial]]) -> _Pairs:
    arm, base = str(record[ARM_PARAM]), str(record[BASELINE_ARM_PARAM])
    verification = str(record["parent_run_id"])
    seen = {t.summary.seed for t in studies.get(verification, ()) if t.summary.arm in (arm, base)}
    seen |= {int(s) for s in record.get("search_seeds", ())}  # the pairs the recipe was picked on
    out = _Pairs()
    for parent, trials in studies.items():
        if parent == verification:
            continue  # the verification's own trials made the claim: they cannot check it
        pairs = paired_epochs_ratios([t.summary for t in trials], arm, base)
        fresh = {seed: ratio for seed, ratio in pairs.items() if seed not in seen}
        out.reused += len(pairs) - len(fresh)
        seen |= fresh.keys()
        if not fresh:
            continue
        out.ratios.extend(fresh.values())
        out.run_ids.extend(t.run_id for t in trials
                           if t.summary.arm in (arm, base) and t.summary.seed in fresh)
        out.parents.append(parent)
    return out


def solve_outcome(record: Mapping[str, Any], studies: Mapping[str, Sequence[StudyTrial]]
                  ) -> SolveOutcome | None:
    """The recipe's pairs in every parent run but the verification's (``studies``: parent run
    id -> its trials, as :func:`~scalesweep.dashboards.convergence_table.study_trials` reads
    them, oldest run first), each seed once: one the search or the verification ran, or an
    older run paired already, is left out. Pooled; None (pending) where no pair is left."""
    return _pairs(record, studies).outcome()


def solve_lines(experiment: str, records: Sequence[Mapping[str, Any]],
                studies: Mapping[str, Sequence[StudyTrial]]) -> list[SolveLedgerLine]:
    """One line per solve record of ``experiment``, scored against ``studies``."""
    lines = []
    for r in (r for r in records if is_solve(r)):
        p = _pairs(r, studies)
        lines.append(SolveLedgerLine.of(r, experiment, p.outcome(), reused=p.reused))
    return lines
