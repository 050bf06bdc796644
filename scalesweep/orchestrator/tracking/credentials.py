"""Credentials in a tracking URI (``http://user:token@host:5000``,
``postgresql://user:pw@host/db``): taken out of it as soon as the command line is read, so no
line printed, no sweep state written and no job entrypoint ever holds them, and handed to
whoever reads them from the environment instead: MLflow's HTTP client reads
MLFLOW_TRACKING_USERNAME/PASSWORD, and only for http(s); a PostgreSQL store's driver is libpq
(psycopg 2 and 3), which reads PGUSER/PGPASSWORD when the URI has none. `submit` hands them
to the job through its runtime_env env vars (docs/cluster.md §4). Any other database scheme
with credentials is refused by name: nothing there would read them from the environment.

The URI's credentials are the URI's alone:

* they win over the same variables already in the environment (with a note when they differ:
  the user named them for this store);
* a URI without credentials gets the environment the user had, not those an earlier URI put
  there (two ``scalesweep.results`` calls on two stores in one process);
* PostgreSQL connections made in this process get the credentials of their own host, port and
  database at connect time, whatever the environment holds by then (SQLAlchemy's
  ``do_connect``): a pooled engine of one store never connects with another's.
"""

from __future__ import annotations

import os
import sys
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from scalesweep.orchestrator.spec.errors import InputError, Problem

USERNAME = "MLFLOW_TRACKING_USERNAME"
PASSWORD = "MLFLOW_TRACKING_PASSWORD"
#: what libpq reads when a connection string names no user or password
PG_USER = "PGUSER"
PG_PASSWORD = "PGPASSWORD"
_ENV_NAMES = {"http": (USERNAME, PASSWORD), "https": (USERNAME, PASSWORD),
              "postgresql": (PG_USER, PG_PASSWORD), "postgres": (PG_USER, PG_PASSWORD)}
_ALL = (USERNAME, PASSWORD, PG_USER, PG_PASSWORD)
PG_DEFAULT_PORT = 5432

#: clean URI -> the environment that carries its credentials
_by_uri: dict[str, dict[str, str]] = {}
#: what the environment held before a URI's credentials replaced it (None: unset)
_shell: dict[str, str | None] = {}
#: (host, port, database) -> libpq's keyword arguments user and password
_by_database: dict[tuple[str, int, str], dict[str, str]] = {}
_hooked = False


def split(uri: str) -> tuple[str, dict[str, str]]:
    """The URI without its user info, and the environment that carries it to its reader."""
    if "://" not in uri or "@" not in uri.split("://", 1)[1].split("/", 1)[0]:
        return uri, {}
    parts = urlsplit(uri)
    scheme = _scheme(uri)
    if scheme not in _ENV_NAMES:
        redacted = urlunsplit(parts._replace(netloc=f"***@{parts.netloc.rsplit('@', 1)[1]}"))
        raise InputError("--tracking-uri", [Problem(
            "--tracking-uri", redacted,
            f"credentials in a {parts.scheme} URI would be printed and stored with it, and "
            "nothing reads them from the environment: put them in the database's own client "
            "config, or put an MLflow server (http, basic auth) in front of it")])
    user_var, password_var = _ENV_NAMES[scheme]
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    env = {user_var: unquote(parts.username or "")}
    if parts.password is not None:
        env[password_var] = unquote(parts.password)
    return urlunsplit(parts._replace(netloc=netloc)), env


def strip(uri: str) -> str:
    """The URI without credentials; its credentials (none for a URI without) become the ones
    this process's environment holds, and PostgreSQL connections to its database use them."""
    clean, env = split(uri)
    if env:
        _by_uri[clean] = env
    env = _by_uri.get(clean, {})
    _use(env)
    if env and _scheme(clean) in ("postgresql", "postgres"):
        _register_database(clean, env)
    return clean


def job_env(uri: str) -> dict[str, str]:
    """The credentials a job on the cluster needs for ``uri`` (as ``strip`` returned it): the
    URI's own, else those for its scheme in the user's environment."""
    own = _by_uri.get(uri, {})
    return {key: value for key in _ENV_NAMES.get(_scheme(uri), ())
            if (value := own.get(key) or _users(key))}


def database_login(uri: str) -> dict[str, str]:
    """libpq's ``user`` and ``password`` for a PostgreSQL ``uri`` as ``strip`` returned it: its
    own, when the URI had them; else none (libpq then reads the environment, as MLflow's would)."""
    parts = urlsplit(uri)
    return dict(_by_database.get(((parts.hostname or "").lower(), parts.port or PG_DEFAULT_PORT,
                                  parts.path.lstrip("/")), {}))


def _scheme(uri: str) -> str:
    return urlsplit(uri).scheme.lower().split("+", 1)[0]  # postgresql+psycopg2 is libpq too


def _users(key: str) -> str | None:
    """The user's own value of a credential variable, before any URI's replaced it."""
    return _shell[key] if key in _shell else os.environ.get(key)


def _use(env: dict[str, str]) -> None:
    """Put ``env`` in the environment; the other credential variables an earlier URI set go
    back to what the user had."""
    for key in _ALL:
        if key not in env and key in _shell:
            value = _shell.pop(key)
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    differ = [key for key, value in env.items() if _users(key) not in (None, value)]
    if differ:
        print(f"note: the tracking URI's credentials are used, not {' and '.join(differ)} from "
              "the environment", file=sys.stderr)
    for key, value in env.items():
        _shell.setdefault(key, os.environ.get(key))
        os.environ[key] = value


def _register_database(clean: str, env: dict[str, str]) -> None:
    global _hooked
    parts = urlsplit(clean)
    key = ((parts.hostname or "").lower(), parts.port or PG_DEFAULT_PORT, parts.path.lstrip("/"))
    _by_database[key] = {"user": env[PG_USER],
                         **({"password": env[PG_PASSWORD]} if PG_PASSWORD in env else {})}
    if not _hooked:
        from sqlalchemy import event
        from sqlalchemy.engine import Engine

        event.listen(Engine, "do_connect", _connect_with_own_credentials)
        _hooked = True


def _connect_with_own_credentials(dialect: Any, conn_rec: Any, cargs: Any,
                                  cparams: dict[str, Any]) -> None:
    """SQLAlchemy's hook before each new connection: a PostgreSQL store's own credentials."""
    if dialect.name != "postgresql" or cparams.get("user"):
        return
    key = (str(cparams.get("host") or "").lower(), int(cparams.get("port") or PG_DEFAULT_PORT),
           str(cparams.get("dbname") or cparams.get("database") or ""))
    cparams.update(_by_database.get(key, {}))
