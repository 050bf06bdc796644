"""`scalesweep advise`: what a finished study says about the critical batch and the rules to use.

Reads the study from MLflow (:func:`scalesweep.dashboards.mlflow_data.load_study`), takes updates
to target from the trials' summaries the report shows
(:func:`scalesweep.dashboards.convergence_table.study_trials`: the driver's computation, on the
logged history), and fits S = S_min (1 + B_crit / B) with :mod:`scalesweep.science.prediction.batch_fit`:

* an *arm* is an lr rule × warmup rule; at each global batch its value is its best
  hyperparameter setting (free axes such as ``optimizer.lr``), each setting the median of its
  seeds (a seed that never reached counts as +inf: the setting never reaches once half or
  more of its seeds do not);
* at the reference batch every lr rule and both ``fixed`` and ``scaled`` warmup are the same
  trial (the planner merged them), so that trial belongs to each of those arms;
* "best per batch" takes, at each batch, the best arm: the tuned S(B) of McCandlish et al.,
  whose B_crit is the one to compare with the measured gradient noise scale.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from scalesweep.dashboards.arm_text import interval_text, median_text
from scalesweep.dashboards.arms_table import arm_summaries
from scalesweep.dashboards.convergence_table import StudyTrial, study_trials
from scalesweep.dashboards.mlflow_data import Study, load_study
from scalesweep.mlflow_names import STATUS_TAG
from scalesweep.science.prediction.batch_fit import Arm, Fit, Recommendation, judge, recommend
from scalesweep.science.solve import DECISION_RANK
from scalesweep.science.stats.arms import ArmSummary

BEST = "best per batch"
#: the noise scale compared with B_crit is read over the last half of each trial's updates
LATE_FRACTION = 0.5
MERGED_AT_REFERENCE = ("fixed", "scaled", "proportional")


@dataclass(frozen=True)
class ArmFit:
    arm: Arm
    fit: Fit | None
    problems: list[str]  # judge(fit), or why there is no fit


@dataclass(frozen=True)
class Advice:
    experiment: str
    parent_run_id: str
    target: str
    batches: list[float]  # every measured global batch
    samples_per_batch_per_worker: int  # per_worker_batch x accum_grad
    samples_per_epoch: float
    arms: list[ArmFit]  # the "best per batch" envelope last
    noise_scale: float | None  # median late-training B_simple
    noise_points: int
    noise_trials: int
    world_size: int
    recommendation: Recommendation
    projection: tuple[str, float] | None  # (label, seconds per epoch at world_size)
    #: the arms measured at world_size, against their baseline: best decision first, then the
    #: lowest upper end of the paired epochs ratio's interval (docs/design.md §4, "Decisions")
    decided: tuple[ArmSummary, ...] = ()

    @property
    def envelope(self) -> ArmFit:
        return self.arms[-1]

    @property
    def target_batch(self) -> float:
        return self.recommendation.batch

    def epochs(self, updates: float) -> float:
        return updates * self.target_batch / self.samples_per_epoch


def advise(study: Study, world_size: int | None = None,
           summaries: Sequence[StudyTrial] | None = None) -> Advice:
    """The advice for ``world_size`` (default: the largest measured); ``summaries``: the
    study's :func:`study_trials` if the caller has them already (the report does)."""
    if world_size is not None and world_size < 1:
        raise ValueError(f"world_size must be at least 1, but got {world_size=}")
    listed = study_trials(study) if summaries is None else summaries
    trials = _trials(listed)
    if trials.empty:
        raise ValueError(f"study {study.experiment_name!r} has no trials with a known, fixed "
                         "global batch (batch-ramp trials are left out of the batch fit)")
    per_worker = int(trials["samples_per_worker"].mode().iloc[0])
    if world_size is None:
        world_size = int(trials["world_size"].max())
    batches = sorted(float(b) for b in trials["global_batch"].unique())
    arms = _arms(trials)
    fits = [_arm_fit(a) for a in arms]
    envelope = Arm(BEST, {b: _best([a.updates.get(b) for a in arms]) for b in batches})
    fits.append(_arm_fit(envelope))
    noise, points, n_trials = _late_noise_scale(study, trials)
    batch = float(world_size * per_worker)
    projection = None
    if study.projection is not None and world_size in study.projection.seconds_per_epoch:
        projection = (study.projection.label, study.projection.seconds_per_epoch[world_size])
    return Advice(
        experiment=study.experiment_name, parent_run_id=study.parent_run_id,
        target=_target(study), batches=batches, samples_per_batch_per_worker=per_worker,
        samples_per_epoch=float((trials["updates_per_epoch"] * trials["global_batch"]).median()),
        arms=fits, noise_scale=noise, noise_points=points, noise_trials=n_trials,
        world_size=world_size, recommendation=recommend(arms, batch), projection=projection,
        decided=ranked(arm_summaries(study, listed), world_size),
    )  # fmt: skip


