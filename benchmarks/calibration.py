"""Calibration of the decisions through the driver's real path: simulated studies whose truth
is known, run round after round as the driver runs them (docs/design.md §4, "Target",
"Decisions", "Ratios at every level", "Adaptive seeds").

Each study is a real plan (sweeps/smoke.yaml without its seed axis, adaptive replicates
{min: 6, max: 10, step: 4} as the shipped study's, the default levels, world sizes 2, 4 and 8 with two
lr rules: a baseline arm and four arms against it) fed simulated curves in the driver's dicts
({update, samples_seen, epoch, wall_s, dev_loss}). The rounds are the driver's: the first
round's seeds, then ``scalesweep.orchestrator.plan.adaptive.next_round`` on the decisions
(``ArmSummary.answer``) that ``scalesweep.orchestrator.tracking.summary.arm_summaries`` gives
for the trials run so far, its relative target cross-fitted and frozen at the first look, its
intervals at the design's confidences and its levels one family (a fixed sequence). Nothing is
re-implemented here but the curves.

Curves: dev_loss(t) = p · (1 + ε) + A · exp(−t / τ), evaluated every 0.1 epoch up to 4 epochs,
with a per-seed time scale τ (a part shared by the arms' same seed, as a seed fixes init and
data order, and a part of each trial's own), a per-seed plateau p likewise, 5 % of trials stuck
on a plateau 15 % higher (they never reach the target: censored), and eval noise ε. An arm with
a planted per-epoch ratio r has its time scale multiplied by r, so each of its seeds crosses
any level r times later than it would have: its true paired ratio is r at every level.

Shapes: ``falling`` (τ = 1 epoch, the baseline still falling at the horizon, its crossing of the
headline target near 2.8 epochs); ``plateau`` (τ = 0.4 epoch: the baseline flat over the last
half of the horizon, so the target sits on the plateau's knee, where seed noise moves the
crossing most); ``noisy`` (``falling`` with 4x the trials' own time-scale noise: seeds spread
more than an eval bracket, the regime in which the design's error is reached); ``diverging``
(``falling`` with 10 % of trials turning NaN from an eval in the second half: a baseline seed
so cut is left out of the target, an arm seed that had not crossed never does). Each study of a
shape holds all four arms, A/A (r = 1, the baseline's own distribution) and r = 1.05, 1.10,
1.20: a case's rate is one arm per study, independent across studies (seeded per study, so the
figures do not depend on the process count).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import multiprocessing
import random
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import RESULTS, ROOT, Column, Report, Table, parse_args, say

NAME = "calibration"
SWEEP = ROOT / "sweeps" / "smoke.yaml"
#: the shipped study's replicates (sweeps/wenet_4v16.yaml) and a horizon and eval spacing like its
OVERRIDES = ("replicates={min: 6, max: 10, step: 4}", "axes.world_size=[2, 4, 8]",
             "axes.scaling_rule=[none, linear]", "training.epochs=4", "training.eval_every_epochs=0.1")
EPOCHS, EVAL_EVERY = 4.0, 0.1
#: the stated error rate of every decision (1 - the design's confidence)
ALPHA = 0.10
#: the planted per-epoch ratios, one arm each; 1.0 is the A/A arm
RATIOS = (1.0, 1.05, 1.10, 1.20)
STUDIES = 1500
#: the answers an arm can end with (scalesweep.science.stats.decisions.DECISIONS)
ANSWERS = ("slower", "faster", "equivalent", "not resolved")
#: what the dicts' clocks other than epochs are built from (they do not enter the decisions)
TRAIN_SIZE, SECONDS_PER_EPOCH = 8192, 30.0


@dataclass(frozen=True)
class Shape:
    """How one shape's curves are drawn (see the module docstring)."""

    name: str
    tau: float
    amplitude: float = 3.0
    plateau: float = 1.0
    #: sd of log τ: shared by a seed's trials, and each trial's own
    tau_shared: float = 0.05
    tau_own: float = 0.03
    #: sd of the plateau's relative offset: shared, and own
    plateau_shared: float = 0.02
    plateau_own: float = 0.01
    #: a trial stuck on a higher plateau: its chance and how much higher
    stuck_p: float = 0.05
    stuck_shift: float = 0.15
    #: relative sd of each eval's noise
    eval_noise: float = 0.002
    #: a trial that diverges: its chance, and its evals are NaN from a random one in the
    #: second half of the horizon on (a baseline seed so cut is left out of the target)
    diverge_p: float = 0.0


