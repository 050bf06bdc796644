"""`scalesweep recommend`'s inputs, read from a finished study in MLflow (docs/beyond.md,
"recommend"), and the science's recipe at M made from them.

What the study gives :func:`scalesweep.science.recommend.recipe.recommend`:

* the optimizer's family: the trials' ``optimizer`` param (its type; ``optimizer.type`` where
  an axis set it), Adam-style or SGD;
* the reference: its global batch, the baseline arm's lr and warmup (``lr``, ``warmup_steps``);
* N: the world size the study ran, other than the reference's, whose global batch is nearest
  M's (in log; the larger on a tie);
* the lr arms at N: each arm there is an lr factor (its lr over the baseline's) with one paired
  epochs ratio per seed (its epochs to target over the baseline arm's on that seed; a seed that
  never reached is +inf, one whose baseline never reached has no ratio). The arms fitted are
  those sharing one warmup rule and other settings: the samples rule's (``scaled``) where it ran,
  and of those settings the one with the most lr factors; two arms at one factor (``sqrt`` and
  ``sqrt_adam``) keep the one with the lower median ratio;
* the warmup arms: at the lr factor nearest the recipe's factor at N among those that ran the
  samples rule beside another (``fixed``), each rule's paired ratios;
* the tuned epochs: the baseline's seeds at the reference, the seeds of the arm with the fewest
  median epochs at N (the epochs ratio is against it);
* the late-training noise scale, as `predict` reads it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scalesweep.dashboards.convergence_table import StudyTrial, study_trials
from scalesweep.dashboards.mlflow_data import Study, load_study
from scalesweep.dashboards.prediction import (
    global_batch_at,
    measured_noise_scale,
    param_number,
    trial_epochs,
    usable_trials,
)
from scalesweep.mlflow_names import BASELINE_ARM_PARAM
from scalesweep.science import scaling
from scalesweep.science.prediction.epochs import BatchPoint
from scalesweep.science.recommend.lr_evidence import LrArm
from scalesweep.science.recommend.lr_models import LrModel, model_for
from scalesweep.science.recommend.recipe import lr_at, recommend
from scalesweep.science.recommend.recommendation import LrEvidence, Recommendation
from scalesweep.science.recommend.warmup import CARRIED_RULES, SAMPLES_RULE

#: the params that say which optimizer a trial ran (the runner's, then an axis's)
OPTIMIZER_PARAMS = ("optimizer", "optimizer.type")
#: the params an arm's lr and its warmup are read from, not compared as its other settings
_LR_AND_WARMUP = ("scaling_rule", "lr", "base_lr", "peak_lr", "optimizer.lr", "warmup_steps",
                  "warmup_epochs", "warmup_rule")


class RecommendRefused(ValueError):
    """The study cannot support a recommendation; ``reasons`` say why, by name."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__("; ".join(reasons))
        self.reasons = reasons


@dataclass(frozen=True, kw_only=True)
class _Arm:
    """One arm at N: its settings and each seed's epochs to target."""

    name: str
    factor: float
    warmup_rule: str
    others: tuple[tuple[str, str], ...]  # its settings besides lr and warmup
    epochs: Mapping[int, float]
    trials: tuple[StudyTrial, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.epochs.values())


def _rule_factor(rule: object, batch: float, reference_batch: float) -> float | None:
    """The lr factor of a ``scaling_rule`` param (a name, or an explicit factor)."""
    value = param_number(rule)
    try:
        return scaling.lr_factor(value if value is not None else str(rule), int(batch),
                                 int(reference_batch))
    except ValueError:
        return None


def _lr(t: StudyTrial) -> float | None:
    """The lr the trial ran (after its rule): ``lr``, else its rule's factor times its base lr."""
    p = t.run
    lr = param_number(p.get("lr"))
    if lr is not None:
        return lr
    base = param_number(p.get("base_lr"))
    if base is None:
        base = param_number(p.get("optimizer.lr"))
    batch, ref = param_number(p.get("global_batch")), param_number(p.get("reference_global_batch"))
    if base is None or batch is None or ref is None:
        return None
    factor = _rule_factor(p.get("scaling_rule"), batch, ref)
    return None if factor is None else base * factor


