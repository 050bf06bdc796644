"""How a paired ratio's interval becomes one of four answers (docs/design.md §4, "Decisions").

The ratio is trial / baseline on the epochs clock, paired by seed: above 1 the trial needs more
epochs than the baseline. With an equivalence margin d (``target.equivalence_margin``), the
answer for an interval [lo, hi] reached at the confidence the design asks for is

* ``equivalent`` when 1/(1+d) <= lo and hi <= 1+d: the whole interval lies inside the band,
  so any difference is smaller than the margin the user said does not matter (this wins over
  faster/slower: a resolved 3 % difference inside a 10 % margin is an equivalence);
* ``slower`` when lo > 1, ``faster`` when hi < 1;
* ``not resolved`` otherwise, or when the seeds cannot reach the confidence at all.

Both ends of the band are tested like 1 is (two one-sided tests, each at the interval's
one-sided level), so "equivalent" is as strong a claim as "slower". A bracket that ends at
+inf (a seed that never reached) keeps ``hi`` infinite and never makes an arm equivalent.
Pure: no torch, no Ray, no MLflow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

from scalesweep.science.stats.replicates import Comparison, Confidence, Observation, compare

Decision = Literal["faster", "slower", "equivalent", "not resolved"]
#: what arms.json says of the baseline arm itself, in the same field
BASELINE = "baseline"
DECISIONS: tuple[Decision, ...] = ("faster", "slower", "equivalent", "not resolved")
#: the default of target.equivalence_margin
DEFAULT_MARGIN = 0.10


def check_margin(margin: float) -> None:
    """A margin is a positive number below 1 (a 100 % margin would call 2x equivalent)."""
    if isinstance(margin, bool) or not isinstance(margin, int | float) or not math.isfinite(margin) \
            or not 0.0 < margin < 1.0:
        raise ValueError(f"equivalence_margin must be a number with 0 < margin < 1, but got {margin!r}")


def band(margin: float) -> tuple[float, float]:
    """The ratios counted as equivalent: [1/(1+d), 1+d], symmetric on a log scale."""
    check_margin(margin)
    return 1.0 / (1.0 + margin), 1.0 + margin


def decide(ci: tuple[float, float] | None, resolved_at_confidence: bool, margin: float) -> Decision:
    """The answer for a ratio interval. ``resolved_at_confidence``: whether the interval's
    coverage reaches the confidence the design asks for (too few seeds: it does not)."""
    low, high = band(margin)
    if ci is None or not resolved_at_confidence:
        return "not resolved"
    lo, hi = ci
    if low <= lo and hi <= high:
        return "equivalent"
    if lo > 1.0:
        return "slower"
    if hi < 1.0:
        return "faster"
    return "not resolved"


def decide_pairs(trial: Mapping[int, Observation], baseline: Mapping[int, Observation],
                 per_look: Confidence, margin: float, max_seeds: int | None = None
                 ) -> tuple[Decision, Comparison]:
    """The decision for one arm against the baseline from their seeds' observations (paired
    by seed), its interval read at the design's confidence for that many pairs."""
    comparison = compare(trial, baseline, per_look, max_seeds)
    ci, coverage = comparison.ratios.ci, comparison.ratios.coverage
    return decide(ci, coverage is not None and coverage >= comparison.confidence, margin), comparison


def change_text(ci: tuple[float, float] | None) -> str:
    """A ratio interval as a change per epoch: "4-6 % slower", "between 3 % faster and 8 %
    slower", "at least 20 % slower" (a seed that never reached)."""
    if ci is None:
        return "no interval"
    lo, hi = ci

    def pct(x: float) -> str:
        return f"{abs(x - 1) * 100:.0f}"

    def span(a: float, b: float) -> str:
        return f"{pct(a)} %" if pct(a) == pct(b) else f"{pct(a)}-{pct(b)} %"

    if not math.isfinite(hi):
        return f"at least {pct(lo)} % slower" if lo > 1 else f"from {pct(lo)} % faster to never"
    if lo >= 1:  # an end at exactly 1 is "no change", not "0 % faster"
        return f"{span(lo, hi)} slower"
    if hi <= 1:
        return f"{span(hi, lo)} faster"
    return f"between {pct(lo)} % faster and {pct(hi)} % slower"
