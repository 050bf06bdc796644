"""`scalesweep solve`: the lr and warmup searched at a new world size M, the score each
candidate gets, and which verified candidate is the answer (docs/solve.md). Pure: no torch, no
Ray, no MLflow.

**Space.** Two numbers, both searched on a log scale: the lr factor f (the candidate's lr is
f x the reference's, so it scales every lr of the schedule as an lr rule does) and the warmup W
in updates at M. With k = B_M / B_ref, the default space runs up to twice the linear rule
(f = 2k), and from 1/4 to 4x the scaled warmup (W_ref / k): it holds every named rule's answer
with room on both sides. Its lr factor's low end is the caller's (`solve` takes it from
:func:`scalesweep.science.recommend.space.lr_low`, which places it below the sqrt rule where the
lr models allow a best there, with the reason it prints); without one, the sqrt rule
(f = sqrt(k)).

**Score.** A candidate trains one seed s and is scored by its epochs to the headline target
over the baseline's epochs for seed s: the paired ratio the study decides on. A candidate that
has not reached the target scores its bound, the epochs it trained over the baseline's, a
number it is known to be at or above, never a made-up one. While it trains, the same bound is
its running score, which early stopping compares (a candidate is stopped only once others
reached the target sooner than it can).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scalesweep.mlflow_names import SOLVE_RATIO_METRIC
from scalesweep.science.stats.convergence import EvalPoint, Mode, first_crossing

#: the metric every solve trial reports with each eval (Tune's search and early stopping read it)
OBJECTIVE_METRIC = SOLVE_RATIO_METRIC
#: the grid the search is compared with: points this far apart (a factor, per dimension) on
#: the same log scale, so an answer within one step of a grid point is as good as the grid's
GRID_STEP = math.sqrt(2.0)
#: the default widths of the space around the rules' answers
LR_LOW_RULE, LR_HIGH_OF_LINEAR = "sqrt", 2.0
WARMUP_LOW_OF_SCALED, WARMUP_HIGH_OF_SCALED = 0.25, 4.0


@dataclass(frozen=True)
class Range:
    """A log-scale interval ``[low, high]`` of one searched number."""

    name: str
    low: float
    high: float

    def problems(self) -> list[tuple[str, object, str]]:
        """(field, value, rule) for each bound that is not a usable one."""
        out: list[tuple[str, object, str]] = []
        for end, value in (("low", self.low), ("high", self.high)):
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                out.append((f"{self.name}.{end}", value, "must be a number > 0 (the space is "
                                                           "searched on a log scale)"))
        if not out and self.low > self.high:
            out.append((self.name, f"{self.low:g}..{self.high:g}", "low must be at most high"))
        return out

    @property
    def centre(self) -> float:
        return math.sqrt(self.low * self.high)

    def grid_points(self, step: float = GRID_STEP) -> int:
        """Points of a log grid ``step`` apart that cover the range, ends included."""
        if self.high <= self.low:
            return 1
        return math.ceil(math.log(self.high / self.low) / math.log(step) - 1e-9) + 1

    def grid(self, step: float = GRID_STEP) -> list[float]:
        """Those points, evenly spaced on the log scale from ``low`` to ``high`` (at most
        ``step`` apart: the range is rarely a whole number of steps)."""
        n = self.grid_points(step)
        if n == 1:
            return [self.low]
        return [self.low * (self.high / self.low) ** (i / (n - 1)) for i in range(n)]

    def whole_bounds(self) -> tuple[int, int]:
        """The whole numbers inside the range, at least one: a warmup counts updates."""
        low = max(1, math.ceil(self.low - 1e-9))
        return low, max(low, math.floor(self.high + 1e-9))


@dataclass(frozen=True)
class SearchSpace:
    """What `solve` searches at world size M (lr factor and warmup), and what the named rules
    give there, to print beside it."""

    world_size: int
    k: float  # global batch at M over the reference's
    lr_factor: Range
    warmup: Range  # updates at M
    reference_lr: float  # the optimizer lr as tuned at the reference
    reference_warmup: int  # the warmup at the reference, in updates
    #: where the lr factor's low end comes from, a sentence; "" where nothing says
    lr_low_reason: str = ""

    @property
    def scaled_warmup(self) -> float:
        return self.reference_warmup / self.k

    def rule_points(self) -> dict[str, tuple[float, float]]:
        """The named rules' (lr factor, warmup) at M."""
        return {"none, fixed": (1.0, float(self.reference_warmup)),
                "sqrt, scaled": (math.sqrt(self.k), self.scaled_warmup),
                "linear, scaled": (self.k, self.scaled_warmup)}

    def grid(self, step: float = GRID_STEP) -> list[tuple[float, int]]:
        """The grid over the space at ``step``: every lr factor with every warmup, the warmups
        rounded to whole updates inside the range (two that round alike are one point)."""
        low, high = self.warmup.whole_bounds()
        warmups = sorted({min(max(round(w), low), high) for w in self.warmup.grid(step)})
        return [(f, w) for f in self.lr_factor.grid(step) for w in warmups]

    def grid_size(self, step: float = GRID_STEP) -> int:
        return len(self.grid(step))

    def describe(self) -> list[str]:
        lr, w = self.lr_factor, self.warmup
        lines = [f"search space at {self.world_size} workers (k = {self.k:g} x the reference's "
                 "global batch), log scale:",
                 f"  lr factor {lr.low:.3g}..{lr.high:.3g} (lr {lr.low * self.reference_lr:.3g}.."
                 f"{lr.high * self.reference_lr:.3g}), centre {lr.centre:.3g}",
                 *([f"    low end: {self.lr_low_reason}"] if self.lr_low_reason else []),
                 f"  warmup {w.low:.4g}..{w.high:.4g} updates, centre {w.centre:.4g}"]
        lines.append("  the named rules there: " + "; ".join(
            f"{name}: lr x{f:.3g}, warmup {wu:.4g}" for name, (f, wu) in self.rule_points().items()))
        return lines