SHAPES = (Shape("falling", tau=1.0), Shape("plateau", tau=0.4), Shape("noisy", tau=1.0, tau_own=0.12),
          Shape("diverging", tau=1.0, diverge_p=0.10))


def case_name(shape: str, ratio: float) -> str:
    head = "A/A" if ratio == 1.0 else f"{ratio:.2f}"
    return head if shape == "falling" else f"{shape} {head}"


def wrong(ratio: float, decision: str, margin: float) -> bool:
    """Whether ``decision`` claims what the true ratio is not: a direction it does not have,
    or equivalence when the ratio lies on the band's edge or outside it."""
    if decision == "faster":
        return ratio >= 1.0
    if decision == "slower":
        return ratio <= 1.0
    if decision == "equivalent":
        return ratio >= 1.0 + margin - 1e-12 or ratio <= 1.0 / (1.0 + margin) + 1e-12
    return False


# -- one study through the driver's path --------------------------------------------------------

_PLAN: Any = None  # the plan every study runs, made once per process (fork inherits it)


def make_calibration_plan() -> Any:
    """The real plan the studies run: smoke.yaml without its seed axis (adaptive replicates
    number the seeds), with the overrides above."""
    from scalesweep.orchestrator.plan.rows import make_plan
    from scalesweep.orchestrator.spec.load import load_sweep

    text = SWEEP.read_text(encoding="utf-8")
    assert "  seed: [0]\n" in text, "sweeps/smoke.yaml changed its seed axis"
    with tempfile.TemporaryDirectory(prefix="scalesweep-calibration-") as tmp:
        path = Path(tmp) / "smoke.yaml"
        path.write_text(text.replace("  seed: [0]\n", ""), encoding="utf-8")
        return make_plan(load_sweep(str(path), list(OVERRIDES)))


def arm_ratios(plan: Any) -> dict[str, float]:
    """Arm -> its planted ratio: the baseline arm 1, the others in name order RATIOS."""
    base = {r.arm for r in plan.rows if plan.baseline_for(r) is r}
    assert len(base) == 1, base
    others = sorted({r.arm for r in plan.rows} - base)
    assert len(others) == len(RATIOS), others
    return {next(iter(base)): 1.0, **dict(zip(others, RATIOS, strict=True))}


