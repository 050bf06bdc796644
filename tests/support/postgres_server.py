"""A PostgreSQL of the test's own on 127.0.0.1, and an `mlflow server` on it, each started and
stopped by its own pid; PostgreSQL can be stopped and started again on the same data directory
and port under a running sweep (tests/integration/test_store_restart_e2e.py).

scripts/mlflow_server.sh (tests/integration/test_postgres.py) cannot serve here: it stops the
MLflow server as soon as its PostgreSQL exits, by design. The binaries are found as the script
finds them: ``PG_BIN``, else the pgserver wheel's (scalesweep's dev extra, which CI installs).
As root, PostgreSQL (which refuses root) runs in a user namespace of its own, as in the script.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path
from urllib.parse import quote

from tests.support.helpers import cli_env, free_port, stop_group, wait_http

USER = "mlflow"
DATABASE = "mlflow"
#: characters a URI must percent-encode: the password reaches libpq decoded
PASSWORD = "pg-r3start@:/%?db"
#: a hang guard only: PostgreSQL starts (and stops fast) in a second or two
START_S = 120.0


def pg_bin() -> Path:
    """PostgreSQL's bin directory; a missing one fails the test (CI installs the wheel)."""
    if os.environ.get("PG_BIN"):
        return Path(os.environ["PG_BIN"])
    spec = importlib.util.find_spec("pgserver")  # found, not imported: its import sets up a registry
    if spec is None or spec.origin is None:
        raise RuntimeError("no PostgreSQL: pip install pgserver (scalesweep's dev extra, "
                           "bash scripts/env.sh), or set PG_BIN to PostgreSQL's bin directory")
    return Path(spec.origin).parent / "pginstall" / "bin"


def _as_pg() -> list[str]:
    """The prefix that runs PostgreSQL's programs: as root, an unprivileged user mapped onto
    root in a user namespace (it owns root's files, with none of root's rights)."""
    if os.geteuid() != 0:
        return []
    return ["unshare", "--user", "--map-user=65534", "--map-group=65534", "--"]


class Postgres:
    """One database cluster in ``dir``: ``USER`` (its superuser, password auth over TCP only)
    owns the database ``DATABASE``."""

    def __init__(self, dir: Path, port: int | None = None) -> None:
        self.dir = dir
        self.port = port or free_port()
        self.data = dir / "data"
        self.log = dir / "postgres.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.bin = pg_bin()
        #: every pid the test started PostgreSQL as, to check none outlives it
        self.pids: list[int] = []
        # the environment as it is now, for every later start: a restart runs while another
        # thread's fail_fast() sets and unsets variables, and a child spawned with the live
        # environ can read it mid-change (execve failed with EFAULT, "Bad address")
        self.env = dict(os.environ)

    @property
    def uri(self) -> str:
        """The database with its credentials, as a user passes it to --tracking-uri."""
        return f"postgresql://{USER}:{quote(PASSWORD, safe='')}@127.0.0.1:{self.port}/{DATABASE}"

    @property
    def uri_without_password(self) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{DATABASE}"

    def init(self) -> Postgres:
        self.dir.mkdir(parents=True, exist_ok=True)
        pwfile = self.dir / "pw"
        pwfile.write_text(PASSWORD + "\n")
        pwfile.chmod(0o600)
        done = subprocess.run(
            [*_as_pg(), str(self.bin / "initdb"), "-D", str(self.data), "-U", USER, "-E", "UTF8",
             "--auth=scram-sha-256", f"--pwfile={pwfile}", "--no-sync"],
            capture_output=True, text=True, timeout=START_S)
        assert done.returncode == 0, done.stdout + done.stderr
        self.start()
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user=USER, password=PASSWORD,
                             dbname="postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
        return self

    def start(self) -> None:
        """On the data directory and port it had: TCP on 127.0.0.1, no Unix socket."""
        assert self.proc is None, "already running"
        with self.log.open("ab") as out:
            # fsync off: the test's database need not survive a power cut, only a restart
            self.proc = subprocess.Popen(
                [*_as_pg(), str(self.bin / "postgres"), "-D", str(self.data), "-h", "127.0.0.1",
                 "-p", str(self.port), "-c", "unix_socket_directories=", "-c", "fsync=off"],
                stdout=out, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        self.pids.append(self.proc.pid)
        end = time.monotonic() + START_S
        while not self._accepting():  # in this process: no child to spawn per poll
            if self.proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"PostgreSQL did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.1)

    def _accepting(self) -> bool:
        """Whether it takes a login now (what pg_isready asks, short of the login)."""
        import psycopg

        try:
            with psycopg.connect(host="127.0.0.1", port=self.port, user=USER, password=PASSWORD,
                                 dbname="postgres", connect_timeout=5):
                return True
        except psycopg.OperationalError:
            return False

    def stop(self) -> None:
        """PostgreSQL's fast shutdown (SIGINT to its postmaster): open transactions are rolled
        back and every connection is closed, as `pg_ctl stop -m fast` does."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=START_S)
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


class MlflowOnPostgres:
    """`mlflow server` with ``db`` as its backend store, on 127.0.0.1; the database password
    from PGPASSWORD (libpq's), never on its command line."""

    def __init__(self, dir: Path, db: Postgres) -> None:
        self.dir = dir
        self.db = db
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> MlflowOnPostgres:
        self.dir.mkdir(parents=True, exist_ok=True)
        # MLflow 3's job runner has nothing to do for scalesweep and is slow to stop
        env = cli_env(PGPASSWORD=PASSWORD, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
        with (self.dir / "mlflow.log").open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port",
                 str(self.port), "--workers", "1", "--backend-store-uri",
                 self.db.uri_without_password, "--serve-artifacts", "--artifacts-destination",
                 str(self.dir / "artifacts")],
                cwd=self.dir, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        # its first start runs MLflow's migrations on the empty database: minutes on a loaded box
        try:
            wait_http(f"{self.uri}/health", timeout=300, proc=self.proc)
        except (RuntimeError, TimeoutError) as e:
            raise RuntimeError(f"{e}\n{self.log_tail()}") from None
        return self

    def log_tail(self) -> str:
        return (self.dir / "mlflow.log").read_text(errors="replace")[-5000:]

    def stop(self) -> None:
        if self.proc is None:
            return
        stop_group(self.proc)
        self.proc = None


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
