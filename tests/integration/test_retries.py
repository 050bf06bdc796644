"""`max_failures` is one number of retries per trial, whichever layer restarts it: a ddp trial
that fails every time is tried max_failures + 1 times in all (Ray Train's restarts), not
(max_failures + 1)^2 (Ray Train's inside each of Tune's), and ends failed with its error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import RayHead
from tests.support.helpers import ROOT, SWEEPS, scalesweep

pytestmark = pytest.mark.slow


def test_a_ddp_trial_failing_every_time_is_tried_max_failures_plus_one_times(
        tmp_path: Path, ray_head: RayHead) -> None:
    attempts = tmp_path / "attempts"
    workload = (f"workload={{name: 'tests.support.faulty_workload:make', options: {{fail_seed: 0, "
                f"attempts_file: '{attempts}'}}}}")
    done = scalesweep("run", "--no-report", str(SWEEPS / "smoke.yaml"), "--set", "axes.world_size=[2]",
                      "--set", "backend=ddp", "--set", "physical_workers=1", "--set", "max_failures=1",
                      "--set", workload, *ray_head.args(), cwd=tmp_path, PYTHONPATH=str(ROOT),
                      **ray_head.env())
    assert done.returncode == 1, done.stdout + done.stderr
    assert "failed" in done.stdout and "injected failure for seed 0" in done.stdout
    assert len(attempts.read_text().splitlines()) == 2  # the try and its one retry
