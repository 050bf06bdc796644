"""A simulate trial uses as many intra-op threads as the CPUs Ray reserved for it, whatever
``OMP_NUM_THREADS`` the environment holds (Ray sets it only where it is unset)."""

from __future__ import annotations

import pytest
import ray
import torch

from scalesweep.trainables import trial_driver

pytestmark = pytest.mark.slow


@ray.remote
def _threads() -> tuple[int, int]:
    before = torch.get_num_threads()
    return before, trial_driver.use_assigned_cpus()


@pytest.mark.parametrize("cpus", [1, 2])
def test_threads_follow_the_cpus_ray_assigns(ray_cluster: None, cpus: int) -> None:
    # ray_cluster (tests/conftest.py): a 4-CPU Ray of the worker's own
    # an environment that asks for fewer threads (or more) than the reservation is overridden
    for env in ("1", "8"):
        task = _threads.options(num_cpus=cpus, runtime_env={"env_vars": {"OMP_NUM_THREADS": env}})
        before, after = ray.get(task.remote())
        print(f"\n{cpus} CPU(s), OMP_NUM_THREADS={env}: torch threads {before} -> {after}")
        assert after == cpus


def test_outside_ray_the_count_is_left_alone() -> None:
    assert trial_driver.use_assigned_cpus() == torch.get_num_threads()