def family_of(trials: Sequence[StudyTrial]) -> LrModel:
    """The lr model of the optimizer the trials ran (one type for all, else refused)."""
    types = {next((str(t.run[k]) for k in OPTIMIZER_PARAMS if _has(t.run, k)), "") for t in trials}
    types.discard("")
    if len(types) != 1:
        raise RecommendRefused([
            "the study logged no optimizer type (param optimizer): the lr model cannot be chosen"
            if not types else f"the study ran several optimizer types ({', '.join(sorted(types))}): "
            "one lr model cannot serve them"])
    return model_for(types.pop())


def _has(p: Mapping[str, object], key: str) -> bool:
    v = p.get(key)
    return v is not None and str(v) not in ("", "nan", "None")


def _settings(t: StudyTrial) -> tuple[tuple[str, str], ...]:
    p = t.run
    return tuple((k, str(p[k])) for k in sorted(p) if _has(p, k) and k not in _LR_AND_WARMUP
                 and (k.startswith(("optimizer.", "scheduler.")) or k == "optimizer_rule"))


def _arms_at(trials: Sequence[StudyTrial], batch: float, reference_lr: float | None,
             reference_batch: float) -> list[_Arm]:
    by: dict[str, list[StudyTrial]] = {}
    for t in trials:
        if param_number(t.run["global_batch"]) == batch:
            by.setdefault(t.summary.arm, []).append(t)
    arms = []
    for name, members in by.items():
        lr = _lr(members[0])
        if reference_lr is not None and lr is not None:
            factor = lr / reference_lr
        else:  # no lr logged: the rule's own factor
            rule_factor = _rule_factor(members[0].run.get("scaling_rule"), batch, reference_batch)
            if rule_factor is None:
                continue
            factor = rule_factor
        epochs = {t.summary.seed: e for t in members if (e := trial_epochs(t)) is not None and e > 0}
        if not epochs:
            continue
        arms.append(_Arm(name=name, factor=factor, warmup_rule=str(members[0].run.get("warmup_rule")),
                         others=_settings(members[0]), epochs=epochs, trials=tuple(members)))
    return sorted(arms, key=lambda a: (a.factor, a.name))


def _paired(arm: _Arm, baseline: Mapping[int, float]) -> dict[int, float]:
    """Per seed, the arm's epochs over the baseline's (seeds whose baseline never reached, or
    that the baseline did not run, have none)."""
    return {s: e / baseline[s] for s, e in sorted(arm.epochs.items())
            if s in baseline and math.isfinite(baseline[s])}


def _lr_group(arms: Sequence[_Arm]) -> list[_Arm]:
    """The arms the bowl is fitted to (module docs)."""
    groups: dict[tuple[str, tuple[tuple[str, str], ...]], list[_Arm]] = {}
    for a in arms:
        groups.setdefault((a.warmup_rule, a.others), []).append(a)
    key = max(groups, key=lambda k: (k[0] == SAMPLES_RULE, len({a.factor for a in groups[k]}),
                                     -len(k[1])))
    one: dict[float, _Arm] = {}
    for a in groups[key]:
        if a.factor not in one or a.median < one[a.factor].median:
            one[a.factor] = a
    return [one[f] for f in sorted(one)]


def _warmup_arms(arms: Sequence[_Arm], baseline: Mapping[int, float], factor_n: float
                 ) -> tuple[float | None, dict[str, dict[int, float]] | None]:
    by: dict[float, dict[str, _Arm]] = {}
    for a in arms:
        if a.warmup_rule in CARRIED_RULES:
            by.setdefault(a.factor, {}).setdefault(a.warmup_rule, a)
    both = [f for f, rules in by.items() if SAMPLES_RULE in rules and len(rules) > 1]
    if not both:
        return None, None
    f = min(both, key=lambda x: (abs(math.log(x / factor_n)), x))
    return f, {rule: _paired(a, baseline) for rule, a in sorted(by[f].items())}