def ranked(summaries: Sequence[ArmSummary], world_size: int) -> tuple[ArmSummary, ...]:
    """The arms at ``world_size`` compared with a baseline, by decision (faster, equivalent,
    not resolved, slower), then by the upper end of their epochs ratio's interval (an arm
    with no interval last)."""
    def upper(a: ArmSummary) -> float:
        ci = None if a.epochs_ratio is None else a.epochs_ratio.ratios.ci
        return math.inf if ci is None else ci[1]

    mine = [a for a in summaries if not a.is_baseline and a.epochs_ratio is not None
            and _number(a.axes.get("world_size")) == world_size]
    return tuple(sorted(mine, key=lambda a: (DECISION_RANK[a.answer], upper(a))))


def load_advice(
    tracking_uri: str, *, experiment: str | None = None, parent_run_id: str | None = None,
    world_size: int | None = None,
) -> Advice:
    study = load_study(tracking_uri, experiment=experiment, parent_run_id=parent_run_id)
    return advise(study, world_size)


# -- from the study to arms ------------------------------------------------------------------


def _target(study: Study) -> str:
    value = study.target_value
    sign = "<=" if study.rules.mode == "min" else ">="
    return f"{study.target_metric} {sign} {value:.4g}" if value is not None else "not set"


def _trials(trials: Sequence[StudyTrial]) -> pd.DataFrame:
    """One row per trial: its arm, global batch and updates to target (NaN: never)."""
    rows = []
    for t in trials:
        p = t.run
        batch = _number(p.get("global_batch"))
        if batch is None or _ramped(p.get("batch_ramp")):
            # the fit S = S_min (1 + B_crit / B) is over constant batches; a ramp's updates to
            # target were made at several (its global_batch param is only the last)
            continue
        config = tuple(
            (k, str(p[k])) for k in sorted(p)
            if k.startswith(("optimizer.", "scheduler.")) and not pd.isna(p[k])
        )  # fmt: skip
        per_worker, accum = _number(p.get("per_worker_batch")), _number(p.get("accum_grad"))
        world_size = int(p["world_size"])  # type: ignore[call-overload]
        rows.append({
            "rule": str(p.get("scaling_rule")), "warmup": str(p.get("warmup_rule")),
            "optimizer_rule": _optimizer_rule(p.get("optimizer_rule")),
            "world_size": world_size, "global_batch": batch,
            "reference_global_batch": _number(p.get("reference_global_batch")),
            "samples_per_worker": int(per_worker * (accum or 1)) if per_worker
            else int(batch // world_size),
            "updates_per_epoch": _number(p.get("updates_per_epoch")) or math.nan,
            "updates": _number(t.summary.updates_to_target),
            "config": config, "run_id": t.run_id, STATUS_TAG: p.get(STATUS_TAG),
        })  # fmt: skip
    return pd.DataFrame(rows)


def _optimizer_rule(value: object) -> str:
    """A trial's ``optimizer_rule`` param; "none" where the study had no such axis (its
    trials lack the param, studies before it existed too)."""
    return value if isinstance(value, str) and value else "none"


def _ramped(value: object) -> bool:
    """Whether a trial's ``batch_ramp`` param names stages (studies before ramps lack it)."""
    return isinstance(value, str) and value not in ("", "none")


def _number(x: object) -> float | None:
    if x is None or x is pd.NA:
        return None
    try:
        v = float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _best(values: Sequence[float | None]) -> float | None:
    reached = [v for v in values if v is not None]
    return min(reached) if reached else None


def arm_label(rule: str, warmup: str, optimizer_rule: str = "none") -> str:
    """An arm of the advice: ``rule/warmup``, and ``/optimizer_rule`` where one is used (the
    arms of one lr and warmup rule under different optimizer rules are different recipes)."""
    return f"{rule}/{warmup}" + ("" if optimizer_rule == "none" else f"/{optimizer_rule}")


def _arms(trials: pd.DataFrame) -> list[Arm]:
    names = sorted({(r, w, o) for r, w, o in zip(trials["rule"], trials["warmup"],
                                                  trials["optimizer_rule"], strict=True)})
    arms = []
    for rule, warmup, optimizer_rule in names:
        mine = ((trials["rule"] == rule) & (trials["warmup"] == warmup)
                & (trials["optimizer_rule"] == optimizer_rule))
        if warmup in MERGED_AT_REFERENCE:
            # the reference trial stands for every lr rule, every optimizer rule and for the
            # warmup rules that keep its warmup at the reference batch
            mine |= (trials["global_batch"] == trials["reference_global_batch"]) & trials[
                "warmup"].isin(MERGED_AT_REFERENCE)
        rows = trials[mine]
        updates: dict[float, float | None] = {}
        for batch, at in rows.groupby("global_batch"):
            per_config = []
            for _, seeds in at.groupby("config"):
                # the seeds' median, a seed that never reached counting as +inf (never dropped):
                # "never" once half or more never reach
                values = [math.inf if v is None or pd.isna(v) else float(v) for v in seeds["updates"]]
                med = statistics.median(values)
                per_config.append(med if math.isfinite(med) else None)
            updates[float(batch)] = _best(per_config)
        arms.append(Arm(arm_label(rule, warmup, optimizer_rule), updates))
    return arms


def _arm_fit(arm: Arm) -> ArmFit:
    f = arm.fit()
    if f is None:
        n = len(arm.reached())
        return ArmFit(arm, None, [f"reached the target at {n} batch size{'s' if n != 1 else ''}: "
                                  "no fit"])
    failed = [b for b, s in sorted(arm.updates.items()) if s is None]
    never = [f"never reached the target at batch {', '.join(f'{b:g}' for b in failed)}"] if failed else []
    return ArmFit(arm, f, never + judge(f))


def _late_noise_scale(study: Study, trials: pd.DataFrame) -> tuple[float | None, int, int]:
    ok = set(trials.loc[~trials[STATUS_TAG].isin(["diverged", "failed"]), "run_id"])
    return late_noise_scale(study, ok)


def late_noise_scale(study: Study, run_ids: set[str]) -> tuple[float | None, int, int]:
    """Median of noise_scale over the last half of the updates of the trials ``run_ids`` (the
    caller leaves diverged and failed ones out): (median, points, trials used)."""
    hist = study.history
    if "noise_scale" not in hist:
        return None, 0, 0
    values: list[float] = []
    used = 0
    for _, rows in hist[hist["run_id"].isin(run_ids)].groupby("run_id"):
        rows = rows[rows["noise_scale"].notna()]
        if rows.empty:
            continue
        late = rows[rows["step"] >= LATE_FRACTION * rows["step"].max()]
        finite = [float(v) for v in late["noise_scale"] if math.isfinite(v) and v > 0]
        if finite:
            values += finite
            used += 1
    if not values:
        return None, 0, 0
    return float(pd.Series(values).median()), len(values), used


# -- text ------------------------------------------------------------------------------------


def _g(x: float | None, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:.{digits}g}"


def render(advice: Advice) -> str:
    a = advice
    lines = [
        f"study {a.experiment} (parent run {a.parent_run_id}): target {a.target}",
        "",
        "updates to target by global batch (best setting per arm and batch, median over seeds, never = +inf;"
        " — never reached), and S = S_min (1 + B_crit / B) fitted in 1/B:",
    ]
    head = ["arm", *(f"B={b:g}" for b in a.batches), "S_min", "B_crit", "R²", "batches",
            "residuals"]  # fmt: skip
    rows = []
    for af in a.arms:
        f = af.fit
        cells = [af.arm.name, *(_g(af.arm.updates.get(b), 5) for b in a.batches)]
        if f is None:
            cells += ["—"] * 5
        else:
            cells += [_g(f.s_min), _g(f.b_crit), f"{f.r2:.3f}", str(f.n_batches),
                      " ".join(f"{r:+.1%}" for r in f.residuals)]
        rows.append(cells)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    for af in a.arms:
        for problem in af.problems:
            lines.append(f"  ! {af.arm.name}: {problem}")
    lines.append("")
    env = a.envelope
    if a.noise_scale is None:
        lines.append("gradient noise scale: not measured (it needs world_size > 1; studies run "
                     "before it existed have none)")
    else:
        lines.append(f"gradient noise scale B_simple: {a.noise_scale:.4g} samples (median of "
                     f"{a.noise_points} late-training evaluations of {a.noise_trials} trials)")
        if env.fit is not None and not env.problems and math.isfinite(env.fit.b_crit):
            ratio = env.fit.b_crit / a.noise_scale
            lines.append(f"  B_crit ({BEST}) = {env.fit.b_crit:.4g} = {ratio:.2g} x B_simple "
                         "(McCandlish et al.: they agree only roughly, often within an order of "
                         "magnitude; B_simple ignores curvature)")
        else:
            lines.append(f"  B_crit ({BEST}) cannot be compared with it: the fit is not "
                         "trustworthy (see above)")
    lines.append("")
    lines += _decided_lines(a)
    rec = a.recommendation
    where = (f"world size {a.world_size} (global batch {a.target_batch:g} = {a.world_size} x "
             f"{a.samples_per_batch_per_worker})")
    if rec.arm is None:
        lines.append(f"no recommendation for {where}: the data cannot support one.")
        lines += [f"  - {reason}" for reason in rec.reasons]
    else:
        assert rec.updates is not None
        rule, warmup, *optimizer = rec.arm.split("/")
        optimizer_rule = optimizer[0] if optimizer else "none"
        how = "measured" if rec.measured else "predicted by the fit"
        lines.append(f"recommendation for {where}: lr rule {rule}, warmup rule {warmup}"
                     + ("" if optimizer_rule == "none" else f", optimizer rule {optimizer_rule}"))
        epochs = a.epochs(rec.updates)
        text = f"  {how}: {rec.updates:.4g} updates, ≈ {epochs:.3g} epochs to target"
        if a.projection is not None:
            label, seconds = a.projection
            text += f"; projected ≈ {epochs * seconds / 3600:.3g} h (from {label})"
        lines.append(text)
        lines += _pick_lines(a, rule, warmup, optimizer_rule) if rec.measured else []
        lines += [f"  (not considered: {reason})" for reason in rec.reasons]
    return "\n".join(lines)


def _pick_lines(a: Advice, rule: str, warmup: str, optimizer_rule: str = "none") -> list[str]:
    """The measured pick's own decision and interval against the baseline, and whether it is
    resolved against the arm ranked best: its median alone does not tell."""
    mine = [arm for arm in a.decided if str(arm.axes.get("scaling_rule")) == rule
            and str(arm.axes.get("warmup_rule")) == warmup
            and _optimizer_rule(arm.axes.get("optimizer_rule")) == optimizer_rule]
    if not mine:
        return []
    arm = mine[0]
    mi = None if arm.epochs_ratio is None else arm.epochs_ratio.ratios
    lines = [f"  its arm {arm.arm}: {arm.answer} against the baseline, epochs ratio "
             f"{median_text(mi)} {interval_text(mi)}"]
    if arm.answer == "not resolved":
        lines.append("  the pick is not resolved against the baseline: the data do not show it "
                     "as fast; more seeds would tell (adaptive replicates)")
    alike = [other.arm for other in a.decided if other is not arm and _overlap(arm, other)]
    why = ("it has no interval (one seed)" if mi is None or mi.ci is None
           else "their intervals overlap")
    if alike:
        lines.append(f"  the pick is not resolved against {', '.join(alike)}: {why}, so the data "
                     "do not tell which converges faster")
    best = a.decided[0]
    if best is not arm and not _overlap(arm, best):
        lines.append(f"  {best.arm}, ranked first by decision and interval, is apart from this "
                     "pick: their intervals do not overlap")
    return lines


def _decided_lines(a: Advice) -> list[str]:
    """The measured arms at the advised world size, ranked, and whether the first one is
    resolved against the baseline and apart from the next."""
    if not a.decided:
        return []
    lines = [f"arms measured at world size {a.world_size} against their baseline, best first (by "
             "decision, then the epochs ratio interval's upper end):"]
    for i, arm in enumerate(a.decided, start=1):
        mi = None if arm.epochs_ratio is None else arm.epochs_ratio.ratios
        lines.append(f"  {i}. {arm.arm}: {arm.answer}, epochs ratio {median_text(mi)} "
                     f"{interval_text(mi)}")
    pick = a.decided[0]
    if pick.answer == "not resolved":
        lines.append(f"  the first, {pick.arm}, is not resolved against the baseline: no measured arm "
                     "is shown as fast as it")
    if len(a.decided) > 1 and _overlap(pick, a.decided[1]):
        lines.append(f"  {pick.arm} is not resolved against {a.decided[1].arm}: their intervals overlap, "
                     "so the data do not tell which converges faster")
    lines.append("")
    return lines


def _overlap(one: ArmSummary, other: ArmSummary) -> bool:
    first = None if one.epochs_ratio is None else one.epochs_ratio.ratios.ci
    second = None if other.epochs_ratio is None else other.epochs_ratio.ratios.ci
    if first is None or second is None:
        return True
    return first[0] <= second[1] and second[0] <= first[1]
