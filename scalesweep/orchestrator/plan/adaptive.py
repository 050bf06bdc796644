"""Which trials of a sweep run in which round (docs/design.md §4, "Adaptive seeds").

A sweep without ``replicates`` is one round of every trial, read at the nominal confidence.
With ``replicates: {min, max, step, first_seed}`` the plan holds every arm at ``max`` seeds
from ``first_seed`` on, and the launcher runs it in rounds: first every arm's first ``min``;
after each round, an arm whose decision against its baseline arm is still ``not resolved``
gets its seeds up to the next look, and so does its baseline arm (the pairs need both); an
arm that is decided stops (racing). Every look reads its interval at the design's per-look confidence
(:mod:`scalesweep.science.stats.sequential`), so stopping early keeps the error rate.

The rounds are a function of the finished trials alone, so ``resume`` replays them: the
rounds whose trials are done are decided again from MLflow, and the sweep goes on from there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scalesweep.orchestrator.plan import rules
from scalesweep.orchestrator.plan.rows import Plan, PlanRow, evaluations
from scalesweep.science.stats import sequential
from scalesweep.science.stats.replicates import CONFIDENCE


def looks(plan: Plan) -> tuple[int, ...]:
    """The seed counts at which arms are decided (:func:`scalesweep.orchestrator.plan.rules.looks`)."""
    return rules.looks(plan.sweep)


def design(plan: Plan, confidence: float = CONFIDENCE) -> sequential.Design:
    """The seed design of the plan's sweep (:func:`scalesweep.orchestrator.plan.rules.design`)."""
    return rules.design(plan.sweep, confidence)


def first_round(plan: Plan) -> list[PlanRow]:
    rep = plan.sweep.spec.replicates
    if rep is None:
        return list(plan.rows)
    return [r for r in plan.rows if r.seed < rep.first_seed + rep.min]


def fused_trials(rows: Sequence[PlanRow], per_trial: int) -> list[list[PlanRow]]:
    """``rows`` (one round's trials) as the Tune trials that run them: each arm's seeds in
    plan order, at most ``per_trial`` to a trial (``resources.seeds_per_trial``; docs/design.md,
    "Fused seeds"); with 1, one trial per row, as always. A round adds seeds at the design's
    looks, so fusing its seeds changes no look."""
    if per_trial <= 1:
        return [[r] for r in rows]
    by_arm: dict[str, list[PlanRow]] = {}
    for row in rows:
        by_arm.setdefault(row.arm, []).append(row)
    return [seeds[i:i + per_trial] for seeds in by_arm.values() for i in range(0, len(seeds), per_trial)]


def fused_name(rows: Sequence[PlanRow]) -> str:
    """A fused trial's Tune name (and directory): its arm and its seeds, ``<arm>-seeds0+1``;
    a single row keeps its own name. Its seeds' MLflow runs keep theirs (§4.2)."""
    if len(rows) == 1:
        return rows[0].name
    return f"{rows[0].arm}-seeds{'+'.join(str(r.seed) for r in rows)}"


def describe_fusion(plan: Plan) -> str | None:
    """What ``plan`` says of ``resources.seeds_per_trial`` (nothing at 1)."""
    per_trial = plan.sweep.spec.resources.seeds_per_trial
    if per_trial <= 1:
        return None
    first = first_round(plan)
    trials = len(fused_trials(first, per_trial))
    return (f"resources.seeds_per_trial {per_trial}: an arm's seeds of a round train together, "
            f"up to {per_trial} in one trial process (the first round's {len(first)} seed "
            f"trial(s) in {trials} process(es)); each seed keeps its own MLflow run")


def _baseline_arms(plan: Plan) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for row in plan.rows:
        base = plan.baseline_for(row)
        out.setdefault(row.arm, None if base is None else base.arm)
    return out


def next_round(plan: Plan, in_play: Sequence[PlanRow], decisions: Mapping[str, str]) -> list[PlanRow]:
    """The trials to add after a round: each undecided arm's seeds up to its next look, and
    its baseline arm's too; nothing when every arm is decided or at ``max``."""
    rep = plan.sweep.spec.replicates
    if rep is None:
        return []
    planned = looks(plan)
    seeds: dict[str, int] = {}
    for row in in_play:
        seeds[row.arm] = seeds.get(row.arm, 0) + 1
    base_of = _baseline_arms(plan)
    want: dict[str, int] = {}
    for arm, n in seeds.items():
        base = base_of.get(arm)
        if base is None or base == arm or decisions.get(arm, "not resolved") != "not resolved":
            continue
        later = [look for look in planned if look > n]
        if later:
            want[arm] = max(want.get(arm, 0), later[0])
            want[base] = max(want.get(base, 0), later[0])
    running = {r.name for r in in_play}
    return [r for r in plan.rows
            if r.arm in want and r.seed < rep.first_seed + want[r.arm] and r.name not in running]


