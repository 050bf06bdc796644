"""Seeds as replicates and crossings the evaluations cannot resolve, end to end: a real sweep
on a local Ray into a real MLflow sqlite store, through `run`'s tables, the summary JSON and the
report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import RayHead
from tests.support.helpers import SWEEPS, scalesweep

pytestmark = pytest.mark.slow
SMOKE = str(SWEEPS / "smoke.yaml")


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory: pytest.TempPathFactory, ray_head: RayHead) -> tuple[Path, str]:
    cwd = tmp_path_factory.mktemp("seeds")
    # 3 epochs of smoke's 6: every trial still crosses its target between two evaluations
    proc = scalesweep("run", SMOKE, "--set", "axes.seed=[0, 1]", "--set",
                      "axes.scaling_rule=[none, linear]", "--set", "training.epochs=3",
                      "--summary-json", "s.json",
                      *ray_head.args(), cwd=cwd, **ray_head.env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return cwd, proc.stdout


def test_every_pair_of_seeds_is_measured_against_one_cross_fitted_target(two_seeds: tuple[Path, str]
                                                                         ) -> None:
    cwd, _ = two_seeds
    trials = json.loads((cwd / "s.json").read_text())
    assert len(trials) == 6  # ws2 baseline, ws4 none and linear, two seeds each
    # each seed's trials share one target, set by the other baseline seed (docs/design.md §4)
    by_seed = {s: {t["target_value"] for t in trials if t["name"].endswith(f"-s{s}")} for s in (0, 1)}
    assert all(len(targets) == 1 for targets in by_seed.values()), by_seed
    assert {t["arm"] for t in trials} == {"ws2-warmup20-none", "ws4-warmup20-none",
                                         "ws4-warmup20-linear"}
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    for t in trials:
        run = client.get_run(t["mlflow_run_id"])
        assert run.data.params["arm"] == t["arm"]
        assert run.data.params["baseline_arm"] == "ws2-warmup20-none"
        assert run.data.metrics["target_value"] == t["target_value"]
        # the target is the logged reference best loosened by relative_to_baseline (0.10)
        assert t["target_value"] == pytest.approx(run.data.metrics["target_reference_best"] * 1.1)
        assert run.data.tags["crossing"] == t["crossing"] == "interpolated"
        # the crossing lies between the evals logged around it
        assert t["epochs_to_target_lo"] <= t["epochs_to_target"] <= t["epochs_to_target_hi"]
        assert run.data.metrics["epochs_to_target_hi"] == t["epochs_to_target_hi"]


def test_run_report_and_summary_agree_on_the_arms(two_seeds: tuple[Path, str]) -> None:
    cwd, stdout = two_seeds
    assert "epochs ratio vs baseline" in stdout and "not resolved with 2 seeds" in stdout
    arms = {a["arm"]: a for a in json.loads((cwd / "reports/smoke/arms.json").read_text())}
    trials = json.loads((cwd / "s.json").read_text())
    for name, arm in arms.items():
        assert arm["n_seeds"] == 2 and arm["n_reached"] == 2
        mine = sorted(t["epochs_to_target"] for t in trials if t["arm"] == name)
        assert arm["epochs_to_target_median"] == pytest.approx(sum(mine) / 2, rel=1e-9)
        # 2 seeds: [min, max] read off the brackets, 50 % coverage, never a resolved claim
        assert arm["epochs_to_target_ci_coverage"] == 0.5
        lows = [t["epochs_to_target_lo"] for t in trials if t["arm"] == name]
        assert arm["epochs_to_target_ci"][0] == min(lows)
        assert arm["resolved_vs_baseline"] is False
    html = (cwd / "reports/smoke/report.html").read_text(encoding="utf-8")
    assert "The answer: each arm against the baseline" in html and "not resolved with 2 seeds" in html


def test_a_target_met_at_the_first_eval_is_a_bound(tmp_path: Path, ray_head: RayHead) -> None:
    # one epoch: the target is met at the first evaluation (0.5 epochs), whatever follows
    proc = scalesweep("run", SMOKE, "--set", "axes.scaling_rule=[none]", "--set",
                      "target={metric: dev_loss, value: 100.0}", "--set", "training.epochs=1",
                      "--summary-json", "s.json",
                      *ray_head.args(), cwd=tmp_path, **ray_head.env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "reached the target at their first evaluation" in proc.stdout
    assert "evaluate more often (training.eval_every_epochs)" in proc.stdout
    for t in json.loads((tmp_path / "s.json").read_text()):
        assert t["crossing"] == "at_first_eval"
        assert t["epochs_to_target"] is None and t["updates_to_target"] is None
        assert t["epochs_to_target_lo"] == 0.0 and t["epochs_to_target_hi"] == pytest.approx(0.5, abs=0.02)
        assert t["speedup_vs_baseline"] is None and t["scaling_efficiency"] is None
        assert f"≤ {t['updates_to_target_hi']:.4g}" in proc.stdout
    html = (tmp_path / "reports/smoke/report.html").read_text(encoding="utf-8")
    assert "reached the target at their first evaluation" in html
    assert "training.eval_every_epochs" in html and "ws2-warmup20-none" in html
    arms = json.loads((tmp_path / "reports/smoke/arms.json").read_text())
    assert {a["epochs_to_target_median_kind"] for a in arms} == {"at_most"}
    ratio = next(a for a in arms if a["arm"] != a["baseline_arm"])
    assert ratio["epochs_ratio_vs_baseline_median_kind"] != "value"  # a bound over a bound
    assert ratio["resolved_vs_baseline"] is False
