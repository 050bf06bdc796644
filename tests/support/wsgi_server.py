"""A WSGI app (MLflow's REST handlers, as ``mlflow server`` runs them) served on 127.0.0.1 from a
thread of the test process: a real HTTP server without the seconds a server process takes to
start. ``stop`` closes the listening socket (connections are then refused, as when a server's
process dies); ``start`` listens again on the same port."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class ServedApp:
    def __init__(self, app: WsgiApp, *, http10: bool = False) -> None:
        """``http10``: one connection a request, so no kept-alive connection outlives a stop."""
        self.app = app
        self.http10 = http10
        self.port = 0
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServedApp:
        from werkzeug.serving import WSGIRequestHandler, make_server

        class Quiet(WSGIRequestHandler):
            protocol_version = "HTTP/1.0" if self.http10 else "HTTP/1.1"

            def log_request(self, *args: Any, **kwargs: Any) -> None:
                pass

        self._server = make_server("127.0.0.1", self.port, self.app, threaded=True,
                                   request_handler=Quiet)
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="wsgi-app",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            assert self._thread is not None
            self._thread.join()
            self._server = None
