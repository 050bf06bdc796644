"""Credentials in a tracking URI (``http://user:token@host:5000``): taken out of it as soon as
the command line is read, so no line printed, no sweep state written and no job entrypoint
ever holds them. MLflow's client reads them from MLFLOW_TRACKING_USERNAME and
MLFLOW_TRACKING_PASSWORD instead, and `submit` hands those to the job through its runtime_env
env vars (docs/cluster.md §4)."""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit, urlunsplit

USERNAME = "MLFLOW_TRACKING_USERNAME"
PASSWORD = "MLFLOW_TRACKING_PASSWORD"


def split(uri: str) -> tuple[str, dict[str, str]]:
    """The URI without its user info, and the environment that carries it."""
    if "://" not in uri or "@" not in uri.split("://", 1)[1].split("/", 1)[0]:
        return uri, {}
    parts = urlsplit(uri)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    env = {USERNAME: unquote(parts.username or "")}
    if parts.password is not None:
        env[PASSWORD] = unquote(parts.password)
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
    return {key: os.environ[key] for key in (USERNAME, PASSWORD) if os.environ.get(key)}
