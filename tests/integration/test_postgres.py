"""A team's MLflow: PostgreSQL behind `mlflow server --serve-artifacts` with basic auth, started
by the project's own scripts/mlflow_server.sh (docs/cluster.md, "A team's MLflow").

One small study (2 arms of 2 seeds, the simulate backend: deterministic per seed) runs three
ways against it, and each must read back from MLflow the trial and arm tables its own driver
computed (the sweep directory's summary.json and arms.json, which no store touched):

* over HTTP, with the basic-auth credentials in the tracking URI;
* straight into the database, ``postgresql://user:password@127.0.0.1:PORT/db`` (the password
  has to reach the driver: nothing else lets it connect), and the same tables as over HTTP;
* killed with SIGKILL mid-sweep, then `scalesweep resume`d (over HTTP, the credentials from
  MLFLOW_TRACKING_USERNAME/PASSWORD: the sweep's state keeps its URI without them), and the
  same tables as the run that was not killed.

No password may be printed, logged in a run's params or tags, or written in the sweep's files.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.conftest import RayHead
from tests.support.gated_workload import eval_counts
from tests.support.helpers import (
    ROOT,
    SWEEPS,
    cli_env,
    free_port,
    race_to_make_experiment,
    same_value,
    scalesweep,
    wait_for,
)
from tests.support.postgres_server import alive

pytestmark = pytest.mark.slow

SCRIPT = ROOT / "scripts" / "mlflow_server.sh"
#: the smoke study cut to 2 arms (world size 2, the baseline, and 4) of 2 seeds, 3 epochs (the
#: killed trial's checkpoint at epoch 1 and its hold at epoch 2 leave an epoch to run after)
SETS = ["--set", "axes.scaling_rule=[none]", "--set", "axes.seed=[0, 1]", "--set", "training.epochs=3"]
TRIALS = {"ws2-warmup20-none-s0", "ws2-warmup20-none-s1", "ws4-warmup20-none-s0", "ws4-warmup20-none-s1"}
#: passwords with characters a URI must percent-encode: they reach their readers decoded
DB_PASSWORD = "pg-s3cr@t:/%?db"
ADMIN_PASSWORD = "adm1n-s3cr@t:/%?http"
#: the columns the simulate backend makes the same on every store
TRIAL_COLUMNS = ("name", "arm", "status", "crossing", "epochs_to_target", "updates_to_target")
ARM_COLUMNS = ("arm", "n_seeds", "n_reached", "epochs_to_target_median", "epochs_ratio_vs_baseline_median",
               "decision")
#: a hang guard only: each wait ends as soon as its condition holds
DEADLINE_S = 300
CREDENTIAL_VARS = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "PGUSER", "PGPASSWORD")


@dataclass
class TeamMlflow:
    """scripts/mlflow_server.sh as a user runs it: PostgreSQL and `mlflow server --basic-auth`."""

    dir: Path
    port: int
    pg_port: int
    proc: subprocess.Popen[bytes] | None = None
    pids: tuple[int, ...] = ()
    script_pid: int = 0

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def http_uri(self) -> str:  # the tracking URI with the credentials in it
        return f"http://admin:{quote(ADMIN_PASSWORD, safe='')}@127.0.0.1:{self.port}"

    @property
    def db_uri(self) -> str:
        return f"postgresql://mlflow:{quote(DB_PASSWORD, safe='')}@127.0.0.1:{self.pg_port}/mlflow"

    def start(self) -> TeamMlflow:
        log = self.dir / "script.log"
        env = cli_env(PYTHON=sys.executable, MLFLOW_SERVER_DB_PASSWORD=DB_PASSWORD,
                      MLFLOW_SERVER_ADMIN_PASSWORD=ADMIN_PASSWORD)
        cmd = ["bash", str(SCRIPT), "--basic-auth", "--port", str(self.port), "--pg-port",
               str(self.pg_port), str(self.dir / "state")]
        if shutil.which("strace"):  # every program it starts, with its command line
            cmd = ["strace", "-f", "-qq", "--seccomp-bpf", "-e", "trace=execve", "-e", "signal=none",
                   "-s", "65536", "-o", str(self.execs), *cmd]
        with log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        # the script's own bound on MLflow's start is 240 s (its health wait)
        try:
            wait_for("the script's ready line", lambda: "ready" in log.read_text(), self.proc, 300)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{log.read_text()}") from None
        lines = log.read_text().splitlines()
        self.pids = tuple(int(line.split("pid ", 1)[1].split(",", 1)[0]) for line in lines
                          if line.startswith(("postgres:", "mlflow server:")))
        assert len(self.pids) == 2, lines
        assert f"tracking URI: {self.uri}" in lines
        self.script_pid = self.proc.pid
        if self.execs.exists():  # under strace: the script is the first program it ran
            self.script_pid = int(self.execs.read_text().split(None, 1)[0])
        return self

    @property
    def execs(self) -> Path:
        return self.dir / "execve.trace"

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            # the script stops what it started (strace, if any, ends after it)
            with suppress(ProcessLookupError):
                os.kill(self.script_pid or self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                for pgid in (self.proc.pid, *self.pids):
                    with suppress(ProcessLookupError):
                        os.killpg(pgid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TeamMlflow]:
    server = TeamMlflow(tmp_path_factory.mktemp("team_mlflow"), free_port(), free_port())
    try:
        yield server.start()
    finally:  # a start that failed or timed out too
        server.stop()
    leftover = [pid for pid in server.pids if alive(pid)]
    assert not leftover, f"scripts/mlflow_server.sh left {leftover} running"


@contextmanager
def _credentials_restored() -> Iterator[None]:
    """scalesweep.results puts a URI's credentials into this process's environment (as the CLI
    does): gone again after the block, so no later test inherits them."""
    saved = {name: os.environ.get(name) for name in CREDENTIAL_VARS}
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _tables(experiment: str, uri: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The study's trial and arm tables read back from MLflow, on the deterministic columns."""
    import scalesweep

    with _credentials_restored():
        result = scalesweep.results(experiment, tracking_uri=uri)
    trials = result.trials.sort_values("name")[list(TRIAL_COLUMNS)].to_dict("records")
    arms = result.arms.sort_values("arm")[list(ARM_COLUMNS)].to_dict("records")
    return trials, arms


