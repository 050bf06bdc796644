"""One MLflow contract (docs/design.md §4.5): the tag, param and summary-metric names of
``scalesweep/mlflow_names.py`` are written nowhere else in the package as a key (a dict key, a
subscript, the key of ``.get``/``.pop``/``.setdefault``), and every key the loop reports
reaches MLflow or the driver's summary, none dropped by the tracker's filter."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from scalesweep import mlflow_names

ROOT = Path(__file__).resolve().parents[2] / "scalesweep"
#: names checked as literals; the curve metrics are not, as "lr", "epoch" or "global_batch" are
#: also config keys (they are pinned by the loop report test below instead)
CHECKED = {v for k, v in vars(mlflow_names).items()
           if k.endswith(("_TAG", "_PARAM", "_KEY", "_METRIC")) and isinstance(v, str) and k != "ERROR_TAG"}
# ("error" is also the key of the cluster probes' JSON, nothing of MLflow's)
CHECKED |= {*mlflow_names.SUMMARY_METRICS, *mlflow_names.BRACKETS, mlflow_names.TARGET_METRIC}
KEY_METHODS = ("get", "pop", "setdefault")
#: modules that edit a sweep file as a dict: a key there is the sweep file's field, which some
#: MLflow params share by name (``replicates``), not the MLflow name
SWEEP_FIELDS = {"orchestrator/plan/verify_sweep.py": {"replicates"},
                "orchestrator/plan/solve_plan.py": {"replicates"}}


def _key_literals(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[ast.expr | None] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            found += node.keys
        elif isinstance(node, ast.Subscript):
            found.append(node.slice)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in KEY_METHODS and node.args):
            found.append(node.args[0])
    return [(n.lineno, n.value) for n in found
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in CHECKED]


def _offenders(source: dict[str, str]) -> list[str]:
    return [f"{rel}:{line}: {name!r}" for rel, text in sorted(source.items())
            if rel != "mlflow_names.py"
            for line, name in _key_literals(ast.parse(text))
            if name not in SWEEP_FIELDS.get(rel, set())]


def _package() -> dict[str, str]:
    return {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8")
            for p in ROOT.rglob("*.py")}


def test_the_contract_names_are_written_nowhere_else() -> None:
    assert len(CHECKED) > 20
    assert _offenders(_package()) == []


def test_a_planted_literal_is_caught() -> None:
    source = _package()
    source["orchestrator/tracking/tracker.py"] += '\nTAGS = {"crossing": 1}\nX = TAGS.get("status")\n'
    assert [o.split(": ")[1] for o in _offenders(source)] == ["'crossing'", "'status'"]


def test_a_real_loop_report_loses_nothing_to_the_trackers_filter() -> None:
    from scalesweep.orchestrator.tracking.callback import kept
    from scalesweep.orchestrator.tracking.tracker import curve_metrics
    from scalesweep.trainables.config import TrialConfig
    from scalesweep.trainables.loop import train
    from scalesweep.trainables.world import LocalWorld

    reports: list[dict[str, Any]] = []
    config = TrialConfig(name="t", workload="mlp_regression", world_size=2, physical_workers=1,
                         per_worker_batch=8,
                         workload_options={"train_size": 64, "dev_size": 32},
                         optimizer={"type": "sgd", "lr": 0.05, "momentum": 0.9},
                         scheduler={"type": "constant"}, total_updates=4, eval_every=2)
    train(config, LocalWorld(), on_report=lambda m, d: reports.append(m))
    assert reports
    # the step, the status tag and the final report's training time go to MLflow apart from
    # the curves; every other key must be a curve metric the tracker sends
    apart = {mlflow_names.STEP_KEY, mlflow_names.STATUS_TAG, mlflow_names.TRAIN_SECONDS_METRIC}
    for report in reports:
        assert set(kept(report)) == set(report)  # the callback keeps every key for the summary
        assert set(report) - set(curve_metrics(report)) <= apart, report
    assert {"noise_scale", "dev_loss", "lr"} <= set(reports[0])  # a report with V > 1's keys
