"""A real two-node Ray cluster on this machine, for the cluster tests.

Two raylets on one host need their own ports (the dashboard agent's default, 52365, is fixed,
so two nodes clash without explicit ones) and their own temp dirs: by default the second node
takes the head's session directory from the GCS, and the two runtime-env agents then manage one
``runtime_resources`` directory, deleting a job's working_dir under its driver. With temp dirs
of its own the cluster also never becomes ``/tmp/ray/ray_current_cluster`` (what
``address="auto"`` of other Ray users on this host finds). Token authentication is on, with a
token of its own (``RAY_AUTH_MODE=token``, ``RAY_AUTH_TOKEN_PATH``) on both nodes.

Both nodes run ``ray start --block`` in their own session: SIGTERM to that process group stops
the node and everything it started; anything left that names one of the cluster's temp dirs is
then killed by pid. Never ``ray stop``: it ends every Ray process on the host, other users' too.

The second node can run in a private mount namespace with a tmpfs over one directory, so a path
the head sees is empty there: a node-local "storage" path on what is otherwise one filesystem.
Ray's GCS and raylets listen on all interfaces whatever ``--node-ip-address`` says (Ray has no
setting for that); we pin what can be pinned to 127.0.0.1 and keep the token on.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.helpers import cli_env, free_port

RAY = str(Path(sys.executable).parent / "ray")


def can_unshare_mount() -> bool:
    """Whether this process may make a private mount namespace with a tmpfs (root, or
    CAP_SYS_ADMIN)."""
    if shutil.which("unshare") is None:
        return False
    probe = tempfile.mkdtemp(prefix="ss-unshare-")
    try:
        proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                               'mount -t tmpfs -o size=1m tmpfs "$0"', probe],
                              capture_output=True, timeout=30)
        return proc.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        shutil.rmtree(probe, ignore_errors=True)


#: what `ray start` says when its raylet did not register in Ray's fixed window
RAYLET_TIMED_OUT = "The current node timed out during startup"


class RayCluster:
    """``ray start --head`` plus one ``ray start --address`` worker node, on 127.0.0.1."""

    def __init__(self, base: Path, *, head_cpus: int = 2, worker_cpus: int = 2,
                 private_dir: Path | None = None, path: str | None = None,
                 nodes: int = 2, extra_env: dict[str, str] | None = None,
                 dashboard: bool = True, log_monitor: bool = True) -> None:
        self.base = base
        # False: no dashboard process on the head (no state API, no job submission), for the
        # heads that only run sweeps: it is the largest of a head's idle CPU costs
        self.with_dashboard = dashboard
        # False: no log monitor, the process that streams the workers' stdout and stderr to
        # the drivers; it scans the node's log files ten times a second for as long as the
        # node lives, so a head kept for the whole session spends minutes of CPU on it
        self.log_monitor = log_monitor
        self.extra_env = extra_env or {}  # the nodes' environment beyond cli_env's
        # the nodes' PATH; None: this venv's bin first, as if the user had activated it
        self.path = path
        self.nodes = nodes  # 1: the head alone
        self.head_cpus, self.worker_cpus = head_cpus, worker_cpus
        self.private_dir = private_dir  # hidden by a tmpfs on the worker node
        self.token = secrets.token_hex(24)
        self.token_file = base / "ray_auth_token"
        # one per node, as on separate machines (a shared one would mean one runtime_resources
        # directory that both nodes' runtime-env agents manage); short, since Ray's unix socket
        # paths live below it (108-byte limit)
        self.temp_dirs = [Path(tempfile.mkdtemp(prefix="ssr", dir="/tmp")) for _ in range(nodes)]
        self.gcs_port = free_port()
        self.dashboard_port = free_port()
        self.client_port = free_port()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    # addresses ---------------------------------------------------------------------------
    @property
    def gcs_address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    @property
    def client_address(self) -> str:
        return f"ray://127.0.0.1:{self.client_port}"

    def env(self, **extra: str) -> dict[str, str]:
        """What the nodes run with: this venv first on PATH (unless ``path`` says otherwise),
        token mode."""
        venv_bin = str(Path(sys.executable).parent)
        # no drain on SIGTERM: `ray start` would wait up to 30 s for a GCS that the same signal
        # to the node's group already stopped, and stop() then waits and kills it anyway.
        # No workers prestarted for each new driver (one per CPU): a test's driver is a sweep
        # whose trial actors take one or two of them, and the rest sit idle until the driver
        # leaves, each a Python process that imported Ray for nothing.
        env = cli_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(self.token_file),
                      PATH=self.path or f"{venv_bin}:{os.environ.get('PATH', '')}",
                      **{"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
                         "RAY_prestart_worker_first_driver": "0", **self.extra_env, **extra})
        if self.path is not None:  # nothing else may point at the venv either
            for var in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
                env.pop(var, None)
        return env

    # lifecycle ---------------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> RayCluster:
        """Both nodes up; one fresh try where a node's `ray start` gave up on its own raylet:
        Ray allows a raylet a fixed 30 s to register with the GCS (ray/_private/node.py), which
        a host starved by parallel tests can miss. Any other failure at once."""
        for attempt in (1, 2):
            try:
                return self._start(timeout)
            except RuntimeError as exc:
                if attempt == 2 or RAYLET_TIMED_OUT not in str(exc):
                    raise
                self.stop()
                for log in self.logs:  # appended to: the next try must not read this one's lines
                    log.rename(log.with_name(f"{log.stem}.try{attempt}.log"))
                self.logs.clear()
        raise AssertionError("unreachable")

    def _start(self, timeout: float) -> RayCluster:
        self.base.mkdir(parents=True, exist_ok=True)
        self.token_file.write_text(self.token)
        self.token_file.chmod(0o600)
        common = ["--node-ip-address=127.0.0.1", "--disable-usage-stats", "--block",
                  "--min-worker-port=0", "--max-worker-port=0",
                  "--object-store-memory=150000000",
                  *([] if self.log_monitor else ["--include-log-monitor=false"])]
        dashboard = (["--dashboard-host=127.0.0.1", f"--dashboard-port={self.dashboard_port}"]
                     if self.with_dashboard else ["--include-dashboard=false"])
        head = [RAY, "start", "--head", f"--port={self.gcs_port}", f"--temp-dir={self.temp_dirs[0]}",
                *dashboard, f"--ray-client-server-port={self.client_port}",
                f"--num-cpus={self.head_cpus}", "--num-gpus=0", *self._agent_ports(), *common]
        self._spawn("head", head)
        if self.with_dashboard:
            self._wait(lambda: self._gcs_up(), timeout, "the head's GCS and dashboard")
        else:  # `ray start` says so once the GCS and the head's raylet are up
            self._wait(lambda: b"Ray runtime started" in self.logs[0].read_bytes(), timeout,
                       "the head's GCS and raylet")
        if self.nodes == 1:
            return self
        worker = [RAY, "start", f"--address={self.gcs_address}", f"--temp-dir={self.temp_dirs[1]}",
                  f"--num-cpus={self.worker_cpus}",
                  "--num-gpus=0", '--resources={"second_node": 1}', *self._agent_ports(), *common]
        if self.private_dir is not None:
            self.private_dir.mkdir(parents=True, exist_ok=True)
            worker = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                      'mount -t tmpfs -o size=16m tmpfs "$0" && exec "$@"', str(self.private_dir),
                      *worker]
        self._spawn("worker", worker)
        self._wait(lambda: len(self.alive_nodes()) == 2, timeout, "two alive nodes")
        return self

    def stop(self) -> None:
        for proc in reversed(self.procs):  # the worker node first
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self.procs.clear()
        # what the nodes started outside their process groups (workers, agents) names our
        # temp dirs on its command line; nothing of anyone else's does
        for pid in self.leftover_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for d in self.temp_dirs:
            shutil.rmtree(d, ignore_errors=True)

    def kill_node(self, index: int) -> None:
        """SIGKILL node ``index``: its ``ray start`` process group and every process below it.

        Ray's workers run outside the node's process group; killing the group alone leaves them
        alive for a while, and peer-to-peer collectives (gloo) go on between them, so a short
        trial could end on the "lost" node (CI saw it). The tree is read before anything dies,
        while the workers are still the raylet's children."""
        root = self.procs[index].pid
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
        tree, todo = [], [root]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo.extend(children.get(pid, []))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(root, signal.SIGKILL)
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def leftover_pids(self) -> list[int]:
        marks = [str(d).encode() for d in self.temp_dirs]
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
                if any(m in cmdline for m in marks):
                    pids.append(int(entry.name))
            except OSError:
                continue
        return pids

    def head_logs(self, pattern: str, tail: int = 3000) -> str:
        """The ends of the head's log files named by ``pattern``, for a failure's message."""
        logs = sorted((self.temp_dirs[0] / "session_latest" / "logs").glob(pattern))
        return "".join(f"\n--- {p.name}\n{p.read_text(errors='replace')[-tail:]}" for p in logs)

    # the state API, through the dashboard, with the token --------------------------------
    def api(self, path: str) -> Any:
        req = urllib.request.Request(f"{self.dashboard}{path}",
                                     headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def _state(self, kind: str, filters: str = "") -> list[dict[str, Any]]:
        data = self.api(f"/api/v0/{kind}?limit=10000&detail=1{filters}")
        return list(data["data"]["result"]["result"])

    def alive_nodes(self) -> list[dict[str, Any]]:
        return [n for n in self._state("nodes") if n.get("state") == "ALIVE"]

    def actors(self, class_name: str) -> list[dict[str, Any]]:
        return self._state("actors", f"&filter_keys=class_name&filter_predicates=%3D"
                                     f"&filter_values={class_name}")

    def worker_node_id(self) -> str:
        return next(n["node_id"] for n in self.alive_nodes()
                    if "second_node" in (n.get("resources_total") or {}))

    # internals ---------------------------------------------------------------------------
    @staticmethod
    def _agent_ports() -> list[str]:
        return [f"--dashboard-agent-listen-port={free_port()}",
                f"--dashboard-agent-grpc-port={free_port()}",
                f"--runtime-env-agent-port={free_port()}", f"--metrics-export-port={free_port()}",
                f"--node-manager-port={free_port()}", f"--object-manager-port={free_port()}"]

    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = self.base / f"{name}.log"
        self.logs.append(log)
        with log.open("ab") as out:
            # RAY_ADDRESS: the nodes' processes (Ray Train's placement-group cleaners among them)
            # ask this cluster's state API, not whichever Ray the host's current-cluster file
            # names, as on a real head, whose `ray start` wrote that file
            self.procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                               env=self.env(RAY_ADDRESS=self.gcs_address),
                                               start_new_session=True, cwd=self.base))

    def _gcs_up(self) -> bool:
        try:
            self.alive_nodes()
            return True
        except OSError:
            return False

    def _wait(self, ready: Any, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while True:
            dead = [p for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"a Ray node exited while waiting for {what}:\n{self.tail()}")
            try:
                if ready():
                    return
            except (OSError, KeyError, ValueError, StopIteration):
                pass
            if time.monotonic() > end:
                raise TimeoutError(f"no {what} after {timeout} s:\n{self.tail()}")
            time.sleep(0.5)

    def tail(self, chars: int = 3000) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-chars:]}"
                         for log in self.logs if log.exists())
