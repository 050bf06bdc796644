"""tests/unit/ starts no Ray and no server process (tests/conftest.py checks the fixtures and
markers at collection). A unit test that calls ``ray.init`` or starts an MLflow server anyway
fails here, at the call, naming where it belongs."""

from __future__ import annotations

from typing import Any, NoReturn

import pytest

from tests.support.helpers import MlflowServer


def _refuse(what: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise AssertionError(f"a unit test called {what}: a test that starts a Ray or a server "
                             "goes in tests/integration/")
    return refuse


@pytest.fixture(autouse=True)
def _no_ray_or_server(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    monkeypatch.setattr(ray, "init", _refuse("ray.init"))
    monkeypatch.setattr(MlflowServer, "start", _refuse("MlflowServer.start"))
