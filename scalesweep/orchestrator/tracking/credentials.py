"""Credentials in a tracking URI (``http://user:token@host:5000``,
``postgresql://user:pw@host/db``): taken out of it as soon as the command line is read, so no
line printed, no sweep state written and no job entrypoint ever holds them, and handed to
whoever reads them from the environment instead: MLflow's HTTP client reads
MLFLOW_TRACKING_USERNAME/PASSWORD, and only for http(s); a PostgreSQL store's driver is libpq
(psycopg 2 and 3), which reads PGUSER/PGPASSWORD when the URI has none. `submit` hands them
to the job through its runtime_env env vars (docs/cluster.md §4). Any other database scheme
with credentials is refused by name: nothing there would read them from the environment."""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit, urlunsplit

from scalesweep.orchestrator.spec.errors import InputError, Problem

USERNAME = "MLFLOW_TRACKING_USERNAME"
PASSWORD = "MLFLOW_TRACKING_PASSWORD"
#: what libpq reads when a connection string names no user or password
PG_USER = "PGUSER"
PG_PASSWORD = "PGPASSWORD"
_ENV_NAMES = {"http": (USERNAME, PASSWORD), "https": (USERNAME, PASSWORD),
              "postgresql": (PG_USER, PG_PASSWORD), "postgres": (PG_USER, PG_PASSWORD)}


def split(uri: str) -> tuple[str, dict[str, str]]:
    """The URI without its user info, and the environment that carries it to its reader."""
    if "://" not in uri or "@" not in uri.split("://", 1)[1].split("/", 1)[0]:
        return uri, {}
    parts = urlsplit(uri)
    scheme = parts.scheme.lower().split("+", 1)[0]  # postgresql+psycopg2 is libpq too
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
    """The URI without credentials; the credentials move into this process's environment (an
    explicit MLFLOW_TRACKING_USERNAME/PASSWORD already set wins)."""
    clean, env = split(uri)
    for key, value in env.items():
        os.environ.setdefault(key, value)
    return clean


def job_env() -> dict[str, str]:
    """The credentials a job on the cluster needs, from this process's environment."""
    return {key: os.environ[key] for key in (USERNAME, PASSWORD, PG_USER, PG_PASSWORD) if os.environ.get(key)}
