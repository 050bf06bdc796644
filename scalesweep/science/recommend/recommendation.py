"""What `scalesweep recommend` answers (docs/beyond.md, "recommend"): the science's
:class:`~.recipe.Recipe` at world size M, with the study it came from, N and M, and the recipe
in the units a sweep file takes (the lr itself, the warmup in updates). The dashboards gather
it from MLflow (scalesweep/dashboards/recommend/inputs.py), the orchestrator records it for the
ledger. Pure: no MLflow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from scalesweep.mlflow_names import ARM_PARAM
from scalesweep.science.recommend.lr_models import LrModel
from scalesweep.science.recommend.recipe import Recipe


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def warmup_steps(updates: float) -> int:
    """The warmup in whole updates, as the planner rounds a scaled warmup: at least 1 where
    there is any."""
    return max(1, round(updates)) if updates > 0 else 0


@dataclass(frozen=True, kw_only=True)
class LrEvidence:
    """One lr factor the study ran at N, as the recipe read it: its arm and paired seeds."""

    arm: str
    factor: float
    seeds: int
    median_ratio: float


@dataclass(frozen=True, kw_only=True)
class Recommendation:
    """The recipe at M from the study at N (``recipe``: the science's, with each number's
    source), and the inputs it was made from."""

    experiment: str
    parent_run_id: str
    target: float | None
    family: LrModel
    reference_world_size: int
    reference_batch: float
    reference_lr: float | None
    reference_warmup: float
    world_size_n: int
    batch_n: float
    world_size_m: int
    batch_m: float
    noise_scale: float | None
    #: the lr arms at N the bowl was fitted to (their warmup rule and other settings shared)
    lr_arms: tuple[LrEvidence, ...]
    #: the lr factor at N whose warmup arms were compared (None: none ran two warmup rules)
    warmup_arms_factor: float | None
    #: the arm at N the epochs ratio is against (the fewest median epochs there) and its median
    n_arm: str
    n_epochs_median: float
    recipe: Recipe
    #: the trials it was made from
    trial_run_ids: tuple[str, ...] = ()
    #: its id in the ledger, where it was recorded (``predictions/<id>.json`` on the parent run)
    prediction_id: str | None = None

    @property
    def lr_factor(self) -> float:
        return self.recipe.lr.factor

    @property
    def lr(self) -> float | None:
        """The lr at M: the factor times the reference's lr (None where that was not logged)."""
        return None if self.reference_lr is None else self.recipe.lr.factor * self.reference_lr

    @property
    def lr_ci(self) -> tuple[float, float] | None:
        if self.reference_lr is None:
            return None
        lo, hi = self.recipe.lr.ci
        return lo * self.reference_lr, hi * self.reference_lr

    @property
    def warmup_steps(self) -> int:
        return warmup_steps(self.recipe.warmup.updates)

    def as_json(self) -> dict[str, Any]:
        """``recommend --json``'s object (infinite ends as null)."""
        r = self.recipe
        lr, w, e = r.lr, r.warmup, r.epochs_ratio
        lr_ci = self.lr_ci
        bowl = lr.bowl
        return {
            "experiment": self.experiment, "parent_run_id": self.parent_run_id,
            "target": self.target, "optimizer_family": self.family,
            "reference_world_size": self.reference_world_size,
            "reference_global_batch": self.reference_batch, "reference_lr": self.reference_lr,
            "reference_warmup_steps": self.reference_warmup,
            "world_size_n": self.world_size_n, "global_batch_n": self.batch_n,
            "world_size": self.world_size_m, "global_batch": self.batch_m,
            "noise_scale": self.noise_scale,
            "lr_factor": lr.factor, "lr_factor_ci": [_finite(x) for x in lr.ci],
            "lr_factor_confidence": lr.confidence,
            "lr": self.lr, "lr_ci": None if lr_ci is None else [_finite(x) for x in lr_ci],
            "lr_model": lr.model, "lr_b_noise": lr.b_noise, "lr_source": lr.source,
            "lr_notes": list(lr.notes),
            "lr_bowl": None if bowl is None else {
                "factor_at_n": bowl.factor, "ci_at_n": [_finite(x) for x in bowl.ci],
                "curvature": bowl.curvature, "dof": bowl.dof,
                "best_measured_at_n": bowl.best_measured, "blocked": bowl.blocked,
                "method": bowl.method},
            "lr_arms_at_n": [{ARM_PARAM: a.arm, "lr_factor": a.factor, "seeds": a.seeds,
                              "median_ratio": _finite(a.median_ratio)} for a in self.lr_arms],
            "warmup_steps": self.warmup_steps, "warmup_updates": w.updates,
            "warmup_rule": w.rule, "warmup_source": w.source, "warmup_notes": list(w.notes),
            "warmup_arms_lr_factor": self.warmup_arms_factor,
            "n_arm": self.n_arm, "n_epochs_median": _finite(self.n_epochs_median),
            "epochs_ratio_median": None if e is None else e.median,
            "epochs_ratio_ci": None if e is None else [_finite(x) for x in e.ci],
            "epochs_ratio_confidence": None if e is None else e.confidence,
            "epochs_ratio_lr_penalty": None if e is None else _finite(e.lr_penalty),
            "epochs_ratio_source": None if e is None else e.source,
            "epochs_ratio_notes": [] if e is None else list(e.notes),
            "notes": list(r.notes), "prediction_id": self.prediction_id,
        }  # fmt: skip
