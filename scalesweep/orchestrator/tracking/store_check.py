"""Is a tracking URI a store this command can use? Asked before anything starts (Ray, a parent
run, a store file), so that a typo, a missing directory or a database that is down costs the
user one message and a few seconds, not a Ray start and MLflow's retries.

Two questions, asked in this order:

* the URI's form (``form_problem``): a scheme MLflow has a store for, written so MLflow reads it
  as meant. A bare path gets "did you mean sqlite:///PATH?": MLflow would take it for its
  retired file store. `submit` asks only this, since the store is the cluster's to reach.
* the store itself (``check_store``): a SQLite file that exists (to read) or a directory that
  does (to write), a server that answers /health, a database that accepts a connection with the
  URI's credentials, all within ``timeout_s``.

A problem is an ``InputError`` (exit 2) naming the URI, which never holds a password here:
tracking/credentials.py took it out when the command line was read.
"""

from __future__ import annotations

import difflib
import os
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from scalesweep.orchestrator.spec.errors import InputError, Problem
from scalesweep.orchestrator.tracking import credentials
from scalesweep.orchestrator.tracking.sqlite_template import sqlite_path

#: the name the problems go under, the same from the CLI (--tracking-uri, MLFLOW_TRACKING_URI)
#: and the API (tracking_uri=)
SOURCE = "tracking store"
FIELD = "tracking URI"
SERVERS = ("http", "https")
#: SQLAlchemy's database schemes MLflow runs on (each may carry a driver: postgresql+psycopg)
DATABASES = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}
#: stores that only their own service can check: passed to MLflow as they are
UNCHECKED = ("databricks",)
KNOWN = ("sqlite", *SERVERS, *DATABASES, *UNCHECKED)
SQLITE_HEADER = b"SQLite format 3\x00"
#: how long a server or database may take to answer: a healthy one answers /health or a login
#: in milliseconds, and the whole command should fail within 5 s, Python's start included
TIMEOUT_S = 3.0
HOW = ("a tracking URI is sqlite:///PATH (a local file), http://HOST:PORT (an MLflow server) or "
       "postgresql://USER:PASSWORD@HOST:PORT/DB")


def check_store(uri: str, *, reading: bool, timeout_s: float = TIMEOUT_S) -> None:
    """``uri`` as a store to read from (``reading``: it must exist already, since a read never
    creates one) or to write to; an ``InputError`` naming the first thing that is wrong."""
    rule = form_problem(uri) or _store_problem(uri, reading, timeout_s)
    if rule is not None:
        raise InputError(SOURCE, [Problem(FIELD, uri, rule)])


def form_problem(uri: str) -> str | None:
    """What is wrong with how ``uri`` is written, or None."""
    if "://" not in uri:
        return None if uri in UNCHECKED else _bare_path(uri)
    scheme = uri.split("://", 1)[0].lower()
    base = scheme.split("+", 1)[0]
    if base == "file":
        return ("MLflow no longer writes its file store (file:); use a SQLite file, "
                f"sqlite:///{uri.split('://', 1)[1] or 'mlflow.db'}, or a server "
                "(`mlflow migrate-filestore` moves an existing one)")
    if base not in KNOWN:
        close = difflib.get_close_matches(base, KNOWN, n=1, cutoff=0.6)
        guess = f"; did you mean {close[0]}://{uri.split('://', 1)[1]}?" if close else ""
        return f"unknown scheme {scheme!r}{guess} ({HOW})"
    if base == "sqlite":
        return _sqlite_form(uri)
    if base in SERVERS and not urlsplit(uri).hostname:
        return f"names no host ({HOW})"
    return None


def _bare_path(uri: str) -> str:
    shown = uri or "mlflow.db"
    if Path(shown).is_dir():
        return (f"{shown} is a directory, not a tracking URI (MLflow's retired file store?); "
                "`mlflow migrate-filestore` moves it into sqlite:///mlflow.db")
    return f"a path is not a tracking URI; did you mean sqlite:///{shown}? ({HOW})"


