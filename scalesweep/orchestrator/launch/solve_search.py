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

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray import tune
from ray.tune.search.optuna import OptunaSearch

from scalesweep.mlflow_names import STATUS_TAG
from scalesweep.orchestrator.launch.solve_state import Finished, WarmStart, append
from scalesweep.orchestrator.launch.tune import max_concurrent
from scalesweep.orchestrator.plan.cluster import ClusterInfo
from scalesweep.orchestrator.plan.rows import Plan, PlanRow
from scalesweep.orchestrator.plan.solve_plan import DIMENSIONS, SolvePlan, round_factor
from scalesweep.orchestrator.tracking.callback import SweepCallback
from scalesweep.science.solve import OBJECTIVE_METRIC
from scalesweep.trainables import trial_driver
from scalesweep.trainables.config import TrialJob


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
        name = TrialJob.name_in(trial.config)
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


class JournaledCallback(SweepCallback):
    """The sweep callback that also appends each trial that finishes to the solve's journal
    (launch/solve_state.py), before its MLflow run is closed: a resume never runs it again. A
    trial stopped by Ctrl-C is not finished: it is left out, and a resume runs it again."""

    def __init__(self, state_dir: Path, rows: Mapping[str, PlanRow], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.state_dir, self.rows = state_dir, rows
        self.journaled: set[str] = set()

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._journal(self.name(trial))  # its status came with its last result
        super().on_trial_complete(iteration, trials, trial, **info)
        self._journal(self.name(trial))  # a status the callback gave it at the end

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        super().on_trial_error(iteration, trials, trial, **info)
        self._journal(self.name(trial))

    def _journal(self, name: str) -> None:
        status = self.status.get(name)
        row = self.rows.get(name)
        if self.interrupted or status in (None, "running") or name in self.journaled or row is None:
            return
        factor = row.axes.get("scaling_rule") if row.trial.objective is not None else None
        append(self.state_dir, Finished(name, row.seed, None if factor is None else float(factor),
                                        None if factor is None else int(row.axes["warmup_rule"]),
                                        str(status), list(self.curves.get(name, []))))
        self.journaled.add(name)


def start_points(sp: SolvePlan) -> list[dict[str, float | int]]:
    """The points run before the sampler draws any. TPE: the recommendation's first where the
    solve starts from one, then the named rules' points inside the space, so the search starts
    from what the study already knows and the answer is never worse than the best of them it
    scored. A grid: all of its points."""
    if sp.sampler == "grid":
        return sp.grid_points()
    space = sp.space
    w_low, w_high = space.warmup.whole_bounds()
    points: list[dict[str, float | int]] = []
    if sp.first is not None:
        points.append({"lr_factor": sp.first.lr_factor, "warmup": sp.first.warmup})
    for f, w in space.rule_points().values():
        point: dict[str, float | int] = {"lr_factor": f, "warmup": round(w)}
        if (space.lr_factor.low <= f <= space.lr_factor.high and w_low <= round(w) <= w_high
                and point not in points):
            points.append(point)
    return points


def search(sp: SolvePlan, plan: Plan, cluster: ClusterInfo, sweep_dir: Path,
           callback: SweepCallback, pairings: Mapping[int, Pairing], rows: dict[str, PlanRow],
           warm: WarmStart) -> Spent:
    """Run the search; every candidate's row lands in ``rows`` and its evals in the callback's
    ``curves``. ``warm``: what a search killed before did (nothing on a first run)."""
    spec = plan.sweep.spec
    define = _Candidates(sp, cluster, pairings, rows, {
        "storage_path": str(sweep_dir / "train"), "max_failures": spec.max_failures,
        "cpus_per_worker": spec.resources.cpus_per_worker,
        "gpus_per_worker": spec.resources.gpus_per_worker})
    define.drawn = warm.next_number
    spent = Spent(budget=sp.samples * sp.candidate_epochs, used=warm.used, finished=warm.finished)
    if warm.samples_left <= 0:
        return spent
    stopper = OutOfReach(sp.candidates)
    stopper.reached = list(warm.reached)
    callback.total = sp.samples
    runs = len(list(sweep_dir.glob("search*")))  # a resumed search is a Tune experiment of its own
    tuner = tune.Tuner(
        tune.with_resources(trial_driver.trainable, trial_driver.resources),
        tune_config=tune.TuneConfig(
            search_alg=_searcher(sp, define, warm),
            num_samples=warm.samples_left,
            max_concurrent_trials=max_concurrent(plan, sp.baseline_rows),
            reuse_actors=True, trial_name_creator=_trial_name, trial_dirname_creator=_trial_name),
        run_config=tune.RunConfig(
            name=f"search{runs}" if runs else "search", storage_path=str(sweep_dir), verbose=0,
            stop=callback.stopper(stopper), callbacks=[callback, _Budget(spent, rows, sp.samples)],
            failure_config=tune.FailureConfig(max_failures=spec.max_failures)),
    )
    tuner.fit()
    return spent


def _searcher(sp: SolvePlan, define: _Candidates, warm: WarmStart) -> Any:
    """OptunaSearch over the define-by-run space, its TPE sampler told the finished candidates
    of a search killed before (``warm.points``, ``warm.rewards``) without running them again.

    Ray's ``OptunaSearch(points_to_evaluate=..., evaluated_rewards=...)`` refuses a
    define-by-run space (``add_evaluated_point`` raises TypeError in this Ray), so the points
    go in as Optuna documents it instead: ``Study.add_trial`` of completed trials, in the
    storage and study name OptunaSearch then loads (``create_study(load_if_exists=True)``)."""
    import optuna

    # A grid's points are all points to evaluate and num_samples is their number: its sampler
    # draws none. A resumed search's sampler gets a seed of its own (the search seed and the candidates
    # drawn before): with the search seed alone its random startup draws would repeat the
    # points the killed driver's first draws already tried
    seed = sp.search_seed if warm.next_number == 0 else sp.search_seed * 1_000_003 + warm.next_number
    sampler = optuna.samplers.TPESampler(seed=seed,
                                         n_startup_trials=max(2 * DIMENSIONS, sp.samples // 3))
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, study_name="optuna", direction="minimize")
    dists: dict[str, optuna.distributions.BaseDistribution] = {
        "lr_factor": optuna.distributions.FloatDistribution(*sp.factor_bounds(), log=True),
        "warmup": optuna.distributions.IntDistribution(*sp.space.warmup.whole_bounds(), log=True)}
    for point, reward, reached, step in zip(warm.points, warm.rewards, warm.reached_flags, warm.steps,
                                            strict=True):
        # as _CensoredOptunaSearch tells a live one: a bound is a pruned trial's last value
        study.add_trial(optuna.trial.create_trial(
            params=dict(point), distributions=dists, value=reward,
            state=optuna.trial.TrialState.COMPLETE if reached else optuna.trial.TrialState.PRUNED,
            intermediate_values=None if reached else {step: reward}))
    # metric and mode given to each: Tune passes TuneConfig's on to neither a define-by-run space
    # nor to a searcher it wraps in its concurrency limiter
    return _CensoredOptunaSearch(space=define, metric=OBJECTIVE_METRIC, mode="min", sampler=sampler,
                                 points_to_evaluate=warm.starts or None, storage=storage,
                                 study_name="optuna")


class _CensoredOptunaSearch(OptunaSearch):
    """OptunaSearch that tells a candidate that never reached the target to Optuna as *pruned*,
    its bound kept as its last intermediate value (reported with each eval), not as a completed
    trial's value. A bound is a floor, not a score: told as a value, one on a slow baseline
    seed (4 / 3.49 = 1.15 on the shipped study) ranked above candidates that reached at 1.16,
    and drew TPE's next points towards settings that never reach. TPE ranks every pruned trial
    after every completed one (pruned ones by how far they trained, then by that last value),
    which is how a bound should be read."""

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        if result and not error and result.get(STATUS_TAG) != "stopped":
            # without the metric, Ray's own code path tells Optuna "pruned"
            result = {k: v for k, v in result.items() if k != OBJECTIVE_METRIC}
        super().on_trial_complete(trial_id, result, error)


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

    def __call__(self, trial: Any) -> dict[str, Any]:
        factor = round_factor(trial.suggest_float("lr_factor", *self.sp.factor_bounds(), log=True))
        warmup = int(trial.suggest_int("warmup", *self.sp.space.warmup.whole_bounds(), log=True))
        number, self.drawn = self.drawn, self.drawn + 1
        seed = self.seeds[number % len(self.seeds)]  # the baseline seeds in turn
        pair = self.pairings[seed]
        row = self.sp.candidate_row(number, factor, warmup, seed, pair.target, pair.baseline_epochs,
                                    self.cluster)
        self.rows[row.name] = row
        return {"trial_config": TrialJob(trial=row.trial, **self.driver).to_config()}


def _trial_name(trial: Any) -> str:
    return TrialJob.name_in(trial.config)
