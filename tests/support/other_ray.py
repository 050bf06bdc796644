"""A Ray someone else started on this host (a shared workstation, a CI box), for the test that
`scalesweep run` without --address starts a Ray of its own and leaves the other one alone.

The other Ray is a `ray start --head` with Ray's default temp dir, so it becomes the host's
"current cluster" that `ray.init()` finds by itself (what broke `run` before: it then refused
its own num_cpus). It runs in its own session and is stopped by SIGTERM to that group, never
`ray stop` (which ends every Ray process on the host). Its tests are ``local_ray``.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from tests.support.helpers import cli_env, free_port, stop_group

RAY = str(Path(sys.executable).parent / "ray")
DEADLINE_S = 120
CURRENT = Path("/tmp/ray/ray_current_cluster")


class OtherRay:
    """``with OtherRay(tmp_path) as other:`` a 1-CPU head of another user, with a token of its
    own (Ray's token auth is on by default), up and current before the block."""

    def __init__(self, tmp_path: Path) -> None:
        self.port = free_port()
        token = tmp_path / "other_token"
        token.write_text(secrets.token_hex(24))
        # no drain on SIGTERM, which would only wait for a GCS the same signal stops (_stop)
        self.env = cli_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token),
                           RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="0")
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = tmp_path / "other_ray.log"

    def __enter__(self) -> OtherRay:
        # a free port can be taken by a parallel test between free_port() and Ray binding it:
        # one fresh try, then the other Ray's own words in the failure
        for attempt in (1, 2):
            with self.log.open("wb") as out:  # the child keeps its own copy of the descriptor
                self.proc = subprocess.Popen(
                    [RAY, "start", "--head", f"--port={self.port}", "--num-cpus=1",
                     "--node-ip-address=127.0.0.1", "--include-dashboard=false",
                     f"--dashboard-agent-listen-port={free_port()}",
                     f"--ray-client-server-port={free_port()}", "--disable-usage-stats", "--block"],
                    env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                if self._wait_current(last=attempt == 2):
                    break
            except BaseException:
                self._stop()
                raise
            self.port = free_port()
        try:
            before = self._status()
            assert before.returncode == 0, before.stderr
        except BaseException:
            self._stop()
            raise
        return self

    def _wait_current(self, *, last: bool) -> bool:
        """True once this Ray is the host's current cluster; False if it exited early (a retry
        may follow); an AssertionError with its log on the last try or past the deadline."""
        assert self.proc is not None
        deadline = time.monotonic() + DEADLINE_S
        while not (CURRENT.exists() and CURRENT.read_text().strip().endswith(f":{self.port}")):
            if self.proc.poll() is not None:
                assert not last, f"the other Ray did not start:\n{self._log_tail()}"
                return False
            assert time.monotonic() < deadline, \
                f"the other Ray was not up in {DEADLINE_S} s:\n{self._log_tail()}"
            time.sleep(0.5)
        return True

    def _log_tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])

    def assert_untouched(self) -> None:
        """Still up, still its one node of 1 CPU, nothing of ours on it."""
        after = self._status()
        assert after.returncode == 0 and self.proc is not None and self.proc.poll() is None, after.stderr
        assert "1 node" in after.stdout or after.stdout.count("node_") == 1, after.stdout
        assert "0.0/1.0 CPU" in after.stdout, after.stdout

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop()

    def _status(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run([RAY, "status", "--address", f"127.0.0.1:{self.port}"], env=self.env,
                              capture_output=True, text=True, timeout=60)

    def _stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc)
        # Ray leaves the file behind: the host's next `ray.init()` would look for a dead Ray
        if CURRENT.exists() and CURRENT.read_text().strip().endswith(f":{self.port}"):
            CURRENT.unlink()
