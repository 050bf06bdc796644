"""How an arm's summary reads: the medians, intervals, levels and warnings as the run table,
the report and ``advise`` print them (the verdict's "4-6 % slower" is decisions.change_text)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from scalesweep.science.stats.arms import ArmSummary
from scalesweep.science.stats.replicates import MedianInterval, finite_or_none


def median_text(mi: MedianInterval | None) -> str:
    """A median as people read it: "4.32", "≤ 1", "≥ 1.39", "1.25–1.3" (between two seeds'
    brackets), "never", "unknown"; "—" without observations."""
    return "—" if mi is None or mi.n == 0 else mi.median.text()


def levels_text(arm: ArmSummary) -> str:
    """Where an arm is decided along its levels: "slower at 0.5, 1, 2; equivalent at 0.1"."""
    if not arm.levels or arm.is_baseline:
        return ""
    def text(by: Mapping[str, list[float]]) -> str:
        return "; ".join(f"{d} at {', '.join(f'{x:g}' for x in xs)}" for d, xs in by.items())

    every = arm.every_level
    if every is not None:
        return f"{every} at every level"
    decided, exploratory = arm.decided_levels(), arm.decided_levels(exploratory=True)
    out = text(decided) or "none"
    return out + (f" (exploratory, past the family's stop: {text(exploratory)})" if exploratory else "")


def conditioning_text(arm: ArmSummary) -> str | None:
    """The baseline arm's warning when the pairs' noise at the headline target is too wide for
    the margin, naming a level where it is not."""
    c = arm.conditioning
    if c is None or c.ok:
        return None
    level = arm.suggested_level
    better = ("no level of target.levels is better conditioned" if level is None
              else f"level {level:g} is well conditioned (target.levels)")
    half = math.expm1(c.expected_half_width)
    return (f"warning: at the target {c.target:.4g} the paired epochs ratios spread so much (a robust sd "
            f"of {c.scale:.3g} in log over {c.n_pairs} pairs) that the design's last look ({c.seeds} "
            f"seeds, {c.confidence:.0%}) can expect an interval of about ±{half:.0%}, more than half "
            f"the margin (±{math.expm1(c.threshold):.0%}): the crossing is mostly noise, and an arm "
            f"no different from the baseline will seldom read equivalent; {better}")


def interval_text(mi: MedianInterval | None) -> str:
    """A median's interval: "[4, 4.5]", "[6, never]", or "n/a" (one seed)."""
    if mi is None or mi.ci is None:
        return "n/a"
    lo, hi = finite_or_none(mi.ci[0]), finite_or_none(mi.ci[1])
    return f"[{'—' if lo is None else f'{lo:.3g}'}, {'never' if hi is None else f'{hi:.3g}'}]"

