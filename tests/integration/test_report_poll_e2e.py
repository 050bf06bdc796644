"""What a report costs an own loop, as a claim a test can fail without a clock.

benchmarks/results/report_cost.md measures about 0.05-0.06 s per eval over the same loop
standalone (up to 2 s before the fix). The cost is the wait in ``ray.train.report`` for Ray Train
V2's controller to take the report off its one-slot queue, which it does when it polls its
workers, every ``RAY_TRAIN_HEALTH_CHECK_INTERVAL_S`` (2 s by default); the trial driver sets
that to ``trial_driver.REPORT_POLL_S`` (0.05 s) before it starts the controller. The seconds
themselves depend on the machine and stay the benchmark's; what this test holds is the cause:
the controller a real sweep's trial starts polls every REPORT_POLL_S. It fails if the driver
stops setting the variable, sets it after the controller starts, or Ray stops handing it on
(checked: with ``use_report_poll`` not called, the loop saw ``unset``).

The value is read on the trial's worker: the controller hands its workers the variables of its
own environment, the one it read its interval from (tests/support/poll_probe.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalesweep.trainables.trial_driver import REPORT_POLL_ENV, REPORT_POLL_S
from tests.conftest import RayHead
from tests.support.helpers import ROOT, scalesweep

pytestmark = pytest.mark.slow

SWEEP = """
name: report-poll
workload:
  train_loop: "tests.support.poll_probe:train_loop_per_worker"
  train_size: 32
  options: {{out: "{out}"}}
target: {{metric: dev_loss, value: 0.5}}
optimizer: {{type: sgd, lr: 0.1}}
scheduler: {{type: warmuplr, warmup_steps: 4}}
training: {{per_worker_batch: 8, max_updates: 8, eval_every: 4}}
resources: {{cpus_per_worker: 0.5, max_concurrent_trials: 1}}
axes: {{world_size: [1], seed: [0]}}
"""
DEADLINE_S = 400  # a hang guard only


def test_the_controller_of_a_sweeps_trial_polls_at_the_report_interval(
        tmp_path: Path, ray_head: RayHead) -> None:
    out = tmp_path / "poll"
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(SWEEP.format(out=out), encoding="utf-8")
    env = {"PYTHONPATH": str(ROOT), **ray_head.env()}
    assert REPORT_POLL_ENV not in ray_head.env()  # the cluster's own default is Ray's 2 s
    proc = scalesweep("run", "--no-report", str(sweep), "--tracking-uri",
                      f"sqlite:///{tmp_path / 'mlflow.db'}", *ray_head.args(), cwd=tmp_path,
                      timeout=DEADLINE_S, **env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert float(out.read_text()) == REPORT_POLL_S