def describe(plan: Plan) -> str | None:
    """The plan's line on adaptive seeds, or None for a fixed number of seeds."""
    rep = plan.sweep.spec.replicates
    if rep is None:
        return None
    d = design(plan)
    if d.error == 0.0:
        return (f"warning: adaptive seeds with at most {rep.max} seeds: no look can decide anything "
                f"(even {rep.max} seeds that all agree fall short of {d.confidence:.0%} over "
                f"{len(d.looks)} looks), so every arm runs all {rep.max}; raise replicates.max")
    last = d.confidence_at(d.looks[-1])
    reads = f"each interval read at {d.per_look:.4g} confidence"
    if last != d.per_look:
        reads += f" before the last look and at {last:.4g} at it"
    idle = [n for n in d.looks if sequential.boundary(n, d.confidence_at(n)) is None]
    out = (f"adaptive seeds: every arm runs seeds {rep.first_seed}-{rep.first_seed + rep.min - 1} "
           f"first; arms not yet decided against their baseline (and the baseline) get more at "
           f"looks {list(d.looks)}, up to {rep.max}; {reads}, so that, over these planned looks "
           f"and with the targets frozen at the first look, stopping early keeps the error rate "
           f"at most {1 - d.confidence:.0%} per arm (exactly {d.error:.2%}; {sequential.METHOD}); the "
           "plan lists every trial that may run")
    if idle:
        out += (f"\nwarning: the looks at {', '.join(map(str, idle))} seeds can never decide an arm (no "
                "interval of so few pairs reaches the look's confidence): they only spend seeds; "
                "raise replicates.min")
    return out


#: the per-epoch slowdowns whose power ``plan`` prints
POWER_EFFECTS = (1.10, 1.20)


def describe_power(plan: Plan) -> str | None:
    """The plan's line on what its seeds can decide: the design's expected power per arm for
    a 10 % and a 20 % slowdown at the sweep's eval spacing (the calibration's falling shape,
    :class:`scalesweep.science.stats.sequential.PairsModel`), or a warning when one seed per
    arm can never be decided; None for a plan with no arm compared with a baseline."""
    bases = [b for r in plan.rows if (b := plan.baseline_for(r)) is not None and b is not r]
    if not bases:
        return None
    seen = looks(plan)
    if seen[0] < sequential.MIN_SEEDS:
        return ("warning: one seed per arm can never be decided against its baseline (an interval needs "
                f"{sequential.MIN_SEEDS} seeds or more): every arm will read 'not resolved'; give the seed "
                "axis more seeds, or replicates")
    d = design(plan)
    last = d.looks[-1]
    if sequential.boundary(last, d.confidence_at(last)) is None:
        fewest = next(n for n in range(last + 1, 64)
                      if sequential.boundary(n, sequential.design((n,), d.confidence).per_look))
        return (f"warning: no arm can be decided against its baseline with {last} seeds per arm: "
                f"no interval of {last} pairs reaches {d.confidence_at(last):.0%} confidence, "
                f"however large the difference, so every arm will read 'not resolved'; give the "
                f"seed axis {fewest} seeds or more, or adaptive replicates")
    evals = min(evaluations(b) for b in bases)
    found = [sequential.expected_power(d.looks, d.confidence, e, plan.rules.margin, float(evals))
             for e in POWER_EFFECTS]
    each = "; ".join(f"{(p.effect - 1) * 100:.0f} % slower: called slower in {p.slower:.0%} "
                     f"(mean {p.mean_seeds:.1f} seeds)" for p in found)
    return (f"expected power per arm, at most {1 - d.confidence:.0%} error: {each}; simulated over "
            f"{found[0].arms} arms through the real decisions, for pairs as noisy as the calibration "
            f"benchmark's falling curves ({evals} evals per trial, the baseline crossing its target at "
            f"{sequential.FALLING.crossing_fraction:.0%} of the run): noisier pairs get less "
            "(docs/design.md §4, \"Adaptive seeds\")")
