"""Every tracking URI is checked before anything starts (tracking/store_check.py), and a read
never creates a store (usecases/stores.py): a typo, a missing directory or store, a server or
database that is down is exit 2 with one message naming the URI and what to do, from every
command and from the Python API alike, and the working directory is left as it was."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import scalesweep
from scalesweep.mlflow_names import store_uri_for_mlflow
from scalesweep.orchestrator.cli import main
from scalesweep.orchestrator.spec.errors import InputError
from scalesweep.orchestrator.tracking import sqlite_template
from scalesweep.orchestrator.tracking.store_check import check_store, form_problem
from tests.support.helpers import SWEEPS, free_port
from tests.support.helpers import scalesweep as run_cli

SMOKE = str(SWEEPS / "smoke.yaml")
HOW = ("(a tracking URI is sqlite:///PATH (a local file), http://HOST:PORT (an MLflow server) or "
       "postgresql://USER:PASSWORD@HOST:PORT/DB)")

# --- how a URI is written -------------------------------------------------------------------

FORMS = [
    ("htp://localhost:5000", f"unknown scheme 'htp'; did you mean http://localhost:5000? {HOW}"),
    ("postgres://db.example/mlflow",
     f"unknown scheme 'postgres'; did you mean postgresql://db.example/mlflow? {HOW}"),
    ("mlfow+x://h", f"unknown scheme 'mlfow+x' {HOW}"),
    ("mlflow.db", f"a path is not a tracking URI; did you mean sqlite:///mlflow.db? {HOW}"),
    ("/data/mlflow.db", f"a path is not a tracking URI; did you mean sqlite:////data/mlflow.db? {HOW}"),
    ("sqlite://mlflow.db", "a SQLite URI has three slashes before a relative path and four before "
                           "an absolute one; did you mean sqlite:///mlflow.db?"),
    ("sqlite://", "a SQLite URI has three slashes before a relative path and four before an "
                  "absolute one; did you mean sqlite:///mlflow.db?"),
    ("sqlite:///:memory:", "an in-memory SQLite store is lost when this command ends; name a "
                           "file, sqlite:///mlflow.db"),
    ("file:///tmp/mlruns", "MLflow no longer writes its file store (file:); use a SQLite file, "
                           "sqlite:////tmp/mlruns, or a server (`mlflow migrate-filestore` moves "
                           "an existing one)"),
    ("http://", f"names no host {HOW}"),
]


@pytest.mark.parametrize(("uri", "rule"), FORMS)
def test_a_uri_written_wrong_is_named_with_what_to_write(uri: str, rule: str) -> None:
    assert form_problem(uri) == rule


@pytest.mark.parametrize("uri", ["sqlite:///mlflow.db", "sqlite:////abs/m.db", "http://h:5000",
                                 "https://mlflow.example", "postgresql+psycopg://u@h:5432/db",
                                 "mysql+pymysql://h/db", "databricks", "databricks://profile"])
def test_uris_as_mlflow_reads_them_pass(uri: str) -> None:
    assert form_problem(uri) is None


def test_a_directory_given_as_the_uri_is_called_the_file_store_it_likely_is(cwd: Path) -> None:
    (cwd / "mlruns").mkdir()
    assert form_problem("mlruns") == ("mlruns is a directory, not a tracking URI (MLflow's retired "
                                      "file store?); `mlflow migrate-filestore` moves it into "
                                      "sqlite:///mlflow.db")


# --- whether the store is there ----------------------------------------------------------------


def _problem(uri: str, *, reading: bool, timeout_s: float | None = None) -> str:
    with pytest.raises(InputError) as err:
        if timeout_s is None:
            check_store(uri, reading=reading)
        else:
            check_store(uri, reading=reading, timeout_s=timeout_s)
    (problem,) = err.value.problems
    assert (err.value.source, problem.path, problem.value) == ("tracking store", "tracking URI", uri)
    return problem.rule


def test_sqlite_stores_to_read_must_exist_and_to_write_need_their_directory(cwd: Path) -> None:
    assert _problem("sqlite:///m.db", reading=True) == (
        f"no MLflow store at {cwd / 'm.db'} (a read never creates one); pass the URI the study "
        "ran with, by --tracking-uri or MLFLOW_TRACKING_URI")
    check_store("sqlite:///m.db", reading=False)  # a sweep may make a new store in a directory
    assert _problem("sqlite:///gone/m.db", reading=False) == (
        f"the directory {cwd / 'gone'} does not exist: create it, or fix the path (a sweep does "
        "not make a store's directory)")
    (cwd / "dir.db").mkdir()
    assert _problem("sqlite:///dir.db", reading=True) == f"{cwd / 'dir.db'} is a directory, not a SQLite file"
    (cwd / "notes.db").write_text("not a database")
    for reading in (True, False):
        assert _problem("sqlite:///notes.db", reading=reading) == \
            f"{cwd / 'notes.db'} is not a SQLite database"
    assert sqlite_template.seed_new_store("sqlite:///real.db")
    for reading in (True, False):
        check_store(f"sqlite:///{cwd / 'real.db'}", reading=reading)
    assert sorted(p.name for p in cwd.iterdir()) == ["dir.db", "notes.db", "real.db"]  # none made


def test_a_server_or_database_that_is_not_there_is_found_within_the_timeout() -> None:
    port = free_port()  # bound, then closed: nothing listens there
    assert _problem(f"http://127.0.0.1:{port}", reading=True).startswith(
        "cannot reach the MLflow server ([Errno 111] Connection refused) within 3 s; start it")
    assert _problem(f"postgresql://127.0.0.1:{port}/mlflow", reading=False) == (
        f"cannot connect to 127.0.0.1:{port} (Connection refused) within 3 s; start the "
        "database, or fix the host and port")


def test_a_server_that_accepts_and_never_answers_costs_the_timeout_not_a_hang() -> None:
    with socket.socket() as listener:  # the kernel completes connections; nobody answers them
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        rule = _problem(f"http://127.0.0.1:{port}", reading=False, timeout_s=0.5)
    assert rule.startswith("cannot reach the MLflow server (") and "within 0.5 s" in rule, rule


def test_a_server_that_is_not_mlflow_is_named_by_its_answer(mlflow_http_404: str) -> None:
    assert _problem(mlflow_http_404, reading=True) == (
        f"the server answered 404 at {mlflow_http_404}/health: is it an MLflow server?")


@pytest.fixture
def mlflow_http_404() -> Iterator[str]:
    """A web server on 127.0.0.1 that is not MLflow: 404 for everything."""
    import http.server
    import threading

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_error(404)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# --- every command, and the API, before anything starts ---------------------------------------


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str], *expected: str) -> str:
    capsys.readouterr()
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    for text in expected:
        assert text in err, (argv, err)
    return err


@pytest.mark.parametrize("argv", [
    ["report", "--experiment", "smoke"],
    ["predict", "--experiment", "smoke", "--world-size", "8"],
    ["predict", "--ledger"],
    ["advise", "--experiment", "smoke"],
    ["recommend", "--experiment", "smoke", "--world-size", "8"],
    ["ui"],
])
def test_read_commands_never_create_a_store(argv: list[str], cwd: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    _refused(argv, capsys, "error: tracking store: 1 problem",
             f"tracking URI = 'sqlite:///mlflow.db': no MLflow store at {cwd / 'mlflow.db'}")
    _refused([*argv, "--tracking-uri", "mlflow.db"], capsys,
             "tracking URI = 'mlflow.db': a path is not a tracking URI; did you mean sqlite:///mlflow.db?")
    assert list(cwd.iterdir()) == []


def test_the_api_refuses_with_the_cli_s_words(cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cli_err = _refused(["report", "--experiment", "smoke"], capsys)
    said = cli_err.removeprefix("error: ").strip()
    for call in (lambda: scalesweep.results("smoke"), lambda: scalesweep.studies(),
                 lambda: scalesweep.predict("smoke", world_size=8),
                 lambda: scalesweep.advise("smoke"),
                 lambda: scalesweep.recommend("smoke", world_size=8),
                 lambda: scalesweep.load(SMOKE).run(tracking_uri="sqlite:///gone/m.db")):
        with pytest.raises(InputError) as err:
            call()
        if "gone" not in str(err.value):
            assert str(err.value) == said
    assert list(cwd.iterdir()) == []


def test_a_missing_study_names_what_the_store_holds_and_what_the_sweeps_here_recorded(
        cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = cwd / "scalesweep_runs" / "wenet-4v16-0a89990f"
    state.mkdir(parents=True)
    (state / "scalesweep.json").write_text(json.dumps(
        {"experiment": "wenet-4v16", "tracking_uri": "sqlite:////elsewhere/mlflow.db"}))
    recorded = (f"the sweeps under {cwd / 'scalesweep_runs'} recorded wenet-4v16 at "
                "sqlite:////elsewhere/mlflow.db")
    _refused(["report", "--experiment", "wenet-4v16"], capsys,
             f"no MLflow store at {cwd / 'mlflow.db'} (a read never creates one); pass the URI "
             f"the study ran with, by --tracking-uri or MLFLOW_TRACKING_URI; {recorded}")
    MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}").create_experiment("smoke")
    _refused(["report", "--experiment", "wenet-4v16"], capsys,
             "report: 1 problem", "--experiment = 'wenet-4v16': no MLflow experiment named "
             f"'wenet-4v16' (at sqlite:///mlflow.db); this store holds smoke; {recorded}")
    with pytest.raises(InputError, match="this store holds smoke"):
        scalesweep.results("wenet-4v16")
    assert not (cwd / "reports").exists()


def test_a_relative_sqlite_uri_reads_the_store_of_the_directory_it_is_used_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # MLflow keeps one engine per URI string for the process's life: a notebook that reads
    # sqlite:///mlflow.db in one directory and then in another must see the second store
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        MlflowClient(f"sqlite:///{tmp_path / name / 'mlflow.db'}").create_experiment(name)
        monkeypatch.chdir(tmp_path / name)
        with pytest.raises(InputError, match=f"this store holds {name}$"):
            scalesweep.results("absent")


@pytest.mark.parametrize(("uri", "for_mlflow"), [
    ("sqlite:///m.db", "sqlite:///{here}/m.db"),
    ("sqlite:///runs/m.db?timeout=30", "sqlite:///{here}/runs/m.db?timeout=30"),
    ("sqlite:////abs/m.db", "sqlite:////abs/m.db"), ("sqlite:///:memory:", "sqlite:///:memory:"),
    ("http://127.0.0.1:5000", "http://127.0.0.1:5000"), ("postgresql://u@h/db", "postgresql://u@h/db")])
def test_only_a_relative_sqlite_path_is_made_absolute_for_mlflow(cwd: Path, uri: str,
                                                                 for_mlflow: str) -> None:
    assert store_uri_for_mlflow(uri) == for_mlflow.format(here=cwd)


def test_write_commands_refuse_before_ray_starts(cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gone = "sqlite:///gone/mlflow.db"
    missing_dir = f"the directory {cwd / 'gone'} does not exist"
    _refused(["solve", SMOKE, "--world-size", "8", "--tracking-uri", gone], capsys, missing_dir)
    _refused(["submit", "--address", "ray://127.0.0.1:1", SMOKE, "--tracking-uri", "htp://h:5000"],
             capsys, "unknown scheme 'htp'; did you mean http://h:5000?")
    state = cwd / "scalesweep_runs" / "smoke-01234567"
    state.mkdir(parents=True)
    (state / "sweep.yaml").write_text(Path(SMOKE).read_text())
    (state / "scalesweep.json").write_text(json.dumps(
        {"sweep_file": str(state / "sweep.yaml"), "overrides": [], "tracking_uri": gone,
         "parent_run_id": "0" * 32, "experiment": "smoke", "address": None}))
    _refused(["resume", str(state)], capsys, missing_dir)
    assert not (cwd / "gone").exists() and not (cwd / "mlflow.db").exists()


def test_run_refuses_a_typo_before_ray_starts(cwd: Path) -> None:
    proc = run_cli("run", SMOKE, "--tracking-uri", f"http://127.0.0.1:{free_port()}", cwd=cwd,
                   timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "cannot reach the MLflow server" in proc.stderr and "Traceback" not in proc.stderr
    assert "Ray" not in proc.stdout + proc.stderr  # no local Ray started, none connected to
    assert list(cwd.iterdir()) == []


def test_the_hint_reads_the_state_where_sweeps_write_it(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    from scalesweep.orchestrator.launch import run
    from scalesweep.orchestrator.usecases import stores

    assert stores.STATE_FILE == run.STATE_FILE
    monkeypatch.delenv(stores.STORAGE_ENV, raising=False)
    assert stores.storage_root() == run.storage_root()
    monkeypatch.setenv(stores.STORAGE_ENV, str(tmp_path))
    assert stores.storage_root() == run.storage_root() == tmp_path
