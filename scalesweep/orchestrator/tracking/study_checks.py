"""What ``run`` says at the end beside its tables: whether the baseline arm plateaued (the
study's ``plateau:`` rule) and, with ``curtail: true``, the trial-epochs curtailment saved.
The report says the same from MLflow (:mod:`scalesweep.dashboards.study_checks`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scalesweep.mlflow_names import DEV_PREFIX
from scalesweep.orchestrator.plan.rows import Plan, PlanRow
from scalesweep.orchestrator.spec.load import Sweep
from scalesweep.orchestrator.tracking.summary import points
from scalesweep.science.stats import curtail
from scalesweep.science.stats.convergence import Mode
from scalesweep.science.stats.plateau import Plateau, check_plateau


def direction(sweep: Sweep, metric: str) -> Mode:
    """Which way ``metric`` improves: train_loss down, a dev metric as its workload says."""
    if metric == "train_loss":
        return "min"
    return "max" if sweep.workload.metrics.get(metric.removeprefix(DEV_PREFIX)) == "max" else "min"


def plateau_setting(sweep: Sweep) -> dict[str, Any]:
    """The plateau rule as the parent run's param: its metric resolved, with its direction."""
    spec = sweep.spec
    metric = spec.plateau.metric or spec.target.metric
    return {"metric": metric, "mode": direction(sweep, metric), "last_share": spec.plateau.last_share,
            "min_improvement": spec.plateau.min_improvement}


def plateaus(plan: Plan, curves: Mapping[str, Sequence[Mapping[str, Any]]], rows: Sequence[PlanRow]
             ) -> dict[str, Plateau | None]:
    """Baseline arm -> the check on its seeds that ran (None: too few evals to judge)."""
    rule = plateau_setting(plan.sweep)
    base_arms: dict[str, list[PlanRow]] = {}
    for row in rows:
        base = plan.baseline_for(row)
        if base is not None and base.name == row.name:
            base_arms.setdefault(row.arm, []).append(row)
    return {arm: check_plateau([points(curves.get(r.name, []), rule["metric"]) for r in seeds],
                               rule["mode"], metric=rule["metric"], last_share=rule["last_share"],
                               min_improvement=rule["min_improvement"],
                               smoothing=plan.sweep.spec.target.smoothing)
            for arm, seeds in base_arms.items()}


def curtail_saving(plan: Plan, curves: Mapping[str, Sequence[Mapping[str, Any]]],
                   rows: Sequence[PlanRow], statuses: Mapping[str, str]) -> curtail.Saving:
    """Trial-epochs trained against every trial run to its end: a ``stopped`` trial would have
    run its plan's epochs; any other trained what it trained either way (a diverged one too)."""
    trained = []
    for row in rows:
        logged = curves.get(row.name, [])
        done = float(logged[-1]["epoch"]) if logged else 0.0
        trained.append((done, row.epochs if statuses.get(row.name) == "stopped" else done))
    return curtail.saving(trained)


def end_lines(plan: Plan, curves: Mapping[str, Sequence[Mapping[str, Any]]], rows: Sequence[PlanRow],
              statuses: Mapping[str, str]) -> list[str]:
    """The lines ``run`` prints after its tables."""
    out = []
    for arm, check in sorted(plateaus(plan, curves, rows).items()):
        out.append(f"{arm}: " + (check.text() if check is not None
                                 else "plateau not judged: the baseline has fewer than 2 evals"))
    if plan.sweep.spec.curtail:
        out.append(curtail_saving(plan, curves, rows, statuses).text())
    return out

