"""A trial that ran out of memory fails with a message that says so and names the resources it
asked for (SweepCallback, issue 50 item 6), whichever way the memory ran out: Ray's memory
monitor killed its process, Python or torch could not allocate, CUDA ran out. The sweep goes on
(tests/integration/test_memory_e2e.py: a real trial past an address-space limit)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scalesweep.orchestrator.tracking.callback import MEMORY_HINT, memory_note, trial_resources
from tests.unit.test_tune_callback import FakeTrial, Sweep, _result, _sweep


@pytest.fixture
def sweep(tmp_path: Path, request: pytest.FixtureRequest) -> Sweep:
    return _sweep(f"sqlite:///{tmp_path / 'mlflow.db'}", request.node.name)

#: Ray's memory monitor, as a Tune trial's error file has it (the raylet's message, shortened)
RAY_MONITOR = (
    "Failure # 1 (occurred at 2026-11-28_15:00:00)\n"
    "ray::ImplicitFunc.train() (pid=4242, ip=127.0.0.1)\n"
    "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
    "Memory on the node (IP: 127.0.0.1, ID: 1a2b) where the task (actor ID: 3c4d, name="
    "ImplicitFunc.__init__, pid=4242) was running was 22.41GB / 23.50GB (0.953617), which "
    "exceeds the memory usage threshold of 0.95. Ray killed this worker (ID: 5e6f) because it "
    "was the most recently scheduled task.\n")
CUDA = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 79.19 GiB of which 1.06 GiB is free.")


def _trial(name: str, backend: str = "simulate", workers: int = 1, cpus: float = 0.5,
           use_gpu: bool = False, **kw: Any) -> FakeTrial:
    trial = FakeTrial(name, **kw)
    trial.config["trial_config"].update(cpus_per_worker=cpus, gpus_per_worker=1.0)
    trial.config["trial_config"]["trial"].update(backend=backend, world_size=workers,
                                                 physical_workers=workers, use_gpu=use_gpu)
    return trial


def test_a_trial_killed_by_rays_memory_monitor_says_memory_and_its_resources(
        sweep: Sweep, tmp_path: Path) -> None:
    error_file = tmp_path / "error.txt"
    error_file.write_text(RAY_MONITOR)
    cb = sweep.callback
    killed, other = _trial("ws1-s0", error_file=str(error_file)), _trial("ws1-s1")
    for t in (killed, other):
        cb.on_trial_start(0, [killed, other], t)
        cb.on_trial_result(1, [killed, other], t, _result(10))
    cb.on_trial_error(2, [killed, other], killed)
    error = cb.errors["ws1-s0"]
    assert error.startswith(f"{MEMORY_HINT} (ray.exceptions.OutOfMemoryError: Task was killed")
    assert "1 process (simulate), cpus_per_worker 0.5" in error
    assert "resources.max_concurrent_trials" in error and "per_worker_batch" in error
    run = sweep.run("ws1-s0")
    assert run.info.status == "FAILED" and run.data.tags["error"] == error
    assert f"failed    ws1-s0: {error}" in sweep.lines()
    # the sweep goes on: the other trial reports and completes
    cb.on_trial_result(3, [killed, other], other, _result(40, "completed"))
    cb.on_trial_complete(4, [killed, other], other)
    assert cb.status == {"ws1-s0": "failed", "ws1-s1": "completed"}


def test_a_ddp_trial_out_of_cuda_memory_says_so_with_its_workers_and_gpus(sweep: Sweep) -> None:
    cb, trial = sweep.callback, _trial("ws4", backend="ddp", workers=4, cpus=2, use_gpu=True)
    cb.on_trial_start(0, [trial], trial)
    cb.on_trial_result(1, [trial], trial, {"status": "failed", "error": CUDA})
    cb.on_trial_complete(2, [trial], trial)
    error = cb.errors["ws4"]
    assert error.startswith(f"{MEMORY_HINT} (torch.OutOfMemoryError: CUDA out of memory")
    assert "4 workers, cpus_per_worker 2, gpus_per_worker 1" in error
    assert "reserves no GPU memory" in error
    assert sweep.run("ws4").data.tags["error"] == error


@pytest.mark.parametrize("text", [
    "MemoryError", "RuntimeError: [enforce fail at alloc_cpu.cpp:118] . DefaultCPUAllocator: "
    "can't allocate memory: you tried to allocate 4294967296 bytes. Error code 12 (Cannot "
    "allocate memory)", RAY_MONITOR, CUDA])
def test_every_way_of_running_out_of_memory_is_named(text: str) -> None:
    note = memory_note("the line", text, "1 process (simulate), cpus_per_worker 1")
    assert note.startswith(f"{MEMORY_HINT} (the line): the trial's resources were 1 process")
    assert memory_note(note, text, "x") == note  # said once


@pytest.mark.parametrize("text", [
    "ValueError: injected failure for seed 1", "RuntimeError: Expected all tensors to be on the "
    "same device", "ZeroDivisionError: division by zero in memory_bank.py"])
def test_other_errors_are_left_as_they_are(text: str) -> None:
    assert memory_note(text, text, "r") == text


def test_resources_unknown_when_the_trial_holds_none() -> None:
    assert trial_resources(object()) == "unknown"


def test_a_ddp_failure_keeps_the_line_that_names_memory() -> None:
    """Ray Train reports a worker the memory monitor killed under a generic last line: the line
    the driver hands on (trial_driver.failure_line) is the one naming memory, so the callback
    can say "out of memory"."""
    from scalesweep.trainables.trial_driver import failure_line

    text = ("Training worker 0 failed.\n"
            "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
            "  File \"/x/train.py\", line 3, in loop\n"
            "ray.train.base_trainer.TrainingFailedError: The Ray Train run failed.")
    line = failure_line(RuntimeError(text))
    assert line == ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low "
                    "on memory.")
    assert memory_note(line, line, "r").startswith(MEMORY_HINT)
    plain = "ValueError: bad\nray.train.base_trainer.TrainingFailedError: The Ray Train run failed."
    assert failure_line(RuntimeError(plain)) == plain.splitlines()[-1]  # no memory: the last error
