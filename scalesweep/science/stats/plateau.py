"""Has the baseline plateaued? A study that stops while its baseline still falls compares arms
in the early phase of training, whatever it says about convergence (issue 33): this is the
check that says which.

"Plateaued" means the last ``last_share`` of the run (default 20 %) improves the baseline
arm's best dev metric by less than ``min_improvement`` (default 2 %) of that best: the best of
the seeds' mean curve (eval by eval, smoothed like the targets) over the evals up to
(1 − last_share) × the run's last eval, against its best over the whole run. The mean curve,
not each seed: the target is read off it too, and one noisy seed should not decide alone.
Pure: no torch, no Ray, no MLflow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scalesweep.science.stats.convergence import EvalPoint, Mode, best_value, smooth
from scalesweep.science.stats.levels import mean_curve

#: the defaults of the sweep file's ``plateau:`` block
DEFAULT_LAST_SHARE = 0.2
DEFAULT_MIN_IMPROVEMENT = 0.02
#: an eval this close to the cut counts as before it (float noise in logged epochs)
_SLACK = 1e-9


@dataclass(frozen=True)
class Plateau:
    """The check on one baseline arm's curves."""

    metric: str
    #: the run's last eval, in epochs, and where its last share begins
    horizon: float
    cut: float
    #: the best of the mean curve up to ``cut``, and over the whole run
    best_before: float
    best: float
    last_share: float
    min_improvement: float

    @property
    def improvement(self) -> float:
        """How much the last share improved the best, relative to the best before it (0: not
        at all; a best before of exactly 0 that improved is an infinite improvement)."""
        gain = abs(self.best_before - self.best)
        if gain == 0.0:
            return 0.0
        return gain / abs(self.best_before) if self.best_before != 0.0 else math.inf

    @property
    def reached(self) -> bool:
        return self.improvement < self.min_improvement

    def text(self) -> str:
        """One line: the verdict, then the numbers it rests on."""
        head = "plateau reached" if self.reached else "still falling: train longer"
        side = "under" if self.reached else "not under"
        return (f"{head}: the last {self.last_share:.0%} of the run (epochs {self.cut:.3g}-"
                f"{self.horizon:.3g}) improved the baseline's best {self.metric} by "
                f"{self.improvement:.1%} ({self.best_before:.4g} -> {self.best:.4g}), {side} "
                f"{self.min_improvement:.0%}")


def check_plateau(curves: Sequence[Sequence[EvalPoint]], mode: Mode, *, metric: str = "dev_loss",
                  last_share: float = DEFAULT_LAST_SHARE,
                  min_improvement: float = DEFAULT_MIN_IMPROVEMENT,
                  smoothing: float = 0.0) -> Plateau | None:
    """The check on the baseline arm's seeds' curves (each its evals of ``metric``); None when
    it cannot be made: no evals, no finite value before the cut, or one eval only."""
    if not 0.0 < last_share < 1.0:
        raise ValueError(f"last_share must be in (0, 1), but got {last_share=}")
    if not 0.0 < min_improvement < 1.0:
        raise ValueError(f"min_improvement must be in (0, 1), but got {min_improvement=}")
    mean = mean_curve([list(c) for c in curves if c])
    if len(mean) < 2:
        return None
    values = smooth([p.value for p in mean], smoothing)
    horizon = mean[-1].epoch
    cut = (1.0 - last_share) * horizon
    before = [v for p, v in zip(mean, values, strict=True) if p.epoch <= cut * (1.0 + _SLACK)]
    best_before, best = best_value(before, mode), best_value(values, mode)
    if best_before is None or best is None:
        return None
    return Plateau(metric, horizon, cut, best_before, best, last_share, min_improvement)
