"""A simulate trial uses as many intra-op threads as the CPUs Ray reserved for it, whatever
``OMP_NUM_THREADS`` the environment holds (Ray sets it only where it is unset)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import ray
import torch

from scalesweep.orchestrator.launch import trial_driver

pytestmark = [pytest.mark.slow, pytest.mark.local_ray]


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    # address="local": our own cluster, never one somebody else started on this machine
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


@ray.remote
def _threads() -> tuple[int, int]:
    before = torch.get_num_threads()
    return before, trial_driver.use_assigned_cpus()


@pytest.mark.parametrize("cpus", [1, 2])
def test_threads_follow_the_cpus_ray_assigns(ray_cluster: None, cpus: int) -> None:
    # an environment that asks for fewer threads (or more) than the reservation is overridden
    for env in ("1", "8"):
        task = _threads.options(num_cpus=cpus, runtime_env={"env_vars": {"OMP_NUM_THREADS": env}})
        before, after = ray.get(task.remote())
        print(f"\n{cpus} CPU(s), OMP_NUM_THREADS={env}: torch threads {before} -> {after}")
        assert after == cpus


def test_outside_ray_the_count_is_left_alone() -> None:
    assert trial_driver.use_assigned_cpus() == torch.get_num_threads()
