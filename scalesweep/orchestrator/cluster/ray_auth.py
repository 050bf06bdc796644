"""Ray's auth token: which token to present to a cluster, and switching this process to token
mode before ``ray.init``. Used by every command that connects to a cluster (run, resume, plan
--address, submit), so it lives apart from any of them."""

from __future__ import annotations

import contextlib
import importlib
import ipaddress
import os
import sys
from pathlib import Path

__all__ = ["AUTH_HINT", "auth_token", "enable_token_auth", "host_of", "is_loopback", "own_cluster_auth"]


def host_of(address: str) -> str:
    rest = address.split("://", 1)[-1].split("/", 1)[0]
    if rest.startswith("["):  # [::1]:8265
        return rest[1:].split("]", 1)[0]
    return rest.rsplit(":", 1)[0] if rest.count(":") == 1 else rest


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def auth_token(address: str) -> str | None:
    """The Ray token to present to the cluster at ``address``, or None (see module docs)."""
    mode = os.environ.get("RAY_AUTH_MODE", "").strip().lower()
    if mode and mode != "token":
        return None
    token = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    if token:
        return token
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if path:
        try:
            return Path(path).expanduser().read_text().strip() or None
        except OSError as exc:
            raise RuntimeError(f"RAY_AUTH_TOKEN_PATH={path} cannot be read ({exc.strerror})") from None
    default = Path.home() / ".ray" / "auth_token"
    if default.is_file() and (mode == "token" or is_loopback(host_of(address))):
        return default.read_text().strip() or None
    return None


def enable_token_auth(address: str) -> None:
    """Before ``ray.init(address)``: switch this process to token mode when :func:`auth_token`
    finds a token. Ray reads ``RAY_AUTH_MODE`` into its config at import, hence the refresh."""
    if os.environ.get("RAY_AUTH_MODE") or address == "auto" or auth_token(address) is None:
        return
    _token_mode()


def own_cluster_auth() -> None:
    """Before starting a Ray of our own: token mode, named. It is what Ray (2.52 on) picks for a
    new local cluster when the mode is unset, and then prints a warning that it did so, first
    thing in every run; named, the cluster is the same and the warning goes. A mode the user
    set (``disabled`` too) is kept, and a cluster the user started is never touched here."""
    if not os.environ.get("RAY_AUTH_MODE"):
        _token_mode()


def _token_mode() -> None:
    os.environ["RAY_AUTH_MODE"] = "token"
    if "ray" in sys.modules:
        with contextlib.suppress(Exception):  # private, may move; a fresh process needs none
            importlib.import_module("ray._raylet").Config.initialize("")


AUTH_HINT = ("the cluster wants Ray's auth token: export RAY_AUTH_MODE=token and RAY_AUTH_TOKEN=<token> "
             "(or RAY_AUTH_TOKEN_PATH=<file>, or put it in ~/.ray/auth_token); `ray get-auth-token` "
             "on the head prints it")
