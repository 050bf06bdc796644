"""A Ray someone else started on this host (a shared workstation, a CI box): `scalesweep run`
without --address starts a Ray of its own and leaves the other one alone.

The other Ray is a `ray start --head` with Ray's default temp dir, so it becomes the host's
"current cluster" that `ray.init()` finds by itself (what broke `run` before: it then refused
its own num_cpus). It runs in its own session and is stopped by SIGTERM to that group, never
`ray stop` (which ends every Ray process on the host).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.helpers import SWEEPS, cli_env, free_port, scalesweep

pytestmark = [pytest.mark.slow, pytest.mark.local_ray]
RAY = str(Path(sys.executable).parent / "ray")
DEADLINE_S = 120


def _status(port: int, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RAY, "status", "--address", f"127.0.0.1:{port}"], env=env,
                          capture_output=True, text=True, timeout=60)


def test_run_starts_its_own_ray_and_leaves_the_other_alone(tmp_path: Path) -> None:
    port = free_port()
    token = tmp_path / "other_token"
    token.write_text(secrets.token_hex(24))
    # the other user's Ray, with a token of its own (Ray's token auth is on by default); no
    # drain on SIGTERM, which would only wait for a GCS the same signal stops (_stop)
    env = cli_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token),
                  RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="0")
    other = subprocess.Popen(
        [RAY, "start", "--head", f"--port={port}", "--num-cpus=1", "--node-ip-address=127.0.0.1",
         "--include-dashboard=false", f"--dashboard-agent-listen-port={free_port()}",
         f"--ray-client-server-port={free_port()}", "--disable-usage-stats", "--block"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    current = Path("/tmp/ray/ray_current_cluster")
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not (current.exists() and current.read_text().strip().endswith(f":{port}")):
            assert other.poll() is None, "the other Ray did not start"
            assert time.monotonic() < deadline, f"the other Ray was not up in {DEADLINE_S} s"
            time.sleep(0.5)
        before = _status(port, env)
        assert before.returncode == 0, before.stderr

        # one short trial: the subject is where it runs
        done = scalesweep("run", "--no-report", str(SWEEPS / "smoke.yaml"), "--set", "axes.world_size=[2]",
                          "--set", "axes.scaling_rule=[none]", "--set", "training.epochs=1",
                          cwd=tmp_path, RAY_ADDRESS="")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "completed" in done.stdout

        after = _status(port, env)  # still up, still its one node of 1 CPU, nothing of ours on it
        assert after.returncode == 0 and other.poll() is None, after.stderr
        assert "1 node" in after.stdout or after.stdout.count("node_") == 1, after.stdout
        assert "0.0/1.0 CPU" in after.stdout, after.stdout
    finally:
        _stop(other)
        # Ray leaves the file behind: the host's next `ray.init()` would look for a dead Ray
        if current.exists() and current.read_text().strip().endswith(f":{port}"):
            current.unlink()


def _stop(other: subprocess.Popen[bytes]) -> None:
    if other.poll() is None:
        os.killpg(other.pid, signal.SIGTERM)
        try:
            other.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(other.pid, signal.SIGKILL)
            other.wait()