def _assert_same_tables(got: tuple[list[dict[str, Any]], list[dict[str, Any]]],
                        want: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> None:
    for ours, theirs in zip(got, want, strict=True):
        assert len(ours) == len(theirs), (ours, theirs)
        for row, ref in zip(ours, theirs, strict=True):
            assert all(same_value(row[k], ref[k]) for k in ref), (row, ref)


def _own_tables(cwd: Path, experiment: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The tables the sweep's driver wrote into its sweep directory, from the trials' results
    as Tune gave them (no store read): what MLflow must give back."""
    (sweep_dir,) = (cwd / "scalesweep_runs").glob(f"{experiment}-*")
    trials = sorted(json.loads((sweep_dir / "summary.json").read_text()), key=lambda t: t["name"])
    arms = sorted(json.loads((sweep_dir / "arms.json").read_text()), key=lambda a: a["arm"])
    tables = ([{k: t[k] for k in TRIAL_COLUMNS} for t in trials],
              [{k: a[k] for k in ARM_COLUMNS} for a in arms])
    assert {t["name"] for t in tables[0]} == TRIALS and len(tables[1]) == 2
    return tables


@dataclass
class Swept:
    cwd: Path
    proc: subprocess.CompletedProcess[str]
    #: the trial and arm tables read back from MLflow
    tables: tuple[list[dict[str, Any]], list[dict[str, Any]]]


@pytest.fixture(scope="module")
def over_http(team: TeamMlflow, tmp_path_factory: pytest.TempPathFactory, ray_head: RayHead) -> Swept:
    """The study over HTTP with the credentials in the URI: the reference of the killed one."""
    cwd = tmp_path_factory.mktemp("http")
    proc = scalesweep("run", str(SWEEPS / "smoke.yaml"), *SETS, "--set", "name=smoke_http",
                      "--tracking-uri", team.http_uri, *ray_head.args(), cwd=cwd, **ray_head.env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return Swept(cwd, proc, _tables("smoke_http", team.http_uri))


def _secrets_absent(*texts: str) -> None:
    for secret in (DB_PASSWORD, ADMIN_PASSWORD, quote(DB_PASSWORD, safe=""), quote(ADMIN_PASSWORD, safe="")):
        for text in texts:
            assert secret not in text


def _files_hold_no_secret(root: Path) -> None:
    """No file under ``root`` (the sweep's state, journal, report) holds a password."""
    secrets = [s.encode() for s in (DB_PASSWORD, ADMIN_PASSWORD, quote(DB_PASSWORD, safe=""),
                                    quote(ADMIN_PASSWORD, safe=""))]
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert not any(s in data for s in secrets), f"{path} holds a password"


def _every_eval_once(team: TeamMlflow, experiment: str, evals: int) -> None:
    """Through the server, each trial's dev_loss history holds every eval once: none lost, none
    logged twice by the batched logging's retries over HTTP."""
    from mlflow.tracking import MlflowClient

    from scalesweep.orchestrator.tracking import credentials

    with _credentials_restored():
        client = MlflowClient(credentials.strip(team.http_uri))  # basic auth from the environment
        exp = client.get_experiment_by_name(experiment)
        assert exp is not None
        children = [r for r in client.search_runs([exp.experiment_id], max_results=100)
                    if r.info.run_name in TRIALS]
        assert len(children) == len(TRIALS)
        for child in children:
            steps = [m.step for m in client.get_metric_history(child.info.run_id, "dev_loss")]
            assert len(steps) == len(set(steps)) == evals, (child.info.run_name, steps)


def _runs_hold_no_secret(team: TeamMlflow, experiment: str) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(team.db_uri)  # the database itself, as the server stored the runs
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    runs = client.search_runs([exp.experiment_id], max_results=100)
    assert len(runs) == len(TRIALS) + 1  # the parent and one child per trial
    for run in runs:
        _secrets_absent(*run.data.params.values(), *run.data.tags.values(), *run.data.params,
                        *run.data.tags)


def test_basic_auth_is_on(team: TeamMlflow) -> None:
    """Without credentials the server refuses: the runs below got in with the URI's."""
    url = f"{team.uri}/api/2.0/mlflow/experiments/search?max_results=1"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=30)
    assert refused.value.code == 401


def test_no_password_on_any_command_line(team: TeamMlflow) -> None:
    """Every program scripts/mlflow_server.sh ran (strace's record of each execve, none missed
    as a scan of /proc/*/cmdline could), from its start to now: psql and the server among them,
    and no password in any command line, where `ps` shows it to every user."""
    if not team.execs.exists():
        pytest.skip("strace is not installed: the script's command lines were not recorded")
    trace = team.execs.read_text()
    assert "psql" in trace and '"-m", "mlflow", "server"' in trace, trace[:2000]
    for secret in (DB_PASSWORD, ADMIN_PASSWORD, (team.dir / "state" / "flask.secret").read_text().strip()):
        for form in {secret, quote(secret, safe=""), json.dumps(secret)[1:-1]}:
            assert form not in trace


def test_each_uri_keeps_its_own_credentials(team: TeamMlflow, monkeypatch: pytest.MonkeyPatch) -> None:
    """The URI's user and password win over the environment's, and a second URI in the same
    process gets none of the first one's: over HTTP, and straight into PostgreSQL (a new pooled
    connection made after another URI changed the environment)."""
    import sqlalchemy
    from mlflow.tracking import MlflowClient

    from scalesweep.orchestrator.tracking import credentials

    with _credentials_restored():
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "admin")
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "not-the-password")
        monkeypatch.setenv("PGUSER", "mlflow")
        monkeypatch.setenv("PGPASSWORD", "not-the-password")
        MlflowClient(credentials.strip(team.http_uri)).search_experiments(max_results=1)
        db = credentials.strip(team.db_uri)
        MlflowClient(db).search_experiments(max_results=1)
        # another URI (the same server by another name), without credentials: the environment's
        # again, not the first URI's (its own clean form would get them: the same store)
        other = credentials.strip(team.uri.replace("127.0.0.1", "localhost"))
        with pytest.raises(Exception, match=r"\b401\b"):
            MlflowClient(other).search_experiments(max_results=1)
        with sqlalchemy.create_engine(db).connect() as conn:  # the database's own, not PGPASSWORD
            assert conn.execute(sqlalchemy.text("SELECT current_user")).scalar() == "mlflow"


