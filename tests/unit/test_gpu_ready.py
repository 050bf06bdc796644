"""The GPU path's CPU-checkable parts (issue 35 §3): ``VirtualRanks.passes`` reseeds the
generator of the device the model runs on, with the built-in loop's seeds in its order.

No GPU here: a model on the ``meta`` device (the one non-CPU device every torch build has)
stands for a model on a GPU, and ``torch.cuda.manual_seed`` is recorded, not run. The real
thing, dropout on a GPU equal to the built-in loop's, is tests/gpu (scripts/gpu_check.sh)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from scalesweep import loop_helpers
from scalesweep.trainables import stepping
from tests.unit.test_loop_helpers import WARMUPLR, _builtin, _loop_config, _trial

Key = tuple[int, ...]
#: the one reseed the built-in loop and the helpers both call (scalesweep.trainables.stepping)
RESEED = stepping.reseed


def _recorder(calls: list[tuple[torch.device, Key]], real: Any) -> Any:
    def record(device: torch.device, *key: int) -> None:
        calls.append((device, key))
        real(device, *key)
    return record


def _helper_calls(config: dict[str, Any], model: torch.nn.Module, monkeypatch: pytest.MonkeyPatch,
                  **kwargs: Any) -> list[tuple[torch.device, Key]]:
    calls: list[tuple[torch.device, Key]] = []
    monkeypatch.setattr(stepping, "reseed", _recorder(calls, RESEED))
    ranks = loop_helpers.VirtualRanks(config, rank=0, physical_workers=1)
    for update in range(1, int(config["total_updates"]) + 1):
        for _ in ranks.passes(model, update, **kwargs):
            pass
    return calls


def test_passes_reseeds_the_generator_of_the_device_the_model_is_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # passes(model, update) as docs/workloads.md writes it, no device given: a model on a GPU
    # must get its GPU's generator seeded (dropout draws there), not the CPU's alone
    config = _loop_config(_trial(2, WARMUPLR, updates=3, accum=2))
    away = torch.nn.Sequential(torch.nn.Linear(3, 3, device="meta"), torch.nn.Dropout(0.5))
    calls = _helper_calls(config, away, monkeypatch)
    assert len(calls) == 3 * 2 * 2 and {device for device, _ in calls} == {torch.device("meta")}
    # a device given is the one seeded; a model with no parameters runs on the CPU
    assert {d for d, _ in _helper_calls(config, away, monkeypatch, device="cpu")} == {torch.device("cpu")}
    assert {d for d, _ in _helper_calls(config, torch.nn.Dropout(0.5), monkeypatch)} == {torch.device("cpu")}
    buffers_only = torch.nn.BatchNorm1d(3, affine=False).to("meta")
    assert loop_helpers._model_device(buffers_only) == torch.device("meta")


def test_passes_seeds_cuda_with_the_builtin_loops_seeds_in_its_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The built-in loop's training passes reseed with keys (seed, 0, update, v, m), one per
    (virtual rank, micro-batch); the helper's passes with the same keys in the same order, and
    for a GPU model the CUDA generator gets the CPU's seed (recorded: no GPU here)."""
    trial = _trial(4, WARMUPLR, updates=3, accum=2)
    builtin: list[tuple[torch.device, Key]] = []
    monkeypatch.setattr(stepping, "reseed", _recorder(builtin, RESEED))
    _builtin(trial)
    monkeypatch.undo()
    trained = [key for _, key in builtin if key[1] == 0]  # (seed, 1, update): evaluation's

    cuda_seeds: list[int] = []
    cpu_seeds: list[int] = []
    monkeypatch.setattr(torch.cuda, "manual_seed", cuda_seeds.append)
    calls: list[tuple[torch.device, Key]] = []
    monkeypatch.setattr(stepping, "reseed", _recorder(calls, RESEED))
    ranks = loop_helpers.VirtualRanks(_loop_config(trial), rank=0, physical_workers=1)
    for update in range(1, trial.total_updates + 1):
        for _ in ranks.passes(torch.nn.Linear(2, 2), update, device="cuda"):
            cpu_seeds.append(torch.default_generator.initial_seed())
    assert [key for _, key in calls] == trained and len(trained) == 3 * 4 * 2
    assert {device.type for device, _ in calls} == {"cuda"}
    assert cuda_seeds == cpu_seeds and len(set(cpu_seeds)) == len(cpu_seeds)


GPU_CHECKS = sorted(p.stem for p in (Path(__file__).parents[1] / "gpu").glob("test_*.py"))


@pytest.mark.parametrize("module", GPU_CHECKS)
def test_each_gpu_check_imports_on_a_cpu_machine(module: str) -> None:
    """tests/gpu is not collected without CUDA, so a helper it borrows from the CPU tests could
    move (as tests/ split into unit and integration did) and only the next GPU run would see it."""
    importlib.import_module(f"tests.gpu.{module}")


def test_gpu_check_with_a_python_that_lacks_the_dependencies_names_them_and_fails(
        tmp_path: Path) -> None:
    """GPU_CHECK_PYTHON (a cluster image's Python) stands in for .venv; one that cannot import
    the project's dependencies stops the check at its first step, naming what is missing."""
    bare = tmp_path / "python"
    bare.write_text('#!/bin/sh\nexec /usr/bin/env -i PYTHONNOUSERSITE=1 '
                    f'{sys.base_prefix}/bin/python3 -S "$@"\n')
    bare.chmod(0o755)
    script = Path(__file__).parents[2] / "scripts" / "gpu_check.sh"
    done = subprocess.run(["bash", str(script)], env={**os.environ, "GPU_CHECK_PYTHON": str(bare)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"GPU_CHECK_PYTHON={bare} cannot import: torch ray ray.train" in done.stderr
    assert "FAIL" in done.stdout and "environment (GPU_CHECK_PYTHON=" in done.stdout
    assert "nvidia-smi" not in done.stdout  # it stopped at step 1
