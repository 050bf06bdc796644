"""The warmup at world size M. Pure.

By default the warmup is held **in samples** (Goyal et al. 2017, "Accurate, Large Minibatch
SGD", §2.2: a warmup of a fixed number of epochs at the large batch): W_M = W_ref · B_ref / B_M
updates, the ``scaled`` warmup rule of :mod:`scalesweep.science.scaling`. A study that ran
other warmup rules at N beside it (``fixed``: the same updates) can show otherwise: the other
rule is taken where, at the same lr factor, its paired ratio is lower than the samples rule's
on every seed both ran, three seeds or more (a sign test's smallest unanimous case; fewer seeds
or a split leave the samples rule, and the note says what the arms showed).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass

SAMPLES_RULE = "scaled"
#: warmup rules this module can carry to M
CARRIED_RULES = ("scaled", "fixed")
#: seeds both rules must share before the arms may overrule the samples rule
MIN_SHARED_SEEDS = 3
GOYAL = "held in samples (Goyal et al. 2017): W_ref × B_ref / B_M"


@dataclass(frozen=True)
class Warmup:
    """The warmup at M in updates (not rounded), the rule it follows and where that came from."""

    updates: float
    rule: str
    source: str
    notes: tuple[str, ...] = ()


def updates_at(rule: str, reference_warmup: float, reference_batch: float, batch: float) -> float:
    """The warmup at ``batch`` under ``rule`` (``scaled``: the same samples; ``fixed``: the
    same updates)."""
    for name, value in (("reference_batch", reference_batch), ("batch", batch)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be finite and positive, but got {value!r}")
    if not (math.isfinite(reference_warmup) and reference_warmup >= 0):
        raise ValueError(f"reference_warmup must be finite and at least 0, but got {reference_warmup!r}")
    if rule == "scaled":
        return reference_warmup * reference_batch / batch
    if rule == "fixed":
        return float(reference_warmup)
    raise ValueError(f"rule must be one of {CARRIED_RULES}, but got {rule!r}")


def warmup_at(reference_warmup: float, reference_batch: float, batch: float,
              arms: Mapping[str, Mapping[int, float]] | None = None) -> Warmup:
    """The warmup at ``batch``; ``arms``: warmup rule -> seed -> paired ratio at N, the arms
    at one lr factor (the recommended one's nearest), where the study ran more than one rule."""
    default = Warmup(updates_at(SAMPLES_RULE, reference_warmup, reference_batch, batch),
                     SAMPLES_RULE, GOYAL)
    if not arms or SAMPLES_RULE not in arms:
        return default
    base = arms[SAMPLES_RULE]
    notes: list[str] = []
    for rule, ratios in sorted(arms.items()):
        if rule == SAMPLES_RULE or rule not in CARRIED_RULES:
            continue
        shared = [s for s in ratios if s in base and math.isfinite(base[s]) and math.isfinite(ratios[s])]
        wins = sum(ratios[s] < base[s] for s in shared)
        med = statistics.median([ratios[s] / base[s] for s in shared]) if shared else math.nan
        seen = f"{rule} against {SAMPLES_RULE} at N: lower on {wins} of {len(shared)} shared seeds"
        if not math.isnan(med):
            seen += f" (median paired ratio {med:.3g})"
        if len(shared) >= MIN_SHARED_SEEDS and wins == len(shared):
            return Warmup(updates_at(rule, reference_warmup, reference_batch, batch), rule,
                          f"the study's arms: {seen}", tuple(notes))
        notes.append(seen + "; not every seed, so the samples rule stands")
    return Warmup(default.updates, default.rule, default.source, tuple(notes))
