"""The search of `scalesweep solve`: Optuna's TPE through Ray Tune's ``OptunaSearch``, and a
candidate stopped as soon as it cannot make the verification (docs/solve.md).

Each candidate is a trial of the study's own settings at M with its lr factor and warmup,
planned like any trial (``SolvePlan.candidate_row``) and run by the same trial driver. It stops
at the target and reports its score (``solve_ratio``) with every eval: its epochs over the
paired baseline seed's once reached, the bound it is at or above until then. That bound only
grows, so once it passes the score of the n-th best candidate that reached, the candidate can
no longer be among the n the verification takes: it is stopped there (:class:`OutOfReach`),
its bound its score. ASHA was the first choice, but its rungs compare only the candidates that
are still training at each rung: one that reached the target early never counts at a later
rung, so hopeless candidates trained to the end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray import tune

from scalesweep.mlflow_names import STATUS_TAG
from scalesweep.orchestrator.launch.tune import max_concurrent
from scalesweep.orchestrator.plan.cluster import ClusterInfo
from scalesweep.orchestrator.plan.rows import Plan, PlanRow
from scalesweep.orchestrator.plan.solve_plan import DIMENSIONS, SolvePlan, round_factor
from scalesweep.orchestrator.tracking.callback import SweepCallback
from scalesweep.orchestrator.tracking.tracker import SweepTracker
from scalesweep.science.solve import OBJECTIVE_METRIC
from scalesweep.trainables import trial_driver


@dataclass(frozen=True)
class Pairing:
    """What a candidate on baseline seed s is scored against."""

    target: float
    baseline_epochs: float


@dataclass
class Spent:
    """Trial-epochs the search has used, printed as each candidate ends."""

    budget: float
    used: float = 0.0
    finished: int = 0
    lines: list[str] = field(default_factory=list)


class _Budget(tune.Callback):
    def __init__(self, spent: Spent, rows: Mapping[str, PlanRow], total: int) -> None:
        self.spent, self.rows, self.total = spent, rows, total

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._count(trial)

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._count(trial)

    def _count(self, trial: Any) -> None:
        name = str(trial.config["trial_config"]["trial"]["name"])
        last = trial.last_result or {}
        epochs = float(last.get("epoch", 0.0))
        self.spent.used += epochs
        self.spent.finished += 1
        row = self.rows.get(name)
        what = "" if row is None else f"lr x{row.axes['scaling_rule']:g}, warmup {row.warmup_steps}: "
        score = last.get(OBJECTIVE_METRIC)
        shown = "no score" if score is None else f"score {float(score):.3g}"
        line = (f"candidate {self.spent.finished}/{self.total} {name} ({what}{shown} at epoch "
                f"{epochs:.3g}); search budget {self.spent.used:.1f} of {self.spent.budget:.1f} "
                "trial-epochs spent")
        self.spent.lines.append(line)
        print(line, flush=True)


def search(sp: SolvePlan, plan: Plan, cluster: ClusterInfo, sweep_dir: Path, tracker: SweepTracker,
           child_for: Callable[[str], str], curves: dict[str, list[dict[str, Any]]],
           pairings: Mapping[int, Pairing], rows: dict[str, PlanRow]) -> Spent:
    """Run the search; every candidate's row lands in ``rows`` and its evals in ``curves``."""
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    space = sp.space
    spec = plan.sweep.spec
    define = _Candidates(sp, cluster, pairings, rows, {
        "storage_path": str(sweep_dir / "train"), "max_failures": spec.max_failures,
        "cpus_per_worker": spec.resources.cpus_per_worker,
        "gpus_per_worker": spec.resources.gpus_per_worker, "resume_from": None})

    # the named rules' answers inside the space go first: the search starts from what the
    # study already knows, and the answer is never worse than the best of them it scored
    w_low, w_high = define.warmup_bounds
    starts = [{"lr_factor": f, "warmup": round(w)} for f, w in space.rule_points().values()
              if space.lr_factor.low <= f <= space.lr_factor.high and w_low <= round(w) <= w_high]
    sampler = optuna.samplers.TPESampler(seed=sp.search_seed,
                                         n_startup_trials=max(2 * DIMENSIONS, sp.samples // 3))
    # metric and mode given to each: Tune passes TuneConfig's on to neither a define-by-run space
    # nor to a searcher it wraps in its concurrency limiter
    searcher = OptunaSearch(space=define, metric=OBJECTIVE_METRIC, mode="min", sampler=sampler,
                            points_to_evaluate=starts or None)
    spent = Spent(budget=sp.samples * sp.candidate_epochs)
    callback = SweepCallback(tracker, child_for, curves, total=sp.samples)
    tuner = tune.Tuner(
        tune.with_resources(trial_driver.trainable, trial_driver.resources),
        tune_config=tune.TuneConfig(
            search_alg=searcher,
            num_samples=sp.samples, max_concurrent_trials=max_concurrent(plan, sp.baseline_rows),
            reuse_actors=True, trial_name_creator=_trial_name, trial_dirname_creator=_trial_name),
        run_config=tune.RunConfig(
            name="search", storage_path=str(sweep_dir), verbose=0, stop=OutOfReach(sp.candidates),
            callbacks=[callback, _Budget(spent, rows, sp.samples)],
            failure_config=tune.FailureConfig(max_failures=spec.max_failures)),
    )
    tuner.fit()
    return spent


class OutOfReach(tune.Stopper):
    """Stops a candidate whose running score (a bound that only grows) is already above the
    ``keep``-th best score of the candidates that reached the target: it cannot be among the
    ``keep`` that the verification takes."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.reached: list[float] = []

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        value = result.get(OBJECTIVE_METRIC)
        if not isinstance(value, int | float):
            return False
        if result.get(STATUS_TAG) == "stopped":  # reached the target: its score is final
            self.reached = sorted([*self.reached, float(value)])
            return False
        return len(self.reached) >= self.keep and float(value) > self.reached[self.keep - 1]

    def stop_all(self) -> bool:
        return False


class _Candidates:
    """OptunaSearch's define-by-run space: draws a candidate's lr factor and warmup, and
    returns its whole trial config, planned like any trial. A class, not a closure: Tune
    pickles its searcher with each experiment checkpoint."""

    def __init__(self, sp: SolvePlan, cluster: ClusterInfo, pairings: Mapping[int, Pairing],
                 rows: dict[str, PlanRow], driver: dict[str, Any]) -> None:
        self.sp, self.cluster, self.pairings, self.rows, self.driver = sp, cluster, pairings, rows, driver
        self.seeds = sorted(pairings)
        self.drawn = 0
        # a warmup is a whole number of updates inside the space, at least one
        warmup = sp.space.warmup
        self.warmup_bounds = max(1, math.ceil(warmup.low)), max(1, math.floor(warmup.high))

    def __call__(self, trial: Any) -> dict[str, Any]:
        space = self.sp.space
        factor = round_factor(trial.suggest_float("lr_factor", space.lr_factor.low,
                                                  space.lr_factor.high, log=True))
        warmup = int(trial.suggest_int("warmup", *self.warmup_bounds, log=True))
        number, self.drawn = self.drawn, self.drawn + 1
        seed = self.seeds[number % len(self.seeds)]  # the baseline seeds in turn
        pair = self.pairings[seed]
        row = self.sp.candidate_row(number, factor, warmup, seed, pair.target, pair.baseline_epochs,
                                    self.cluster)
        self.rows[row.name] = row
        return {"trial_config": {"trial": row.trial.model_dump(mode="json"), **self.driver}}


def _trial_name(trial: Any) -> str:
    return str(trial.config["trial_config"]["trial"]["name"])
