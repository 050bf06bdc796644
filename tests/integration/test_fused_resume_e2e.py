"""A fused trial that dies is retried by Tune from its seeds' checkpoints (docs/design.md,
"Fused seeds"): `scalesweep run` on a real Ray into a real MLflow store, one arm's two seeds in
one trial (resources.seeds_per_trial 2, float64), whose process raises at its 5th evaluation
(tests.support.fail_once_workload: update 96's, after the checkpoints at updates 32 and 64).

The retry builds both seeds' models and evaluates only updates 96 and 128 (from update 0 it
would evaluate all four); each seed's run has every step once, ends completed, and every
metric at every step equals its solo trial's uninterrupted run (the loop, in this process)
to 1e-6."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from scalesweep.orchestrator.plan.rows import make_plan
from scalesweep.orchestrator.spec.load import load_sweep
from scalesweep.trainables import loop, trial_driver
from scalesweep.trainables.world import LocalWorld
from tests.conftest import RayHead
from tests.support.fail_once_workload import tries
from tests.support.helpers import ROOT, SWEEPS, scalesweep

pytestmark = pytest.mark.slow
SMOKE = str(SWEEPS / "smoke.yaml")
RTOL = 1e-6
#: the metrics compared; the clocks (wall_s) are the machine's
COMPARED = ("train_loss", "dev_loss", "lr", "noise_scale", "samples_seen", "epoch", "global_batch")
#: one arm at world size 2: 128 updates (2 epochs of 64), an eval and a checkpoint every 32
SETS = ["axes.world_size=[2]", "axes.scaling_rule=[none]", "axes.seed=[0, 1]", "training.epochs=2",
        "training.dtype=float64", "training.checkpoint_every=32", "resources.seeds_per_trial=2",
        "max_failures=1"]


def _histories(db: Path) -> dict[str, tuple[str | None, dict[str, list[tuple[int, float]]]]]:
    """Each seed's run: its status tag and each compared metric's history, in step order."""
    client = MlflowClient(f"sqlite:///{db}")
    experiment = client.get_experiment_by_name("smoke")
    assert experiment is not None
    out = {}
    for run in client.search_runs([experiment.experiment_id]):
        if run.data.tags.get("scalesweep.role") != "trial":
            continue
        out[run.info.run_name] = (run.data.tags.get("status"), {
            key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
            for key in COMPARED})
    return out


def _solo(sets: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Each seed's solo trial run whole by the loop (no Ray): its reports."""
    reports: dict[str, list[dict[str, Any]]] = {}
    for row in make_plan(load_sweep(SMOKE, sets)).rows:
        got: list[dict[str, Any]] = []

        def on_report(metrics: dict[str, Any], _: str | None, got: list[dict[str, Any]] = got) -> None:
            got.append(metrics)

        loop.train(row.trial, LocalWorld(), on_report=on_report)
        reports[row.name] = got
    return reports


def test_a_fused_trial_tune_retries_goes_on_from_its_seeds_checkpoints(
        tmp_path: Path, ray_head: RayHead) -> None:
    log_dir = tmp_path / "faults"
    log_dir.mkdir()
    sets = [*SETS, f"workload={{name: 'tests.support.fail_once_workload:make', "
                   f"options: {{log_dir: '{log_dir}', fail_at_eval: 5}}}}"]
    proc = scalesweep("run", "--no-report", SMOKE, *[a for s in sets for a in ("--set", s)],
                      *ray_head.args(), cwd=tmp_path, PYTHONPATH=str(ROOT), **ray_head.env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "retrying ws2-warmup20-none-seeds0+1" in proc.stdout, proc.stdout
    # the try that died evaluated updates 32, 64 and (seed 0) 96; the retry 96 and 128 only
    assert tries(log_dir) == [([0, 1], 5), ([0, 1], 4)]

    runs = _histories(tmp_path / "mlflow.db")
    solo = _solo(sets)
    assert sorted(runs) == sorted(solo) == ["ws2-warmup20-none-s0", "ws2-warmup20-none-s1"]
    for name, (status, metrics) in runs.items():
        assert status == "completed", name
        assert [s for s, _ in metrics["dev_loss"]] == [32, 64, 96, 128], f"{name}: a step twice or missing"
        for key in COMPARED:
            want = [(r["update"], float(r[key])) for r in solo[name] if key in r]
            assert [s for s, _ in metrics[key]] == [s for s, _ in want], f"{name} {key}"
            for (step, got), (_, value) in zip(metrics[key], want, strict=True):
                assert got == pytest.approx(value, rel=RTOL, abs=1e-12), f"{name} {key} @ {step}"

    # what a retry would find now: every seed's checkpoint at its end, so nothing to train
    sweep_dir = next(tmp_path.rglob("tune")).parent
    names = {0: "ws2-warmup20-none-s0", 1: "ws2-warmup20-none-s1"}
    found = trial_driver.fused_checkpoints(names, None, sweep_dir)
    assert sorted(found) == [0, 1] and trial_driver.fused_groups(found, [0, 1]) == []
