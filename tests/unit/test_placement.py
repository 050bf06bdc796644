"""Placement apart from the plan's arithmetic (plan/placement.py): `run` plans once on this
machine, to refuse bad input before Ray starts, then places the same rows on the cluster it
connected to. Placed again, a plan is the plan made on that cluster from the start, and no
schedule is judged a second time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scalesweep.orchestrator.plan.cluster import ClusterInfo
from scalesweep.orchestrator.plan.rows import make_plan, place
from scalesweep.orchestrator.spec.load import load_sweep

ROOT = Path(__file__).resolve().parents[2]
LAPTOP = ClusterInfo(cpus=2, gpus=0, memory_gb=24, where="test machine")
GPU_BOX = ClusterInfo(cpus=64, gpus=16, memory_gb=512, where="gpu cluster")
SMALL = ClusterInfo(cpus=3, gpus=1, memory_gb=8, where="small cluster")
SHIPPED = sorted(p.name for p in (ROOT / "sweeps").glob("*.yaml"))


def _table(plan: Any) -> list[tuple[dict[str, Any], dict[str, Any], bool, str | None]]:
    return [(r.to_json(), r.trial.model_dump(mode="json"), r.feasible, r.reason) for r in plan.rows]


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("sets", [[], ["resources.gpus_per_worker=1"]], ids=["cpu", "gpu"])
def test_a_plan_placed_again_is_the_plan_made_there(name: str, sets: list[str]) -> None:
    sweep = load_sweep(ROOT / "sweeps" / name, sets)
    plan = make_plan(sweep, LAPTOP)
    for cluster in (GPU_BOX, SMALL, LAPTOP):  # and back: a note replaced, never piled up
        assert _table(place(plan, cluster)) == _table(make_plan(sweep, cluster)), cluster.where
        assert plan.cluster == cluster


def test_placing_on_gpus_turns_auto_into_ddp_and_says_so_once() -> None:
    sweep = load_sweep(ROOT / "sweeps" / "smoke.yaml", ["backend=auto", "resources.gpus_per_worker=1"])
    plan = make_plan(sweep, LAPTOP)
    assert {r.backend for r in plan.rows} == {"simulate"}
    place(plan, GPU_BOX)
    for row in plan.rows:
        assert (row.backend, row.trial.backend, row.trial.use_gpu) == ("ddp", "ddp", True)
        assert row.physical_workers == row.world_size and row.feasible
        assert [n for n in row.notes if n.startswith("backend auto")] == [
            "backend auto -> ddp (gpu cluster has 16 GPUs)"]


def test_placing_judges_no_schedule_and_no_optimizer(monkeypatch: pytest.MonkeyPatch) -> None:
    from scalesweep.science import optimizers
    from scalesweep.science.schedules import _spec

    plan = make_plan(load_sweep(ROOT / "sweeps" / "wenet_4v16.yaml", []), LAPTOP)
    judged: list[str] = []
    real_problems, real_validate = _spec.problems, optimizers.validate

    def problems(*args: Any, **kwargs: Any) -> Any:
        judged.append("schedule")
        return real_problems(*args, **kwargs)

    def validate(*args: Any, **kwargs: Any) -> Any:
        judged.append("optimizer")
        return real_validate(*args, **kwargs)

    monkeypatch.setattr(_spec, "problems", problems)
    monkeypatch.setattr(optimizers, "validate", validate)
    place(plan, GPU_BOX)
    assert judged == []
    make_plan(plan.sweep, GPU_BOX)  # the guard sees a judgement where there is one
    assert "schedule" in judged and "optimizer" in judged
