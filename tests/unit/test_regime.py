"""A study's regime in dimensionless numbers beside its reference job's (scalesweep plan): the
WeNet job's numbers computed from its recipe, exactly, and carried by plan --json."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from scalesweep.orchestrator.plan.regime import format_regime, regimes
from scalesweep.orchestrator.plan.rows import make_plan
from scalesweep.orchestrator.spec.load import load_sweep
from tests.support.helpers import scalesweep

SWEEPS = Path(__file__).resolve().parents[2] / "sweeps"


def test_the_wenet_job_is_computed_from_its_recipe() -> None:
    plan = make_plan(load_sweep(str(SWEEPS / "wenet_4v16.yaml"), []))
    by_arm = {r.arm: regimes(plan)[r.name] for r in plan.rows}
    job4 = by_arm["ws4-warmup300-none"]["reference_job"]
    # 120098 utterances over 4 GPUs, 16 per GPU, accum_grad 4 (the recipe): 30025 per GPU
    assert job4["updates_per_epoch"] == 30025 // 64 == 469
    assert job4["total_updates"] == 469 * 240 and job4["warmup_updates"] == 25000
    assert job4["warmup_share"] == pytest.approx(25000 / (469 * 240))
    # WeNet's WarmupLR decays as step^-0.5 after its peak at the warmup
    assert job4["lr_end_over_peak"] == pytest.approx(math.sqrt(25000 / (469 * 240)), rel=1e-9)
    assert job4["samples_seen"] == 469 * 240 * 4 * 16 * 4
    job16 = by_arm["ws16-warmup19-none"]["reference_job"]
    # the blog's arm: the same fraction of the job's warmup as 19 is of the study's 300
    assert job16["updates_per_epoch"] == math.ceil(120098 / 16) // 64
    assert job16["warmup_updates"] == round(25000 * 19 / 300)
    assert by_arm["ws16-warmup75-linear"]["reference_job"]["warmup_updates"] == 25000 * 4 // 16
    study4 = by_arm["ws4-warmup300-none"]["study"]
    assert (study4["updates_per_epoch"], study4["total_updates"]) == (128, 512)
    assert study4["warmup_share"] == pytest.approx(300 / 512)
    assert study4["lr_end_over_peak"] == pytest.approx(math.sqrt(300 / 512), rel=1e-9)
    # the study's unchanged 16-worker arm ends still warming up, at 128/300 of the peak
    assert by_arm["ws16-warmup300-none"]["study"]["lr_end_over_peak"] == pytest.approx(128 / 300)
    lines = format_regime(plan)
    assert "reference job (WeNet AISHELL-1 conformer) / this study" in lines[0]
    assert "  ws4-warmup300-none: 469 / 128, 112560 / 512, 53.3 / 2.34, 22% / 59%, 0.47 / 0.77" in lines[1]


def test_plan_json_carries_the_regime(tmp_path: Path) -> None:
    done = scalesweep("plan", str(SWEEPS / "wenet_4v16.yaml"), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert all(set(r["regime"]) == {"study", "reference_job"} for r in rows)
    assert rows[0]["regime"]["reference_job"]["updates_per_epoch"] == 469
    smoke = json.loads(scalesweep("plan", str(SWEEPS / "smoke.yaml"), "--json", cwd=tmp_path).stdout)
    assert smoke[0]["regime"]["reference_job"] is None and smoke[0]["regime"]["study"]["total_updates"] > 0


def test_a_job_the_sweep_narrowed_past_is_unknown_there_not_refused() -> None:
    # a --set world size without GPUs, or a schedule whose warmup the recipe lacks, leaves the
    # job's regime unknown (—), and the sweep runs
    plan = make_plan(load_sweep(str(SWEEPS / "wenet_4v16.yaml"), ["axes.world_size=[4, 8]"]))
    lines = format_regime(plan)
    assert "reference_job.gpus gives no GPUs for world size [8]" in "\n".join(lines)
    assert any(line.startswith("  ws8-") and ": — / " in line for line in lines)
    ws8 = next(r for r in plan.rows if r.world_size == 8)
    assert regimes(plan)[ws8.name]["reference_job"] is None
