"""A sweep's :class:`~scalesweep.science.stats.rules.StudyRules`, made once at plan time
(``Plan.rules``): the looks of its seed design (:mod:`scalesweep.orchestrator.plan.adaptive`
decides the rounds from them), the per-look confidence that keeps the design's error rate,
and the target's settings. Only the sweep decides them,
never a trial's result."""

from __future__ import annotations

from scalesweep.orchestrator.spec.load import Sweep, metric_mode
from scalesweep.science.stats import sequential
from scalesweep.science.stats.replicates import CONFIDENCE
from scalesweep.science.stats.rules import StudyRules


def looks(sweep: Sweep) -> tuple[int, ...]:
    """The seed counts at which arms are decided: every seed at once without ``replicates``."""
    rep = sweep.spec.replicates
    if rep is None:
        return (len(sweep.spec.axes.seed),)
    return sequential.adaptive_looks(rep.min, rep.max, rep.step)


def design(sweep: Sweep, confidence: float = CONFIDENCE) -> sequential.Design:
    """The sweep's looks and the per-look confidence of every interval it reports, with the
    design's exact error (a fixed design too: its one look's)."""
    seen = looks(sweep)
    if seen[0] < sequential.MIN_SEEDS:  # one seed: no interval, nothing is ever decided
        return sequential.Design(seen, confidence, confidence, 0.0)
    return sequential.design(seen, confidence)


def study_rules(sweep: Sweep) -> StudyRules:
    """The rules this sweep's arms are judged by; the headline target is the data's, filled in
    when the arms are summarised."""
    target, rep = sweep.spec.target, sweep.spec.replicates
    headline, d = target.relative_to_baseline, design(sweep)
    return StudyRules(confidence=d.per_look, last_confidence=d.last, margin=target.equivalence_margin,
                      levels=tuple(target.levels), mode=metric_mode(sweep),
                      smoothing=target.smoothing,
                      headline_level=headline if headline in target.levels else None,
                      max_seeds=None if rep is None else rep.max)
