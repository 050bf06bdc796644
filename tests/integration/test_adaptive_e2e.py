"""An adaptive sweep through `scalesweep run`, killed between its rounds and resumed: the
rounds go on where they stopped, every trial once in MLflow, no step twice, and the report's
arms.json carries the decisions.

The kill point is the driver's own line announcing the second round (read from its stdout),
not a clock. With replicates {min: 2, max: 3} no look can decide anything (two or three seeds
never reach 90 %: the plan says so), so every arm runs its third seed: the rounds are known in
advance whatever the losses come out as on this machine.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import RayHead
from tests.support.helpers import cli, cli_env, scalesweep

# both the killed run and the resume join the session's Ray head (no start-up each): the driver's
# death ends the trials it owns there, as it ends a local Ray
pytestmark = [pytest.mark.slow]
DEADLINE_S = 600

SWEEP = """\
name: adaptive-e2e
workload: {name: mlp_regression}
reference: {world_size: 2}
target: {metric: dev_loss, relative_to_baseline: 0.10, levels: [0.1, 1.0]}
baseline: {world_size: 2, warmup_rule: fixed, scaling_rule: none}
backend: simulate
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
scheduler: {type: gradual_warmup, warmup_steps: 20}
training: {per_worker_batch: 16, epochs: 2, eval_every_epochs: 0.2}
replicates: {min: 2, max: 3}
resources: {max_concurrent_trials: 1}
axes:
  world_size: [2, 4]
  scaling_rule: [linear]
"""


def _run_until(line: str, cmd: list[str], cwd: Path, env: dict[str, str]) -> list[str]:
    """Start the driver in its own process group, read its stdout until ``line`` shows, then
    SIGKILL the group; the lines read so far."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=cli_env(**env), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    seen: list[str] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        assert proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        while not any(line in s for s in seen):
            assert time.monotonic() < deadline, f"no {line!r} in {DEADLINE_S} s:\n" + "".join(seen)
            if sel.select(timeout=1.0):
                got = proc.stdout.readline()
                assert got or proc.poll() is None, "the driver ended first:\n" + "".join(seen)
                seen.append(got)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    return seen


def test_an_adaptive_sweep_killed_between_rounds_resumes_its_rounds(
        tmp_path: Path, ray_head: RayHead, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = tmp_path / "adaptive.yaml"
    sweep.write_text(SWEEP, encoding="utf-8")
    plan = cli(["plan", str(sweep)], capsys)  # in this process: it starts nothing
    assert "no look can decide" in plan  # 2-3 seeds never reach 90 %: said up front

    seen = _run_until("adaptive seeds: 2 more trial(s)",
                      [sys.executable, "-m", "scalesweep", "run", str(sweep), *ray_head.args()],
                      tmp_path, ray_head.env())
    assert any("sweep adaptive-e2e: 6 trials" in s for s in seen)

    done = scalesweep("resume", "adaptive-e2e", *ray_head.args(), cwd=tmp_path, **ray_head.env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 trials already finished" in done.stdout
    assert "adaptive seeds: 2 more trial(s)" in done.stdout  # round 2, decided again from MLflow

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("adaptive-e2e")
    assert exp is not None
    runs = client.search_runs([exp.experiment_id])
    parent = next(r for r in runs if r.data.tags.get("scalesweep.role") == "parent")
    assert parent.info.status == "FINISHED"
    assert float(parent.data.params["decision_confidence"]) == 0.9
    assert json.loads(parent.data.params["replicates"]) == {"min": 2, "max": 3, "step": 1,
                                                                     "first_seed": 0}
    assert parent.data.tags["machine.isa"] and parent.data.tags["machine.version.ray"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    names = sorted(c.info.run_name for c in children)
    # at the reference world size every lr rule is the baseline trial (merged, named linear)
    assert names == sorted(f"ws{ws}-warmup20-linear-s{s}" for ws in (2, 4) for s in range(3)), names
    for child in children:
        assert child.data.tags["status"] == "completed"
        steps = [m.step for m in client.get_metric_history(child.info.run_id, "dev_loss")]
        assert steps == sorted(set(steps)), f"{child.info.run_name}: a step was logged twice"

    arms = json.loads((tmp_path / "reports" / "adaptive-e2e" / "arms.json").read_text())
    by_arm = {a["arm"]: a for a in arms}
    assert by_arm["ws2-warmup20-linear"]["decision"] == "baseline"
    other = by_arm["ws4-warmup20-linear"]
    assert other["n_seeds"] == 3 and other["decision"] == "not resolved"
    assert [lv["level"] for lv in other["ratio_by_target"]] == [0.1, 1.0]
    assert all(lv["n_paired"] == 3 for lv in other["ratio_by_target"])
