"""`recommend` backtested against dense grids (issue 52, item 4; docs/beyond.md, "recommend"):
the recipe at M predicted from a study at N alone, then every lr factor and warmup of a grid
run at M with paired seeds, and the recipe run beside them.

First, per workload, **the reference lr is tuned** at the reference world size: the lr factors
2^(j/2), j = -4..4, × the workload's lr, ``seeds`` seeds each (seeds 100.., none of the cases'
seeds); the best median epochs to target becomes the reference's lr. Both lr models, and
`recommend`, take the reference's lr as the best at its batch; an untuned one would put every
best factor off by its own error. **The target** then becomes absolute: the tuned arm's median
best dev loss over those seeds × 1.10. It is set by seeds no case uses, so no arm's own noise
sets the bar it is timed to, and an absolute target lets the grid at M stop each trial there.

Per case (a workload, N, k = M/N):

1. **The study at N**: the reference world size and N, the lr factor at N on a √2 grid
   around the named rules (explicit factors; none, sqrt and linear are points of it), warmup
   held in samples, ``seeds`` paired seeds. Real trials, embedded Ray, MLflow on a fresh sqlite
   store. Its epochs are the reference's × ``BUDGET_SLACK`` × B_N/B_ref, as far as epochs to a
   target can grow with the batch (no noise scale is measured yet), and each trial stops at the
   target: an arm at N that cannot reach it leaves `recommend` no lr evidence.
2. **`scalesweep.recommend(study, world_size=M)`**: the lr factor (with its interval) and the
   warmup at M, and the epochs ratio M over N predicted.
3. **The grid at M**, with the reference's epochs scaled by the trade-off the study measured:
   ``BUDGET_SLACK`` × (1 + B_M/B) / (1 + B_ref/B), B the study's noise scale (McCandlish et al.
   2018; B_M/B_ref without one), never below the reference's, evals spread by the same factor;
   each trial stops at the target. A budget the best cell cannot reach in would leave the grid
   no optimum to score against. The reference and M; lr factors on the √2 grid spanning both
   lr models' ranges at M (SGD's [1, K], the surge's [1/√K, √K], K = M / reference), one step past each
   end, × warmup rules ``scaled`` (held in samples) and ``fixed`` (held in updates); the named
   rules are cells of it, and the recommended recipe's factor is one more (where it is not a
   cell already). Two stages, as `solve`'s grid spends its seeds: every cell on seed 0, then
   seeds 1.. on the cells within one grid step of the first stage's best, on the named rules
   and on the recipe, so every cell near the optimum has ``seeds`` paired seeds (the baseline
   seeds are the same in both stages, so they pair).

Read off, each over the same seeds (epochs to target, a seed that never reaches counts as
never, it is not dropped):

* the grid's best cell: the lowest median epochs to target;
* the recipe against it: the per-seed ratio of epochs (paired: same seed), its median and the
  distribution-free interval of the order statistics (with few seeds the interval is
  [min, max], and the confidence it attains is stated beside it);
* the best named rule (none, sqrt, linear × the two warmups) against the grid's best, the same
  way, and whether the recipe is as good or better (its median ratio no higher);
* coverage: the recipe's lr interval holds the best cell's factor (within half a grid step, the
  grid's own resolution), and its predicted epochs ratio M/N holds the measured one (the
  recipe's epochs at M over the best arm's at N, per seed, median).

4. **`scalesweep.solve(..., start_from_recommendation=True)` at M** (``--no-solve`` skips it):
   the study at N given the grid's epoch budget, its search started at the recipe; its search's
   trial-epochs (each candidate's last eval's epoch, summed, as `solve` counts them) against
   the grid's at M (each trial's last eval's epoch, summed, over both stages), and whether its
   answer's lr factor lies within one grid step of the grid's best cell.

Targets (the issue's): median over cases of the recipe's ratio against the grid's best ≤ 1.05,
worst ≤ 1.15; coverage ≥ 0.80; the recipe as good as the best named rule in ≥ 2 of 3 cases;
`solve --start-from-recommendation` reaches the grid's best with ≤ 25 % of its trial-epochs.

``--quick``: one case, a tiny mlp_regression, 2 seeds, a 3-point grid: proves the script runs.
The figures are epochs (counted, not timed): the same on any machine for the same torch.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmarks._common import Column, Report, Table, parse_args, sandbox, say, sqlite_uri
from scalesweep.science.recommend.lr_models import LR_MODELS, factor_range
from scalesweep.science.stats.replicates import order_statistic_rank

NAME = "transfer"
GRID_STEP = math.sqrt(2.0)
NAMED = ("none", "sqrt", "linear")
WARMUPS = ("scaled", "fixed")
CONFIDENCE = 0.90
#: the target over the tuned reference's median best dev loss
TARGET_SLACK = 0.10
#: the reference's tuning seeds start here, past any case's
TUNE_SEED0 = 100
#: the grid at M gets this many times the epochs its predicted trade-off asks
BUDGET_SLACK = 1.5


@dataclass(frozen=True)
class Case:
    """One workload at N, asked about M = k N."""

    label: str
    sweep: Mapping[str, Any]  # the sweep file's keys but axes, reference and baseline
    reference: int
    n: int
    k: int
    #: the lr factors at N, as √2 exponents relative to the reference's lr
    n_grid: tuple[int, ...] = (-2, -1, 0, 1, 2, 3, 4)
    #: the grid at M: both models' ranges (None), or the named rules alone (a quick check)
    m_grid: str | None = None

    @property
    def m(self) -> int:
        return self.n * self.k


#: mlp's lr is centred on a first run's tuned one (x4 of 0.05, at that grid's edge)
MLP = {"workload": {"name": "mlp_regression"}, "backend": "simulate",
       "optimizer": {"type": "sgd", "lr": 0.2, "momentum": 0.9},
       "scheduler": {"type": "gradual_warmup", "warmup_steps": 20},
       "target": {"metric": "dev_loss", "relative_to_baseline": 0.10},
       "training": {"per_worker_batch": 16, "epochs": 24, "eval_every_epochs": 0.25}}
DIGITS = {"workload": {"name": "digits_cnn"}, "backend": "simulate",
          "optimizer": {"type": "adam", "lr": 0.001},
          "scheduler": {"type": "gradual_warmup", "warmup_steps": 100},
          "target": {"metric": "dev_loss", "relative_to_baseline": 0.10},
          "training": {"per_worker_batch": 8, "epochs": 30, "eval_every_epochs": 0.5}}
CASES = (Case("mlp_regression (SGD), k = 4", MLP, 1, 2, 4),
         Case("mlp_regression (SGD), k = 16", MLP, 1, 2, 16),
         Case("digits_cnn (Adam), k = 4", DIGITS, 1, 2, 4),
         Case("digits_cnn (Adam), k = 16", DIGITS, 1, 2, 16))
#: evals every 1/8 epoch: solve (step 4) scores a candidate only from 10 or more evals
QUICK = Case("mlp_regression, quick", {
    **MLP, "workload": {"name": "mlp_regression", "options": {"train_size": 256, "dev_size": 64}},
    "training": {"per_worker_batch": 8, "epochs": 2, "eval_every_epochs": 0.125}}, 1, 2, 2, (0, 1, 2),
    "named")


def grid_at_m(case: Case) -> list[float]:
    """Factors (× the reference's lr) on the √2 grid spanning both models' ranges at M, one step
    past each end (the named rules' alone for a quick check)."""
    if case.m_grid == "named":
        return [_named_factor(r, case.m, case.reference) for r in NAMED]
    lo = min(factor_range(model, case.m, case.reference)[0] for model in LR_MODELS)
    hi = max(factor_range(model, case.m, case.reference)[1] for model in LR_MODELS)
    j_lo = math.floor(math.log(lo, GRID_STEP) + 1e-9) - 1
    j_hi = math.ceil(math.log(hi, GRID_STEP) - 1e-9) + 1
    return [GRID_STEP ** j for j in range(j_lo, j_hi + 1)]


def budget_factor(noise_scale: float | None, batch_from: float, batch_to: float) -> float:
    """How many times the epochs at ``batch_from`` a study at ``batch_to`` gets (module docs,
    steps 1 and 3), rounded up to a quarter: the epochs trade-off E(B) ∝ 1 + B/B_noise, or B
    itself (its steepest) without a noise scale, times the slack."""
    if noise_scale is None or not noise_scale > 0:
        trade = batch_to / batch_from
    else:
        trade = (1 + batch_to / noise_scale) / (1 + batch_from / noise_scale)
    return max(1.0, math.ceil(4 * BUDGET_SLACK * trade - 1e-9) / 4)


def with_budget(sweep: Mapping[str, Any], factor: float) -> dict[str, Any]:
    """``sweep`` with ``factor`` times its epochs and eval spacing (so as many evals), each
    trial stopping at an absolute target."""
    training = dict(sweep["training"])
    training["epochs"] = math.ceil(training["epochs"] * factor)
    training["eval_every_epochs"] = training["eval_every_epochs"] * factor
    return {**sweep, "training": training, "stop_at_target": "value" in sweep["target"]}


def _named_factor(rule: str, world: int, reference: int) -> float:
    k = world / reference
    return {"none": 1.0, "sqrt": math.sqrt(k), "linear": k}[rule]


def _rules(factors: Sequence[float], world: int, reference: int) -> list[str | float]:
    """The scaling_rule axis: the named rules, then every other factor (rounded as the trial
    names show them) that is not one of them."""
    named = {round(_named_factor(r, world, reference), 9) for r in NAMED}
    return [*NAMED, *[round(f, 6) for f in factors if round(f, 9) not in named]]


def study(case: Case, name: str, world: int, rules: Sequence[str | float],
          warmups: Sequence[str], seeds: Iterable[int]) -> dict[str, Any]:
    return {**case.sweep, "name": name, "reference": {"world_size": case.reference},
            "baseline": {"world_size": case.reference, "warmup_rule": "scaled", "scaling_rule": "none"},
            "axes": {"world_size": [case.reference, world], "warmup_rule": list(warmups),
                     "scaling_rule": list(rules), "seed": list(seeds)},
            "exclude": [{"world_size": case.reference, "scaling_rule": r} for r in rules if r != "none"]
            + [{"world_size": case.reference, "warmup_rule": w} for w in warmups if w != "scaled"]}


@dataclass(frozen=True)
class Arm:
    world: int
    rule: str  # the scaling rule as the trials name it (none, sqrt, linear, x1.41)
    factor: float
    warmup: str
    epochs: dict[int, float]  # seed -> epochs to target (inf: never)

    @property
    def median(self) -> float:
        return statistics.median(self.epochs.values())


def _factor_of(rule: Any, world: int, reference: int) -> float:
    if isinstance(rule, str) and rule in NAMED:
        return _named_factor(rule, world, reference)
    return float(str(rule).removeprefix("x"))


def arms_of(trials: Any, reference: int) -> list[Arm]:
    """Arms from a Result's trials table (one row per trial)."""
    groups: dict[tuple[int, str, str], dict[int, float]] = {}
    for row in trials.to_dict("records"):
        e = row.get("epochs_to_target")
        epochs = math.inf if e is None or (isinstance(e, float) and math.isnan(e)) else float(e)
        key = (int(row["world_size"]), str(row["scaling_rule"]), str(row["warmup_rule"]))
        groups.setdefault(key, {})[int(row["seed"])] = epochs
    return [Arm(w, r, _factor_of(r, w, reference), wu, ep) for (w, r, wu), ep in sorted(groups.items())]


@dataclass(frozen=True)
class Paired:
    """Per-seed ratios of one arm's epochs over another's: median and order-statistic interval."""

    ratios: tuple[float, ...]
    median: float
    ci: tuple[float, float]
    confidence: float


def paired(num: Mapping[int, float], den: Mapping[int, float]) -> Paired:
    seeds = sorted(set(num) & set(den))
    rs = sorted(_div(num[s], den[s]) for s in seeds)
    rank, conf = order_statistic_rank(len(rs), CONFIDENCE)
    return Paired(tuple(rs), statistics.median(rs), (rs[rank - 1], rs[len(rs) - rank]), conf)


def _same(a: float, b: float) -> bool:
    """One lr factor, as a trial's name rounds it (6 significant digits) or not."""
    return math.isclose(a, b, rel_tol=1e-5)


def _div(a: float, b: float) -> float:
    if math.isinf(a) and math.isinf(b):
        return 1.0  # neither reached: no information either way
    return math.inf if b == 0 else a / b


@dataclass(frozen=True)
class SolveRun:
    """`solve --start-from-recommendation` at M against the grid (module docs, step 4)."""

    lr_factor: float | None
    warmup_steps: int | None
    decision: str | None
    search_trial_epochs: float
    grid_trial_epochs: float
    #: its lr factor within one grid step of the grid's best cell's
    reaches_best: bool

    @property
    def share(self) -> float:
        return self.search_trial_epochs / self.grid_trial_epochs if self.grid_trial_epochs else math.inf


def trial_epochs_at(world: int, *results: Any) -> float:
    """The epochs the trials at ``world`` trained (each one's last eval's epoch), summed."""
    total = 0.0
    for result in results:
        curves = result.curves
        at = curves[curves["world_size"] == world]
        total += float(at.groupby("trial")["epoch"].max().sum())
    return total


def within_a_step(factor: float | None, best: float) -> bool:
    return factor is not None and abs(math.log(factor / best)) <= math.log(GRID_STEP) + 1e-9


@dataclass
class Outcome:
    case: Case
    recipe: dict[str, Any]
    best: Arm
    best_named: Arm
    rec_arm: Arm
    vs_best: Paired
    named_vs_best: Paired
    lr_covered: bool
    epochs_covered: bool | None
    measured_epochs_ratio: float
    trials: int
    notes: list[str] = field(default_factory=list)
    solve: SolveRun | None = None


def _near(cells: Sequence[Arm], around: float) -> set[float]:
    """The factors of ``cells`` within one grid step of ``around``."""
    return {a.factor for a in cells if abs(math.log(a.factor / around)) <= math.log(GRID_STEP) + 1e-9}


def _merged(*tables: Any, reference: int) -> list[Arm]:
    """Arms of several studies' trials tables, one arm per (world size, rule, warmup)."""
    out: dict[tuple[int, float, str], Arm] = {}
    for table in tables:
        for a in arms_of(table, reference):
            key = (a.world, round(a.factor, 5), a.warmup)
            old = out.get(key)
            out[key] = a if old is None else Arm(a.world, old.rule, old.factor, a.warmup,
                                                 {**old.epochs, **a.epochs})
    return list(out.values())


#: the lr factors the reference's lr is tuned over, as √2 exponents
REFERENCE_GRID = tuple(range(-4, 5))


def tune_reference(sweep: Mapping[str, Any], reference: int, seeds: int, root: Path
                   ) -> tuple[dict[str, Any], float, list[str]]:
    """The sweep with its lr replaced by the best at the reference world size and its target
    made absolute from that arm's seeds (module docs), the factor found and notes."""
    import scalesweep

    workload = str(sweep["workload"]["name"]).replace("_", "-")
    factors = [round(GRID_STEP ** j, 6) for j in REFERENCE_GRID if j != 0]
    say(f"{workload}: tuning the reference's lr ({len(factors) + 1} factors x {seeds} seeds)")
    data = {**sweep, "name": f"transfer-{workload}-reference", "reference": {"world_size": reference},
            "baseline": {"world_size": reference, "warmup_rule": "scaled", "scaling_rule": "none"},
            "axes": {"world_size": [reference], "warmup_rule": ["scaled"],
                     "scaling_rule": ["none", *factors],
                     "seed": list(range(TUNE_SEED0, TUNE_SEED0 + seeds))}}
    result = scalesweep.load(data).run(tracking_uri=sqlite_uri(root / f"{workload}-reference.db"),
                                       report=False)
    arms = arms_of(result.trials, reference)
    best = min(arms, key=lambda a: (a.median, statistics.fmean(min(e, 1e9) for e in a.epochs.values())))
    notes = []
    if any(_same(best.factor, GRID_STEP ** j) for j in (REFERENCE_GRID[0], REFERENCE_GRID[-1])):
        notes.append(f"{workload}: the reference's best lr factor lies at the tuning grid's edge "
                     f"(x{best.factor:.3g})")
    optimizer = {**sweep["optimizer"], "lr": float(sweep["optimizer"]["lr"]) * best.factor}
    bests = [float(row["best_dev_loss"]) for row in result.trials.to_dict("records")
             if _same(_factor_of(row["scaling_rule"], reference, reference), best.factor)]
    value = statistics.median(bests) * (1 + TARGET_SLACK)
    notes.append(f"{workload}: the target is {sweep['target']['metric']} {value:.5g}, the tuned "
                 f"arm's median best over seeds {TUNE_SEED0}-{TUNE_SEED0 + seeds - 1} "
                 f"x {1 + TARGET_SLACK:g}")
    target = {"metric": sweep["target"]["metric"], "value": value}
    return {**sweep, "optimizer": optimizer, "target": target}, best.factor, notes


def run_case(case: Case, seeds: int, root: Path, *, solve: bool = True) -> Outcome:
    """The case's three steps (module docs); the grid at M in two stages: every cell on seed 0,
    then seeds 1.. on the cells within one grid step of the first stage's best, the named rules
    and the recipe (the same baseline seeds, so the stages pair)."""
    import scalesweep

    workload = str(case.sweep["workload"]["name"]).replace("_", "-")
    uri = sqlite_uri(root / f"{workload}-k{case.k}.db")
    tag = f"transfer-{workload}-k{case.k}"
    n_rules = _rules([GRID_STEP ** j for j in case.n_grid], case.n, case.reference)
    say(f"{case.label}: the study at N = {case.n} ({len(n_rules)} lr factors x {seeds} seeds)")
    n_base = study(case, f"{tag}-n", case.n, n_rules, ["scaled"], range(seeds))
    n_budget = budget_factor(None, case.reference, case.n)  # batches in proportion to world sizes
    at_n = scalesweep.load(with_budget(n_base, n_budget)).run(tracking_uri=uri, report=False)
    rec = scalesweep.recommend(f"{tag}-n", world_size=case.m, tracking_uri=uri)
    recipe = rec.recipe
    rec_factor = round(recipe.lr.factor, 6)
    m_rules = _rules(grid_at_m(case), case.m, case.reference)
    if not any(_same(_factor_of(r, case.m, case.reference), rec_factor) for r in m_rules):
        m_rules.append(rec_factor)  # the recipe's own arm, beside the grid's cells
    budget = budget_factor(rec.noise_scale, rec.reference_batch, rec.batch_m)
    at_m = replace(case, sweep=with_budget(case.sweep, budget))
    say(f"{case.label}: recommend at M = {case.m}: lr x{recipe.lr.factor:.3g} "
        f"{recipe.lr.ci}, warmup {recipe.warmup.rule}; the grid at M: {len(m_rules)} factors x "
        f"{len(WARMUPS)} warmups on seed 0, {at_m.sweep['training']['epochs']} epochs each")
    first = scalesweep.load(study(at_m, f"{tag}-m", case.m, m_rules, WARMUPS, [0])).run(
        tracking_uri=uri, report=False)
    cells = [a for a in arms_of(first.trials, case.reference) if a.world == case.m]
    lead = min(cells, key=lambda a: a.median)
    keep = _near(cells, lead.factor) | {a.factor for a in cells if a.rule in NAMED} | {rec_factor}
    again = [r for r in m_rules if any(_same(_factor_of(r, case.m, case.reference), f) for f in keep)]
    say(f"{case.label}: seeds 1-{seeds - 1} on {len(again)} factors x {len(WARMUPS)} warmups")
    second = scalesweep.load(study(at_m, f"{tag}-m2", case.m, again, WARMUPS, range(1, seeds))).run(
        tracking_uri=uri, report=False)
    full = [a for a in _merged(first.trials, second.trials, reference=case.reference)
            if a.world == case.m and len(a.epochs) == seeds]
    best = min(full, key=lambda a: (a.median, statistics.fmean(min(e, 1e9) for e in a.epochs.values())))
    best_named = min((a for a in full if a.rule in NAMED), key=lambda a: a.median)
    rec_arm = next(a for a in full if _same(a.factor, rec_factor) and a.warmup == recipe.warmup.rule)
    n_arms = [a for a in arms_of(at_n.trials, case.reference) if a.world == case.n]
    best_n = min(n_arms, key=lambda a: a.median)
    lo, hi = recipe.lr.ci
    half = GRID_STEP ** 0.5
    lr_covered = lo / half <= best.factor <= hi * half
    er = recipe.epochs_ratio
    measured = paired(rec_arm.epochs, best_n.epochs).median
    covered = None if er is None else er.ci[0] <= measured <= er.ci[1]
    trials = len(at_n.trials) + len(first.trials) + len(second.trials)
    n_epochs = math.ceil(case.sweep["training"]["epochs"] * n_budget)
    notes = [f"{case.label}: the study at N ran up to {n_epochs} epochs per trial, the grid at M "
             f"up to {at_m.sweep['training']['epochs']} (x{n_budget:g} and x{budget:g} the "
             f"reference's; noise scale {rec.noise_scale or float('nan'):.3g})"]
    edge = min(grid_at_m(case)), max(grid_at_m(case))
    if any(_same(best.factor, e) for e in edge):
        notes.append(f"{case.label}: the grid's best lies at its edge (x{best.factor:.3g})")
    solved = None
    if solve:
        say(f"{case.label}: solve at M = {case.m}, started from the recommendation")
        found = scalesweep.solve(scalesweep.load(with_budget(n_base, budget)), world_size=case.m,
                                 start_from_recommendation=True, tracking_uri=uri, report=False)
        a = found.answer
        solved = SolveRun(a.lr_factor, a.warmup_steps, a.decision, a.search_trial_epochs_used,
                          trial_epochs_at(case.m, first, second), within_a_step(a.lr_factor, best.factor))
    return Outcome(case, rec.as_json(), best, best_named, rec_arm, paired(rec_arm.epochs, best.epochs),
                   paired(best_named.epochs, best.epochs), lr_covered, covered, measured, trials, notes,
                   solved)


def _row(o: Outcome) -> dict[str, Any]:
    def arm(a: Arm) -> str:
        return f"x{a.factor:.3g} {a.warmup}"

    return {"case": o.case.label, "n": o.case.n, "m": o.case.m, "trials": o.trials,
            "grid_best": arm(o.best), "grid_best_epochs": o.best.median,
            "recipe": arm(o.rec_arm), "recipe_vs_best": o.vs_best.median,
            "recipe_vs_best_ci": f"[{o.vs_best.ci[0]:.3g}, {o.vs_best.ci[1]:.3g}] "
                                 f"({o.vs_best.confidence:.0%})",
            "best_named": f"{o.best_named.rule} {o.best_named.warmup}",
            "named_vs_best": o.named_vs_best.median,
            "as_good_as_named": "yes" if o.vs_best.median <= o.named_vs_best.median else "no",
            "lr_interval_holds_best": "yes" if o.lr_covered else "no",
            "epochs_ratio_holds": {None: "no prediction", True: "yes", False: "no"}[o.epochs_covered],
            "measured_epochs_ratio": o.measured_epochs_ratio,
            "solve": "not run" if o.solve is None else
            f"x{o.solve.lr_factor:.3g} w{o.solve.warmup_steps} ({o.solve.decision})"
            if o.solve.lr_factor is not None else "no answer",
            "solve_share": math.nan if o.solve is None else o.solve.share,
            "solve_reaches_best": "-" if o.solve is None else "yes" if o.solve.reaches_best else "no"}


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seeds", type=int, default=3, help="paired seeds per cell near the optimum")
    p.add_argument("--no-solve", dest="solve", action="store_false",
                   help="skip `solve --start-from-recommendation` at M (step 4)")
    p.add_argument("--workload", action="append", default=None,
                   help="only the cases of this workload (repeatable; default: every case)")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__, argv, _options)
    cases = (QUICK,) if args.quick else tuple(
        c for c in CASES if args.workload is None or c.sweep["workload"]["name"] in args.workload)
    seeds = 2 if args.quick else args.seeds
    report = Report(NAME, quick=args.quick, settings={"seeds": seeds, "grid_step": GRID_STEP,
                                                      "cases": [c.label for c in cases]})
    outcomes: list[Outcome] = []
    tuned: dict[str, tuple[dict[str, Any], float]] = {}
    with sandbox(NAME) as root:
        for case in cases:
            workload = str(case.sweep["workload"]["name"])
            if workload not in tuned:
                sweep, factor, notes = tune_reference(case.sweep, case.reference, seeds, root)
                tuned[workload] = sweep, factor
                report.notes += notes
                report.notes.append(f"{workload}: the reference's lr tuned to x{factor:.3g} the "
                                    f"workload's ({sweep['optimizer']['lr']:.4g})")
            if workload in tuned:
                case = replace(case, sweep=tuned[workload][0])
            outcomes.append(run_case(case, seeds, root, solve=args.solve))
    report.tables.append(Table(
        f"the recipe recommended from N against the grid at M ({seeds} paired seeds per cell; "
        "ratios of epochs to target, median and order-statistic interval)",
        [Column("case", "case", "text"), Column("n", "N", "number", "d"),
         Column("m", "M", "number", "d"), Column("trials", "trials", "number", "d"),
         Column("grid_best", "grid's best cell", "text"),
         Column("grid_best_epochs", "its epochs", "number", ".3g"),
         Column("recipe", "recipe", "text"), Column("recipe_vs_best", "recipe / best", "number", ".3g"),
         Column("recipe_vs_best_ci", "interval", "text"),
         Column("best_named", "best named rule", "text"),
         Column("named_vs_best", "named / best", "number", ".3g"),
         Column("as_good_as_named", "recipe as good as named", "text"),
         Column("lr_interval_holds_best", "lr interval holds best", "text"),
         Column("epochs_ratio_holds", "epochs ratio M/N holds", "text"),
         Column("solve", "solve from the recipe", "text"),
         Column("solve_share", "its search / grid trial-epochs", "number", ".3g"),
         Column("solve_reaches_best", "reaches grid best", "text")],
        [_row(o) for o in outcomes]))
    ratios = [o.vs_best.median for o in outcomes]
    report.target("median over cases of recipe / grid best (epochs)", statistics.median(ratios), "<=", 1.05)
    report.target("worst case of recipe / grid best (epochs)", max(ratios), "<=", 1.15)
    report.target("coverage: the lr interval holds the grid's best factor",
                  sum(o.lr_covered for o in outcomes) / len(outcomes), ">=", 0.80)
    report.target("share of cases where the recipe is as good as the best named rule",
                  sum(o.vs_best.median <= o.named_vs_best.median for o in outcomes) / len(outcomes),
                  ">=", 2 / 3)
    solves = [o.solve for o in outcomes if o.solve is not None]
    if solves:
        report.target("solve from the recipe: cases reaching the grid's best with <= 25% of its "
                      "trial-epochs", sum(x.reaches_best and x.share <= 0.25 for x in solves)
                      / len(solves), ">=", 1.0)
    report.notes += [n for o in outcomes for n in o.notes]
    report.raw = {"outcomes": [{**_row(o), "recipe_json": o.recipe,
                                "vs_best_ratios": o.vs_best.ratios} for o in outcomes]}
    report.finish(args.out)


if __name__ == "__main__":
    main()