def recommend_study(study: Study, world_size: int, confidence: float = 0.90) -> Recommendation:
    """The recipe at ``world_size`` from ``study`` (module docs); raises
    :class:`RecommendRefused` where the study cannot support one."""
    name = study.experiment_name
    trials = usable_trials(study_trials(study))
    if not trials:
        raise RecommendRefused([f"study {name!r} has no trial with a fixed global batch"])
    family = family_of(trials)
    base_arms = {str(t.run.get(BASELINE_ARM_PARAM)) for t in trials} - {"None", "nan", ""}
    if len(base_arms) != 1:
        raise RecommendRefused([f"study {name!r} names {len(base_arms)} baseline arms "
                                f"({', '.join(sorted(base_arms)) or 'none'}): one is needed"])
    base_name = base_arms.pop()
    base_trials = [t for t in trials if t.summary.arm == base_name]
    if not base_trials:
        raise RecommendRefused([f"study {name!r} has no trial of its baseline arm {base_name!r}"])
    base_run = base_trials[0].run
    reference_batch = param_number(base_run.get("global_batch"))
    reference_ws = param_number(base_run.get("world_size"))
    assert reference_batch is not None  # usable_trials keeps trials with a global batch
    warmup = param_number(base_run.get("warmup_steps"))
    if warmup is None:
        warmup = param_number(base_run.get("scheduler.warmup_steps"))
    if warmup is None:
        raise RecommendRefused([f"the baseline arm {base_name!r} logged no warmup_steps: the "
                                "warmup at M has nothing to scale"])
    reference_lr = _lr(base_trials[0])
    baseline = {t.summary.seed: e for t in base_trials if (e := trial_epochs(t)) is not None and e > 0}
    batch_m = global_batch_at(trials, world_size)
    others = sorted({b for t in trials if (b := param_number(t.run["global_batch"])) is not None
                     and b != reference_batch})
    if not others:
        raise RecommendRefused([f"study {name!r} ran only the reference's global batch "
                                f"({reference_batch:g}): no arm at a world size N to learn from"])
    batch_n = min(others, key=lambda b: (abs(math.log(b / batch_m)), -b))
    arms = _arms_at(trials, batch_n, reference_lr, reference_batch)
    if not arms:
        raise RecommendRefused([f"no arm at global batch {batch_n:g} has an epochs to target"])
    ws_n = int(param_number(arms[0].trials[0].run.get("world_size")) or 0)
    noise = measured_noise_scale(study, trials)
    fitted = _lr_group(arms)
    lr_arms = [LrArm(a.factor, r) for a in fitted if (r := _paired(a, baseline))]
    at_n = lr_at(family, batch_n, reference_batch, batch_n=batch_n, arms=lr_arms,
                 noise_scale=noise, confidence=confidence)
    w_factor, w_arms = _warmup_arms(arms, baseline, at_n.factor)
    best_n = min(arms, key=lambda a: (a.median, a.factor))
    recipe = recommend(family, reference_batch=reference_batch, batch_n=batch_n, batch_m=batch_m,
                       reference_warmup=warmup, arms=lr_arms, warmup_arms=w_arms,
                       reference_epochs=BatchPoint(reference_batch, tuple(baseline.values()))
                       if baseline else None,
                       n_epochs=BatchPoint(batch_n, tuple(best_n.epochs.values())),
                       noise_scale=noise, confidence=confidence)
    evidence = tuple(LrEvidence(arm=a.name, factor=a.factor, seeds=len(r),
                                median_ratio=statistics.median(r.values()))
                     for a in fitted if (r := _paired(a, baseline)))
    return Recommendation(
        experiment=name, parent_run_id=study.parent_run_id, target=study.target_value,
        family=family, reference_world_size=int(reference_ws or 0),
        reference_batch=reference_batch, reference_lr=reference_lr, reference_warmup=warmup,
        world_size_n=ws_n, batch_n=batch_n, world_size_m=world_size, batch_m=batch_m,
        noise_scale=noise, lr_arms=evidence, warmup_arms_factor=w_factor, n_arm=best_n.name,
        n_epochs_median=best_n.median, recipe=recipe,
        trial_run_ids=tuple(sorted(t.run_id for t in trials)))


def load_recommendation(tracking_uri: str, *, experiment: str | None, parent_run_id: str | None,
                        world_size: int) -> Recommendation:
    # a study's verification logs into the study's experiment; recommending reads the study
    study = load_study(tracking_uri, experiment=experiment, parent_run_id=parent_run_id,
                       skip_verifications=True)
    return recommend_study(study, world_size)