def test_a_database_that_refuses_is_exit_2_before_anything_starts(team: TeamMlflow,
                                                                  tmp_path: Path) -> None:
    """A wrong password and a database that does not exist: `run` logs in as MLflow would
    before Ray starts (tracking/store_check.py), and says what the database said."""
    wrong_password = team.db_uri.replace(quote(DB_PASSWORD, safe=""), "not-the-password")
    no_database = team.db_uri.rsplit("/", 1)[0] + "/nosuch"
    for uri, said in ((wrong_password, 'password authentication failed for user "mlflow"'),
                      (no_database, 'database "nosuch" does not exist')):
        proc = scalesweep("run", str(SWEEPS / "smoke.yaml"), "--tracking-uri", uri, cwd=tmp_path,
                          timeout=120)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "the database refused the connection" in proc.stderr and said in proc.stderr, proc.stderr
        assert "not-the-password" not in proc.stdout + proc.stderr
        _secrets_absent(proc.stdout, proc.stderr)
        assert list(tmp_path.iterdir()) == []


def test_over_http_with_the_credentials_in_the_uri(team: TeamMlflow, over_http: Swept) -> None:
    proc, cwd = over_http.proc, over_http.cwd
    _secrets_absent(proc.stdout, proc.stderr)
    assert f"at {team.uri};" in proc.stdout  # the URI as printed: without its credentials
    _assert_same_tables(over_http.tables, _own_tables(cwd, "smoke_http"))
    _runs_hold_no_secret(team, "smoke_http")
    _every_eval_once(team, "smoke_http", evals=6)  # 3 epochs, an eval every half
    _files_hold_no_secret(cwd)
    assert not (cwd / "mlflow.db").exists()
    # the report went up through the server, into its artifact store
    assert list((team.dir / "state" / "artifacts").rglob("report.html"))


