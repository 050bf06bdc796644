"""A tracking URI's credentials (scalesweep.orchestrator.tracking.credentials) are the URI's:
they win over the environment, stay with their URI when a process uses two stores, and are
what `submit` hands to the job (scalesweep.orchestrator.cluster.submit.job_env_vars)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import sqlalchemy

from scalesweep.orchestrator.cluster import submit
from scalesweep.orchestrator.tracking import credentials

ALICE = "http://alice:s3cr%40t@mlflow-a.example:5000"
BOB_DB = "postgresql://bob:p%3Aw@db-b.example:5433/mlflow"
CAROL_DB = "postgresql://carol:c@db-c.example/mlflow"
#: a second store, with no credentials in its URI
OTHER = "http://mlflow-b.example:5000"
#: the first store's URI as strip() gives it back (a resume's, from the sweep's state)
ALICE_CLEAN = "http://mlflow-a.example:5000"


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No credentials from an earlier test, in the module or in the environment (restored
    after the test: monkeypatch saves each variable before we change it)."""
    for key in (credentials.USERNAME, credentials.PASSWORD, credentials.PG_USER,
                credentials.PG_PASSWORD, "SCALESWEEP_STORAGE", "SCALESWEEP_DEBUG"):
        monkeypatch.delenv(key, raising=False)
    for name in ("_by_uri", "_shell", "_by_database"):
        monkeypatch.setattr(credentials, name, {})
    yield


def test_the_uris_credentials_win_over_the_environment_with_a_note(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(credentials.PG_USER, "shell-user")
    monkeypatch.setenv(credentials.PG_PASSWORD, "shell-pw")
    assert credentials.strip(BOB_DB) == "postgresql://db-b.example:5433/mlflow"
    assert (os.environ[credentials.PG_USER], os.environ[credentials.PG_PASSWORD]) == ("bob", "p:w")
    err = capsys.readouterr().err
    assert "the tracking URI's credentials are used, not PGUSER and PGPASSWORD" in err
    assert "p:w" not in err and "shell-pw" not in err
    credentials.strip(BOB_DB)  # the same again: the environment's own still differ, still noted
    assert "not PGUSER and PGPASSWORD" in capsys.readouterr().err


def test_a_second_uri_does_not_get_the_first_ones_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(credentials.PASSWORD, "the-users-own")
    credentials.strip(ALICE)
    assert os.environ[credentials.USERNAME] == "alice" and os.environ[credentials.PASSWORD] == "s3cr@t"
    other = credentials.strip(OTHER)
    # what the user had, not alice's
    assert credentials.USERNAME not in os.environ and os.environ[credentials.PASSWORD] == "the-users-own"
    assert credentials.job_env(other) == {credentials.PASSWORD: "the-users-own"}
    credentials.strip(ALICE_CLEAN)  # the first store again
    assert os.environ[credentials.USERNAME] == "alice"
    # each URI's own, whichever was stripped last
    assert credentials.job_env(ALICE_CLEAN)[credentials.PASSWORD] == "s3cr@t"
    assert credentials.job_env(other) == {credentials.PASSWORD: "the-users-own"}


def test_a_postgresql_connection_gets_its_own_databases_credentials() -> None:
    """SQLAlchemy's do_connect hook, as a pooled engine calls it for each new connection:
    by then the environment holds the last URI's credentials, not this database's."""
    clean = credentials.strip(BOB_DB)
    credentials.strip(CAROL_DB)
    for uri, want in ((clean, {"user": "bob", "password": "p:w"}),
                      ("postgresql://db-c.example/mlflow", {"user": "carol", "password": "c"}),
                      ("postgresql://db-b.example:5433/other", {}),
                      ("postgresql://db-d.example:5433/mlflow", {})):
        engine = sqlalchemy.create_engine(uri)  # connects only when used
        cargs, cparams = engine.dialect.create_connect_args(engine.url)
        engine.dialect.dispatch.do_connect(engine.dialect, None, cargs, cparams)
        assert {k: cparams[k] for k in ("user", "password") if k in cparams} == want, uri


def test_submit_passes_the_uris_credentials_to_the_job_and_no_other(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCALESWEEP_STORAGE", "/shared/runs")
    monkeypatch.setenv(credentials.PG_PASSWORD, "a-db-password")  # not the http store's
    uri = credentials.strip(ALICE)
    assert submit.job_env_vars(uri) == {"PYTHONUNBUFFERED": "1", credentials.USERNAME: "alice",
                                     credentials.PASSWORD: "s3cr@t", "SCALESWEEP_STORAGE": "/shared/runs"}
    other = credentials.strip(OTHER)
    assert submit.job_env_vars(other) == {"PYTHONUNBUFFERED": "1", "SCALESWEEP_STORAGE": "/shared/runs"}
    db = credentials.strip(BOB_DB)
    assert submit.job_env_vars(db) == {"PYTHONUNBUFFERED": "1", credentials.PG_USER: "bob",
                                    credentials.PG_PASSWORD: "p:w", "SCALESWEEP_STORAGE": "/shared/runs"}
