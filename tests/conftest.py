"""Fixtures shared by several test files (helpers that are not fixtures: tests/helpers.py).

Imports of Ray and MLflow's server happen inside the fixtures, so a test file that uses none of
them does not pay for them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory (the test's current directory until it ends)."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """A local Ray of 4 CPUs for the module's tests, shut down after them."""
    import ray

    # address="local": our own cluster, never one somebody else started on this machine
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


# --- MLflow's own tracking server, in this process, with a switch --------------------------


@dataclass
class MlflowHttp:
    """MLflow's REST handlers (the Flask app ``mlflow server`` runs) on 127.0.0.1, in a thread of
    the test process: a real HTTP tracking server without the seconds a server process takes
    to start. While ``down`` it answers every request 503; ``requests`` counts what reached
    the handlers, by path."""

    uri: str
    down: bool = False
    requests: list[str] = field(default_factory=list)
    #: while set, every request is held unanswered (a server that accepts and never answers)
    #: until ``release`` is set; ``held`` counts them
    hung: bool = False
    release: threading.Event = field(default_factory=threading.Event)
    held: int = 0

    def count(self, endpoint: str) -> int:
        return sum(1 for path in self.requests if path.endswith(endpoint))


@pytest.fixture(scope="session")
def mlflow_http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowHttp]:
    from mlflow.server import app, handlers
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    from werkzeug.serving import WSGIRequestHandler, make_server

    root = tmp_path_factory.mktemp("mlflow_http")
    # The handlers build their store once per process from the environment and then set the
    # process's default tracking URI to it; handing them the store keeps that default alone.
    store = SqlAlchemyStore(f"sqlite:///{root / 'server.db'}", str(root / "artifacts"))
    handlers._tracking_store = store  # type: ignore[assignment]
    state = MlflowHttp(uri="")

    def switch(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if state.hung:
            state.held += 1
            state.release.wait(timeout=120)  # bounded: a test that died cannot hold it forever
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"was hung for the test"]
        if state.down:
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"down for the test"]
        state.requests.append(str(environ.get("PATH_INFO", "")))
        return app(environ, start_response)

    class Quiet(WSGIRequestHandler):
        def log_request(self, *args: Any, **kwargs: Any) -> None:
            pass

    server = make_server("127.0.0.1", 0, switch, threaded=True, request_handler=Quiet)
    state.uri = f"http://127.0.0.1:{server.server_port}"
    thread = threading.Thread(target=server.serve_forever, name="mlflow-http", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        thread.join()
        handlers._tracking_store = None