def at_edge(space: SearchSpace, lr_factor: float, warmup: float, step: float = GRID_STEP) -> list[str]:
    """The bounds an answer lies within one grid step of: the best may lie beyond them."""
    out = []
    for rng, value in ((space.lr_factor, lr_factor), (space.warmup, warmup)):
        if value >= rng.high / step:
            out.append(f"{rng.name} {value:g} is near the high end {rng.high:g}")
        if value <= rng.low * step:
            out.append(f"{rng.name} {value:g} is near the low end {rng.low:g}")
    return out


def default_space(world_size: int, k: float, reference_lr: float, reference_warmup: int,
                  lr: tuple[float, float] | None = None,
                  warmup: tuple[float, float] | None = None, *, lr_low: float | None = None,
                  lr_low_reason: str = "") -> SearchSpace:
    """The space around the rules' answers (module docs), or the bounds the user gave.
    ``lr_low``: the lr factor's low end where ``lr`` is not given (default: the sqrt rule);
    ``lr_low_reason``: why the low end lies where it does, as `solve` prints it."""
    scaled = reference_warmup / k
    # k <= 1 (a smaller batch): the same rules, mirrored (2k below sqrt(k))
    rule_low, lr_high = sorted((math.sqrt(k), LR_HIGH_OF_LINEAR * k))
    if lr is not None:
        lr_low, lr_high = lr
    elif lr_low is None:
        lr_low = rule_low
    # a warmup is a whole number of updates: at least one at either end
    w_low, w_high = warmup or (max(1.0, WARMUP_LOW_OF_SCALED * scaled),
                               max(1.0, WARMUP_HIGH_OF_SCALED * scaled))
    return SearchSpace(world_size=world_size, k=k, lr_factor=Range("lr", lr_low, lr_high),
                       warmup=Range("warmup", w_low, w_high), reference_lr=reference_lr,
                       reference_warmup=reference_warmup,
                       lr_low_reason=lr_low_reason)


@dataclass(frozen=True)
class Score:
    """A candidate's score: its epochs ratio to the baseline's paired seed (``reached``), or
    the bound it is known to be at or above (not reached: the epochs it trained)."""

    value: float
    reached: bool

    def text(self) -> str:
        return f"{self.value:.3g}" if self.reached else f">= {self.value:.3g} (not reached)"


def score(curve: Sequence[EvalPoint], target: float, mode: Mode, baseline_epochs: float,
          smoothing: float = 0.0) -> Score:
    """The score of a candidate's evals so far (module docs); ``baseline_epochs``: the
    baseline's epochs to the same target on the paired seed."""
    if not (math.isfinite(baseline_epochs) and baseline_epochs > 0):
        raise ValueError(f"baseline_epochs must be a number > 0, but got {baseline_epochs!r}")
    if not curve:
        return Score(0.0, False)
    crossing = first_crossing(curve, target, mode, smoothing)
    if crossing is not None:
        return Score(crossing.epochs_to_target / baseline_epochs, True)
    return Score(curve[-1].epoch / baseline_epochs, False)


def verify_order(s: Score) -> tuple[bool, float]:
    """Sort key of the candidates the verification takes: those that reached the target first,
    by score, then those that did not, by bound. A bound is only a floor, and a low one often
    says no more than that its paired baseline seed was slow: a candidate that trained the
    whole run without reaching, paired with the slowest baseline seed, has a lower bound than a
    candidate that reached a little later than the baseline on a faster one."""
    return not s.reached, s.value


def search_budget(budget: float, verify_trial_epochs: float) -> float:
    """Trial-epochs left to the search once the verification's share is set aside."""
    return budget - verify_trial_epochs


def min_budget(candidate_epochs: float, dimensions: int, baseline_trial_epochs: float,
               verify_trial_epochs: float) -> float:
    """The least budget that searches at all: the baseline seeds the search scores against,
    one candidate per searched dimension, and the verification."""
    return baseline_trial_epochs + dimensions * candidate_epochs + verify_trial_epochs


#: how decisions rank for the answer: a faster recipe, then one as fast, then the rest
DECISION_RANK = {"faster": 0, "equivalent": 1, "not resolved": 2, "slower": 3}


def answer_order(decision: str | None, ci: tuple[float, float] | None, median: float | None
                 ) -> tuple[int, float, float]:
    """Sort key of a verified candidate: decision, then the ratio interval's upper end (what
    the claim is safe up to), then the median."""
    rank = DECISION_RANK.get(decision or "not resolved", 2)
    hi = ci[1] if ci is not None else math.inf
    return rank, hi, median if median is not None else math.inf