def curves_for(plan: Any, ratios: Mapping[str, float], shape: Shape, rng: random.Random
               ) -> dict[str, list[dict[str, float]]]:
    """Every planned trial's curve (drawn up front, so which trials a round runs never changes
    another trial's draw)."""
    seeds = sorted({r.seed for r in plan.rows})
    shared = {s: (rng.gauss(0.0, shape.tau_shared), rng.gauss(0.0, shape.plateau_shared)) for s in seeds}
    n_evals = round(EPOCHS / EVAL_EVERY)
    out = {}
    for row in plan.rows:
        tau_z, plateau_z = shared[row.seed]
        tau = shape.tau * ratios[row.arm] * math.exp(tau_z + rng.gauss(0.0, shape.tau_own))
        stuck = shape.stuck_shift if rng.random() < shape.stuck_p else 0.0
        plateau = shape.plateau * (1.0 + plateau_z + rng.gauss(0.0, shape.plateau_own) + stuck)
        per_epoch = TRAIN_SIZE / row.global_batch
        diverges = rng.randint(n_evals // 2, n_evals) if rng.random() < shape.diverge_p else n_evals + 1
        curve = []
        for i in range(1, n_evals + 1):
            t = i * EVAL_EVERY
            loss = (plateau + shape.amplitude * math.exp(-t / tau)) * (1.0 + rng.gauss(0.0, shape.eval_noise))
            loss = math.nan if i >= diverges else loss
            curve.append({"update": float(round(t * per_epoch)), "samples_seen": t * TRAIN_SIZE,
                          "epoch": t, "wall_s": t * SECONDS_PER_EPOCH, "dev_loss": loss})
        out[row.name] = curve
    return out


@dataclass(frozen=True)
class ArmOutcome:
    """One arm at the end of one study."""

    ratio: float
    decision: str
    seeds: int
    #: the levels' decisions as the outputs show them, and each level's interval alone
    levels: tuple[str, ...]
    levels_marginal: tuple[str, ...]


@dataclass(frozen=True)
class StudyOutcome:
    shape: str
    arms: tuple[ArmOutcome, ...]
    rounds: int
    #: the conditioning check at the headline target, as the baseline arm carries it at the
    #: study's end (None: not judged)
    conditioning_ok: bool | None
    #: CPU seconds the study took in its process: what the wall time would be on idle cores
    cpu_s: float = 0.0


def run_study(plan: Any, ratios: Mapping[str, float], shape: Shape, rng: random.Random) -> StudyOutcome:
    """One study, round after round as ``scalesweep.orchestrator.launch.rounds.Rounds`` runs it:
    each round decides from the trials run so far, undecided arms (and their baseline) get
    seeds up to the next look."""
    from scalesweep.orchestrator.plan import adaptive
    from scalesweep.orchestrator.tracking.summary import arm_summaries

    curves = curves_for(plan, ratios, shape, rng)
    in_play = adaptive.first_round(plan)
    rounds = 0
    while True:
        rounds += 1
        seen = {r.name: curves[r.name] for r in in_play}  # a round sees only what has run
        summaries = arm_summaries(plan, seen, in_play)
        more = adaptive.next_round(plan, in_play, {a.arm: a.answer for a in summaries})
        if not more:
            break
        in_play = [*in_play, *more]
    arms = tuple(ArmOutcome(ratios[a.arm], a.answer, a.n_seeds, tuple(lv.decision for lv in a.levels),
                            tuple(lv.marginal for lv in a.levels))
                 for a in summaries if not a.is_baseline)
    base = next(a for a in summaries if a.is_baseline)
    cond = None if base.conditioning is None else base.conditioning.ok
    return StudyOutcome(shape.name, arms, rounds, cond)


def study_rng(seed: int, shape: str, index: int) -> random.Random:
    # a string seed is hashed deterministically (not by PYTHONHASHSEED): reproducible per study
    return random.Random(f"calibration/{seed}/{shape}/{index}")


def _one(job: tuple[int, int, int]) -> StudyOutcome:
    global _PLAN
    seed, shape_index, index = job
    if _PLAN is None:
        _PLAN = make_calibration_plan()
    shape = SHAPES[shape_index]
    start = time.process_time()
    out = run_study(_PLAN, arm_ratios(_PLAN), shape, study_rng(seed, shape.name, index))
    return dataclasses.replace(out, cpu_s=time.process_time() - start)


def run_all(seed: int, studies: int, processes: int) -> list[StudyOutcome]:
    """``studies`` studies of every shape, on ``processes`` processes (1: in this one)."""
    global _PLAN
    _PLAN = make_calibration_plan()
    jobs = [(seed, k, i) for k in range(len(SHAPES)) for i in range(studies)]
    if processes <= 1:
        return [_one(j) for j in jobs]
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        return list(pool.imap(_one, jobs, chunksize=max(1, min(50, len(jobs) // (4 * processes)))))


# -- the figures --------------------------------------------------------------------------------

def _rate(hits: int, n: int) -> tuple[float, float]:
    """A proportion and its standard error."""
    p = hits / n if n else math.nan
    return p, math.sqrt(p * (1.0 - p) / n) if n else math.nan


def case_row(shape: str, ratio: float, arms: Sequence[ArmOutcome], conditioning_ok: Sequence[bool | None],
             margin: float) -> dict[str, Any]:
    """One case's figures: the JSON list's object. ``conditioning_ok``: each arm's study's
    check, in the order of ``arms``."""
    n = len(arms)

    def share(hit: Callable[[ArmOutcome], bool]) -> tuple[float, float]:
        return _rate(sum(1 for a in arms if hit(a)), n)

    false_dir, false_dir_se = share(lambda a: a.decision in ("slower", "faster")
                                    and wrong(ratio, a.decision, margin))
    # equivalence is an error on the band's edge or outside it; inside, it is the right answer
    edge_or_out = ratio >= 1.0 + margin - 1e-12
    false_eq, false_eq_se = share(lambda a: a.decision == "equivalent") if edge_or_out else (None, None)
    fw, fw_se = share(lambda a: any(wrong(ratio, d, margin) for d in a.levels))
    fw_raw, fw_raw_se = share(lambda a: any(wrong(ratio, d, margin) for d in a.levels_marginal))
    p = {d: _rate(sum(1 for a in arms if a.decision == d), n)[0] for d in ANSWERS}
    judged = list(zip(arms, conditioning_ok, strict=True))
    mean_seeds = sum(a.seeds for a in arms) / n if n else math.nan
    sd_seeds = math.sqrt(sum((a.seeds - mean_seeds) ** 2 for a in arms) / (n - 1)) if n > 1 else math.nan
    return {
        "case": case_name(shape, ratio), "shape": shape, "ratio": ratio, "studies": n,
        "false_direction": false_dir, "false_equivalent": false_eq,
        "p_slower": p["slower"], "p_equivalent": p["equivalent"],
        "p_not_resolved": p["not resolved"], "p_faster": p["faster"],
        "mean_seeds": mean_seeds, "familywise_levels": fw, "familywise_levels_unadjusted": fw_raw,
        "false_direction_se": false_dir_se, "false_equivalent_se": false_eq_se,
        "familywise_levels_se": fw_se, "familywise_levels_unadjusted_se": fw_raw_se,
        "mean_seeds_se": sd_seeds / math.sqrt(n) if n > 1 else math.nan,
        "well_conditioned": _share(conditioning_ok, lambda ok: ok is True),
        "p_resolved_well_conditioned": _share([a for a, ok in judged if ok is True], _resolved),
        "p_resolved_flagged": _share([a for a, ok in judged if ok is False], _resolved),
    }  # fmt: skip


def _resolved(arm: ArmOutcome) -> bool:
    return arm.decision != "not resolved"


def _share(items: Sequence[Any], hit: Callable[[Any], bool]) -> float | None:
    return sum(1 for x in items if hit(x)) / len(items) if items else None


def summarize(outcomes: Sequence[StudyOutcome], margin: float) -> list[dict[str, Any]]:
    """One row per case, shape by shape."""
    rows = []
    for shape in SHAPES:
        mine = [o for o in outcomes if o.shape == shape.name]
        for ratio in RATIOS:
            found = [(a, o.conditioning_ok) for o in mine for a in o.arms if a.ratio == ratio]
            rows.append(case_row(shape.name, ratio, [a for a, _ in found], [ok for _, ok in found], margin))
    return rows


COLUMNS = [
    Column("case", "case", "text"), Column("studies", "studies", fmt=".0f"),
    Column("false_direction", "false direction", "number", ".3f"),
    Column("false_equivalent", "false equivalent", "number", ".3f"),
    Column("p_slower", "P(slower)", "number", ".3f"),
    Column("p_equivalent", "P(equivalent)", "number", ".3f"),
    Column("p_not_resolved", "P(not resolved)", "number", ".3f"),
    Column("p_faster", "P(faster)", "number", ".3f"),
    Column("mean_seeds", "mean seeds", fmt=".2f"),
    Column("familywise_levels", "levels FWER (as shown)", "number", ".3f"),
    Column("familywise_levels_unadjusted", "levels FWER (each level alone)", "number", ".3f"),
    Column("well_conditioned", "target well conditioned", "number", ".2f"),
    Column("p_resolved_well_conditioned", "P(resolved | well conditioned)", "number", ".2f"),
    Column("p_resolved_flagged", "P(resolved | flagged)", "number", ".2f"),
]


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=int, default=0, help="the simulation's seed (each study's is derived)")
    p.add_argument("--studies", type=int, default=None, help=f"studies per shape (default {STUDIES})")
    p.add_argument("--processes", type=int, default=2, help="worker processes (1: in this one)")
    p.add_argument("--json", action="store_true", help="print the JSON list of cases on stdout")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__, argv, _options)
    studies = args.studies or (20 if args.quick else STUDIES)
    if args.out == RESULTS and studies < STUDIES:
        args.out = RESULTS / "quick"  # a smaller run never overwrites the committed figures
    from scalesweep.orchestrator.plan import adaptive

    plan = make_calibration_plan()
    design = adaptive.design(plan)
    margin = plan.rules.margin
    report = Report(NAME, quick=studies < STUDIES, settings={
        "seed": args.seed, "studies_per_shape": studies, "processes": args.processes,
        "sweep": str(SWEEP.relative_to(ROOT)), "overrides": list(OVERRIDES), "ratios": list(RATIOS),
        "shapes": [s.__dict__ for s in SHAPES], "looks": list(design.looks), "per_look": design.per_look,
        "design_error": design.error, "headline_level": plan.rules.headline_level,
        "levels": list(plan.sweep.spec.target.levels), "margin": margin})
    say(f"{studies} studies x {len(SHAPES)} shapes on {args.processes} process(es)")
    t0 = time.perf_counter()
    outcomes = run_all(args.seed, studies, args.processes)
    wall = time.perf_counter() - t0
    cpu = sum(o.cpu_s for o in outcomes)
    rows = summarize(outcomes, margin)
    report.tables.append(Table(
        f"decisions over {studies} simulated studies per case through tracking.summary.arm_summaries "
        f"and adaptive.next_round (looks {list(design.looks)}, confidence {design.per_look:.4g} then "
        f"{design.confidence_at(design.looks[-1]):.4g}, "
        f"margin {margin:g})", COLUMNS, rows))
    for row in rows:
        three = 3 * (row["false_direction_se"] or 0.0)
        if row["ratio"] == 1.0:
            report.target(f"{row['case']}: false direction", row["false_direction"], "<=", ALPHA + three)
            report.target(f"{row['case']}: levels FWER (as shown)", row["familywise_levels"], "<=",
                          ALPHA + 3 * row["familywise_levels_se"])
        if row["ratio"] > 1.0 + margin:
            report.target(f"{row['case']}: false equivalent", row["false_equivalent"], "<=",
                          ALPHA + 3 * row["false_equivalent_se"])
    by_case = {row["case"]: row for row in rows}
    # a design that spends nothing of its error rate buys no power with it
    report.target("A/A: false direction spends the error rate", by_case["A/A"]["false_direction"], ">=",
                  ALPHA / 4 - 3 * by_case["A/A"]["false_direction_se"])
    report.target("1.10: P(slower)", by_case["1.10"]["p_slower"], ">=", 0.80)
    report.target("1.10: mean seeds", by_case["1.10"]["mean_seeds"], "<=", 10.0)
    report.target("plateau 1.20: P(slower)", by_case["plateau 1.20"]["p_slower"], ">=", 0.90)
    # the conditioning check flags the shape on which the decisions fail and passes the ones
    # on which they work (docs/design.md §4, "Ratios at every level")
    for case in ("A/A", "plateau A/A"):
        report.target(f"{case}: target well conditioned", by_case[case]["well_conditioned"], ">=", 0.90)
    report.target("noisy A/A: target well conditioned", by_case["noisy A/A"]["well_conditioned"], "<=", 0.10)
    # plan's expected power (sequential.expected_power, the falling shape's pairs model) against
    # what the whole studies measured at this design and eval spacing
    from scalesweep.science.stats import sequential

    for case in ("1.10", "1.20"):
        model = sequential.expected_power(design.looks, design.confidence, float(case), margin,
                                          EPOCHS / EVAL_EVERY)
        report.target(f"{case}: plan's expected power within 0.05 of P(slower)",
                      abs(model.slower - by_case[case]["p_slower"]), "<=", 0.05)
        row = by_case[case]
        report.notes.append(f"plan's expected power at {case}: {model.slower:.3f} (mean "
                            f"{model.mean_seeds:.2f} seeds) over {model.arms} simulated arms; measured "
                            f"here {row['p_slower']:.3f} (mean {row['mean_seeds']:.2f} seeds).")
    report.target("wall seconds for every case", wall, "<=", 600.0)
    # the machine is shared: the CPU the studies took, spread over the processes, is what the
    # wall would be on as many idle cores
    report.target(f"CPU seconds / {args.processes} processes", cpu / max(args.processes, 1), "<=", 600.0)
    report.notes += [
        f"Wall {wall:.0f} s for {len(outcomes)} studies on {args.processes} process(es), load "
        f"average before {report.load_before}; the studies took {cpu:.0f} CPU seconds "
        f"({cpu / max(len(outcomes), 1) * 1000:.0f} ms each), {cpu / max(args.processes, 1):.0f} s "
        "of wall on as many idle cores.",
        f"The design's exact error over looks {list(design.looks)}, intervals at {design.per_look:.4g} "
        f"before the last look and {design.confidence_at(design.looks[-1]):.4g} at it, is "
        f"{design.error:.4%} (sequential.design): what A/A false directions reach with point crossings "
        "and no equivalence stopping; censoring and equivalence only lower it.",
        "false direction: A/A any slower/faster; planted ratios a faster. false equivalent: "
        "equivalent called at a ratio on the band's edge (1.10: a one-sided error, alpha/2 for "
        "a fixed design) or outside it (1.20). levels FWER: some level of the arm decided "
        "wrongly, as the outputs show the levels (the headline's level at the headline's decision, the "
        "others a fixed sequence from the loosest), and with each level read alone.",
        "Standard errors are in the JSON (raw.cases, *_se): sqrt(p(1-p)/studies).",
    ]
    report.raw = {"cases": rows, "wall_s": wall, "cpu_s": cpu, "rounds_mean": {
        s.name: sum(o.rounds for o in outcomes if o.shape == s.name) / max(1, studies) for s in SHAPES}}
    if args.json:
        with contextlib.redirect_stdout(sys.stderr):
            report.finish(args.out)
        print(json.dumps(rows, indent=1, default=_json_default))
    else:
        report.finish(args.out)


def _json_default(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else str(value)


if __name__ == "__main__":
    main()
