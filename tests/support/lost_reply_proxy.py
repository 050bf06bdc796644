"""A TCP proxy on 127.0.0.1 that loses one reply: the request reaches the server, which does
the work and commits it, and the client never hears back, as when a server (or the database
behind it) restarts between its commit and its reply.

It sits in front of an HTTP/1.0 server (tests/support/wsgi_server.py with ``http10``: one
request a connection, closed after its reply), so a request is its headers and
``Content-Length`` bytes, and a reply is all the server sends until it closes."""

from __future__ import annotations

import socket
import threading

#: a bound for a stuck test, never reached when the server answers
IO_TIMEOUT_S = 60.0


class LostReplyProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.lost: list[str] = []  # the request lines whose reply was dropped
        self._drop: str | None = None  # the path whose next reply is dropped
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._thread = threading.Thread(target=self._serve, name="lost-reply-proxy", daemon=True)

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LostReplyProxy:
        self._thread.start()
        return self

    def drop_next(self, path_suffix: str) -> None:
        """The reply to the next request whose path ends with ``path_suffix`` is lost."""
        with self._lock:
            self._drop = path_suffix

    def stop(self) -> None:
        # a close alone leaves the thread blocked in accept(); a shutdown wakes it (Linux)
        self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(timeout=IO_TIMEOUT_S)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # closed by stop()
                return
            threading.Thread(target=self._forward, args=(conn,), daemon=True).start()

    def _forward(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(IO_TIMEOUT_S)
            request = _read_request(conn)
            if not request:
                return
            reply = self._ask_upstream(request)
            line = request.split(b"\r\n", 1)[0].decode("latin-1")
            if self._take_drop(line):
                self.lost.append(line)
                return  # closed with no reply: the server has done the work
            conn.sendall(reply)

    def _take_drop(self, request_line: str) -> bool:
        path = request_line.split(" ")[1] if request_line.count(" ") >= 2 else ""
        with self._lock:
            if self._drop is not None and path.split("?")[0].endswith(self._drop):
                self._drop = None
                return True
        return False

    def _ask_upstream(self, request: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", self.upstream_port), timeout=IO_TIMEOUT_S) as up:
            up.sendall(request)
            chunks = []
            while chunk := up.recv(65536):  # an HTTP/1.0 server closes after its reply
                chunks.append(chunk)
        return b"".join(chunks)


def _read_request(conn: socket.socket) -> bytes:
    """One whole request: its headers, then the body their Content-Length gives."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = 0
    for header in head.split(b"\r\n")[1:]:
        name, _, value = header.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body
