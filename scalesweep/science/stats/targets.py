"""The target each pair of seeds is measured against, when it is relative to the baseline
(docs/design.md §4, "Target"). Pure: no torch, no Ray, no MLflow.

A relative target is the best of the baseline arm's mean curve, loosened by ``r``
(``target.relative_to_baseline``); each level of ``target.levels`` loosens the same best. Three
rules keep that best from favouring any arm:

* **Cross-fitted.** The pair of seed s (the arm's seed s against the baseline's seed s) is
  measured against a best taken from the baseline's *other* seeds. A baseline seed with a high
  plateau then cannot raise its own target, so under "no difference" the two seeds of a pair
  are exchangeable given their target, and "never reached" is as likely on either side.
* **Frozen at the first look.** Only the seeds of the first look set it. Seeds that adaptive
  looks add later neither move it nor feed it: each later pair is measured against the best
  of every first-look seed, which is independent of both of its seeds.
* **Within the horizon.** The best is read over the evals up to H / (1 + d) epochs, H the
  baseline's horizon (its curves' last eval) and d the equivalence margin. The baseline's
  mean curve meets the target by then, so an arm that never meets it by H is about (1 + d)x
  slower or more: "never reached" decides instead of sitting inside the band.

A baseline curve that stopped before the horizon (a failed or interrupted trial) or holds a
non-finite eval (it diverged) would drag the mean curve: it is left out of the best, by name
(:attr:`ReferenceBests.left_out`), and it still counts in the comparisons as it is.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from scalesweep.science.stats.convergence import EvalPoint, Mode, best_value, resolve_target, smooth
from scalesweep.science.stats.decisions import DEFAULT_MARGIN
from scalesweep.science.stats.levels import mean_curve

#: how close to the horizon a curve's last eval must be to count as complete (float noise)
_HORIZON_SLACK = 1e-9
RULE = ("cross-fitted (each pair's target from the baseline's other first-look seeds), frozen at "
        "the first look, best read within horizon / (1 + margin)")


@dataclass(frozen=True)
class ReferenceBests:
    """The baseline best each seed's pair is measured against (``best(seed)``)."""

    #: epochs: the last eval of the complete baseline curves (None: no curve)
    horizon: float | None
    #: epochs: the best is read up to here, horizon / (1 + margin)
    window_end: float | None
    #: the first-look seeds whose curves set the best
    used: tuple[int, ...]
    #: seed -> why its curve was left out of the best
    left_out: Mapping[int, str] = field(default_factory=dict)
    #: the best of every used seed's mean curve: for pairs whose seeds did not set it
    pooled: float | None = None
    #: seed -> the best without that seed, for each used seed
    held_out: Mapping[int, float | None] = field(default_factory=dict)

    def best(self, seed: int) -> float | None:
        """The best seed ``seed``'s pair is measured against."""
        return self.held_out.get(seed, self.pooled)

    def warnings(self) -> list[str]:
        """What a user should know about how the best was set."""
        out = [f"warning: baseline seed {seed} left out of the target: {why}"
               for seed, why in sorted(self.left_out.items())]
        if len(self.used) == 1:
            out.append(f"warning: only baseline seed {self.used[0]} could set the target, so its "
                       "own pair is measured against its own best (not cross-fitted)")
        if not self.used:
            out.append("warning: no baseline curve could set the target: no crossing is measured")
        return out


def _left_out_because(curve: Sequence[EvalPoint], horizon: float) -> str | None:
    bad = next((p for p in curve if not math.isfinite(p.value)), None)
    if bad is not None:
        return f"it diverged (non-finite value at update {bad.update:g})"
    last = curve[-1].epoch
    if last < horizon * (1.0 - _HORIZON_SLACK):
        return f"it stopped at epoch {last:.4g}, before the horizon of {horizon:.4g} epochs"
    return None


def _window(curve: Sequence[EvalPoint], end: float) -> list[EvalPoint]:
    """The evals up to ``end`` epochs (at least the first: a best needs a value)."""
    inside = [p for p in curve if p.epoch <= end * (1.0 + _HORIZON_SLACK)]
    return inside or list(curve[:1])


def _best(curves: Sequence[Sequence[EvalPoint]], mode: Mode, smoothing: float) -> float | None:
    mean = mean_curve(curves)
    return best_value(smooth([p.value for p in mean], smoothing), mode) if mean else None


def reference_bests(curves: Mapping[int, Sequence[EvalPoint]], *, mode: Mode, smoothing: float = 0.0,
                    margin: float = DEFAULT_MARGIN, first_look: Collection[int] | None = None
                    ) -> ReferenceBests:
    """The bests of the baseline arm's seeds (``curves``: seed -> its evals of the target
    metric), from the seeds of ``first_look`` only (None: every seed)."""
    mine = {s: list(c) for s, c in curves.items() if c and (first_look is None or s in first_look)}
    missing = {} if first_look is None else {s: "it has no evaluations" for s in first_look
                                             if not curves.get(s)}
    if not mine:
        return ReferenceBests(None, None, (), missing)
    horizon = max(c[-1].epoch for c in mine.values())
    left_out = dict(missing)
    for seed, curve in mine.items():
        why = _left_out_because(curve, horizon)
        if why is not None:
            left_out[seed] = why
    used = tuple(sorted(s for s in mine if s not in left_out))
    window_end = horizon / (1.0 + margin)
    windows = {s: _window(mine[s], window_end) for s in used}
    pooled = _best(list(windows.values()), mode, smoothing) if used else None
    held_out = {s: (_best([w for t, w in windows.items() if t != s], mode, smoothing)
                    if len(used) > 1 else pooled) for s in used}
    return ReferenceBests(horizon, window_end, used, left_out, pooled, held_out)


def target_of(best: float | None, relative: float, mode: Mode) -> float | None:
    """The target ``relative`` above (below, for a max metric) a best; None without a best."""
    return None if best is None else resolve_target(mode, relative=relative, baseline_best=best)