def test_straight_into_the_database(team: TeamMlflow, over_http: Swept, tmp_path: Path,
                                    ray_head: RayHead) -> None:
    proc = scalesweep("run", str(SWEEPS / "smoke.yaml"), *SETS, "--set", "name=smoke_db",
                      "--tracking-uri", team.db_uri, *ray_head.args(), cwd=tmp_path, **ray_head.env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _secrets_absent(proc.stdout, proc.stderr)
    assert f"at postgresql://127.0.0.1:{team.pg_port}/mlflow;" in proc.stdout
    tables = _tables("smoke_db", team.db_uri)
    _assert_same_tables(tables, _own_tables(tmp_path, "smoke_db"))
    _assert_same_tables(tables, over_http.tables)  # the same study through the server
    _runs_hold_no_secret(team, "smoke_db")
    _files_hold_no_secret(tmp_path)


def test_drivers_released_together_make_the_experiment_once(team: TeamMlflow, tmp_path: Path) -> None:
    """Real processes released by one gate make one experiment in PostgreSQL: with
    look-up-then-create they would all see none and the later creates would fail. One race of
    three drivers, each connected and polling the gate every 0.5 ms: with look-then-create put
    back it failed 10 races in 10 (two drivers: 20 in 21, PostgreSQL answering a look-up and a
    create before the other driver was scheduled once)."""
    from mlflow.tracking import MlflowClient

    ids = race_to_make_experiment(team.db_uri, "raced", tmp_path / "gate", drivers=3)
    assert len(set(ids)) == 1 and ids[0].isdigit(), ids
    assert MlflowClient(team.db_uri).get_experiment(ids[0]).name == "raced"


def _completed_trials(team: TeamMlflow, experiment: str) -> int:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(team.db_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return 0
    return len(client.search_runs([exp.experiment_id], "tags.status = 'completed'"))


def test_killed_and_resumed(team: TeamMlflow, over_http: Swept, tmp_path: Path, ray_head: RayHead) -> None:
    """`scalesweep resume` after the driver is killed with SIGKILL mid-sweep. The kill point does
    not depend on the machine's speed: the second trial is held at its 4th evaluation
    (tests.support.gated_workload, mlp_regression's model and data) and the driver killed once the
    first is finished in MLflow; one trial at a time, checkpoints every 64 updates (an epoch
    at world size 2), so the held one resumes from one. Four trials: one finished, one held,
    two not started at the kill. The killed run and the resume join the session's Ray head: the
    driver's death ends the trials it owns there, as it ends a local Ray."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(team.db_uri)
    gate = tmp_path / "gate"
    gate.mkdir()
    workload = (f"workload={{name: 'tests.support.gated_workload:make', options: {{gate_dir: '{gate}', "
                "gated_trial: 1, gate_eval: 4}}")
    log = tmp_path / "driver.log"
    with log.open("wb") as out:
        driver = subprocess.Popen(
            [sys.executable, "-m", "scalesweep", "run", str(SWEEPS / "smoke.yaml"), *SETS,
             "--set", "name=smoke_resume", "--set", workload,
             "--set", "resources.max_concurrent_trials=1", "--set", "training.checkpoint_every=64",
             "--tracking-uri", team.http_uri, *ray_head.args()],
            cwd=tmp_path, env=cli_env(PYTHONPATH=str(ROOT), **ray_head.env()), stdout=out,
            stderr=subprocess.STDOUT)
    try:
        wait_for("trial held at the gate", (gate / "waiting").exists, driver, DEADLINE_S)
        wait_for("a finished trial in MLflow", lambda: _completed_trials(team, "smoke_resume") >= 1,
                 driver, DEADLINE_S)
        os.kill(driver.pid, signal.SIGKILL)
    finally:
        if driver.poll() is None:
            driver.kill()
        driver.wait(timeout=60)
        (gate / "release").touch()  # a held trial still alive runs on
    exp = client.get_experiment_by_name("smoke_resume")
    assert exp is not None
    before = {r.info.run_name: r.info.end_time for r in client.search_runs([exp.experiment_id])
              if r.data.tags.get("status") == "completed"}
    finished = len(before)
    assert 1 <= finished < len(TRIALS)

    # the sweep's state holds the URI without credentials: they come from the environment
    proc = scalesweep("resume", "smoke_resume", *ray_head.args(), cwd=tmp_path, timeout=600,
                      PYTHONPATH=str(ROOT), MLFLOW_TRACKING_USERNAME="admin",
                      MLFLOW_TRACKING_PASSWORD=ADMIN_PASSWORD, **ray_head.env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{finished} trials already finished" in proc.stdout
    _secrets_absent(proc.stdout, proc.stderr, log.read_text())
    tables = _tables("smoke_resume", team.http_uri)
    _assert_same_tables(tables, _own_tables(tmp_path, "smoke_resume"))
    _assert_same_tables(tables, over_http.tables)  # as if it had not been killed
    _runs_hold_no_secret(team, "smoke_resume")  # the parent and one run per trial
    _files_hold_no_secret(tmp_path)
    evals = {}
    for child in client.search_runs([exp.experiment_id], "tags.status = 'completed'"):
        name = child.info.run_name
        assert child.info.status == "FINISHED", name
        total, every = int(child.data.params["total_updates"]), int(child.data.params["eval_every"])
        steps = [m.step for m in client.get_metric_history(child.info.run_id, "dev_loss")]
        # each eval once, none missing: the loop evaluates at every eval_every and checkpoint
        assert steps == sorted({*range(every, total + 1, every), *range(64, total + 1, 64), total}), name
        evals[name] = len(steps)
        if name in before:  # finished work is left exactly as it was
            assert child.info.end_time == before[name], name
    assert set(evals) == TRIALS
    # the models built after the kill (builds 0 and 1 were the killed run's finished trial and
    # the held one) made every eval of the trials unfinished at the kill but those the resumed
    # one had before its newest checkpoint: a restart from update 0 would make them all again
    after = [n for build, n in eval_counts(gate).items() if build >= 2]
    unfinished = sum(n for name, n in evals.items() if name not in before)
    assert len(after) == len(TRIALS) - finished and min(after) > 0, after
    assert sum(after) < unfinished, (after, evals)