def _sqlite_form(uri: str) -> str | None:
    if not uri.lower().startswith("sqlite:///"):
        rest = uri.split("://", 1)[1]
        return (f"a SQLite URI has three slashes before a relative path and four before an "
                f"absolute one; did you mean sqlite:///{rest or 'mlflow.db'}?")
    if sqlite_path(uri) is None:
        return ("an in-memory SQLite store is lost when this command ends; name a file, "
                "sqlite:///mlflow.db")
    return None


def _store_problem(uri: str, reading: bool, timeout_s: float) -> str | None:
    base = uri.split("://", 1)[0].lower().split("+", 1)[0] if "://" in uri else uri
    if base == "sqlite":
        path = sqlite_path(uri)
        assert path is not None  # the form check refused a URI without a file
        return _sqlite_problem(path, reading)
    if base in SERVERS:
        return _server_problem(uri, timeout_s)
    if base in DATABASES:
        return _database_problem(uri, base, timeout_s)
    return None


def _sqlite_problem(path: Path, reading: bool) -> str | None:
    where = path.absolute()
    if path.is_dir():
        return f"{where} is a directory, not a SQLite file"
    if not path.exists():
        if reading:
            return (f"no MLflow store at {where} (a read never creates one); pass the URI the "
                    "study ran with, by --tracking-uri or MLFLOW_TRACKING_URI")
        if not path.parent.is_dir():
            return (f"the directory {where.parent} does not exist: create it, or fix the path "
                    "(a sweep does not make a store's directory)")
        if not os.access(path.parent, os.W_OK | os.X_OK):
            return f"cannot create a file in {where.parent} (permission denied)"
        return None
    try:
        with path.open("rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except OSError as exc:
        return f"cannot read {where} ({exc.strerror or exc})"
    if head and head != SQLITE_HEADER:
        return f"{where} is not a SQLite database"
    if not reading and not os.access(path, os.W_OK):
        return f"cannot write {where} (permission denied)"
    return None


def _server_problem(uri: str, timeout_s: float) -> str | None:
    url = uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            if resp.status >= 500:
                return f"the MLflow server answered {resp.status} at {url}"
    except urllib.error.HTTPError as exc:  # a 4xx or 5xx from something that is there
        return f"the server answered {exc.code} at {url}: is it an MLflow server?"
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        return (f"cannot reach the MLflow server ({reason}) within {timeout_s:g} s; start it "
                "(mlflow server --host 127.0.0.1 --port PORT), or fix the host and port")
    return None


def _database_problem(uri: str, base: str, timeout_s: float) -> str | None:
    deadline = time.monotonic() + timeout_s
    parts = urlsplit(uri)
    if parts.hostname:  # no host: a local socket, which only the driver can try
        port = parts.port or DATABASES[base]
        try:
            socket.create_connection((parts.hostname, port), timeout=timeout_s).close()
        except OSError as exc:
            return (f"cannot connect to {parts.hostname}:{port} ({exc.strerror or exc}) within "
                    f"{timeout_s:g} s; start the database, or fix the host and port")
    if base == "postgresql":
        return _postgres_login(uri, max(1.0, deadline - time.monotonic()))
    return None


def _postgres_login(uri: str, timeout_s: float) -> str | None:
    """Log in as MLflow will (the URI's own credentials, which credentials.py keeps, else the
    environment's): a wrong password or a database that does not exist is found here, not
    after Ray has started."""
    try:
        import psycopg
    except ImportError:  # psycopg2 users: MLflow's own connection will tell
        return None
    conninfo = "postgresql://" + uri.split("://", 1)[1]
    try:
        # libpq's connect_timeout counts whole seconds, and takes 2 for anything less
        login = credentials.database_login(uri)
        psycopg.connect(conninfo, connect_timeout=max(2, round(timeout_s)), user=login.get("user"),
                        password=login.get("password")).close()
    except psycopg.ProgrammingError:  # options only SQLAlchemy reads: MLflow's call will tell
        return None
    except psycopg.OperationalError as exc:
        said = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        return f"the database refused the connection: {said}"
    return None
