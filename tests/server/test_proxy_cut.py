"""An upstream that cuts its answer mid-body, through the server's proxy (seen once in a
real-node run: the proxy's stream raised, and uvicorn logged "Exception in ASGI
application" with a traceback).

The real app under uvicorn in a thread of this process (its loggers are this process's),
a real SQLite database, and a real upstream: a socket on loopback that answers with
headers, part of its body and a close. The proxy's resolver for model servers is swapped
for one naming that socket (what is tested is the stream, not who may use it: a valid API
token is still required). The client must see a cut answer, never a whole one; the server
logs one line saying so, no traceback; and the server goes on answering."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tfkube.server.api.routes import proxy
from tfkube.server.core.config import ServerSettings

from ._server import free_port, in_process

SENT = b"x" * 5000
"""What the upstream sends of its body before it closes (it promised 100,000 bytes)."""


class Upstream:
    """A socket on loopback that reads each request's head and calls `answer` with the
    connection and the request's method (its thread closes the connection after)."""

    backlog: int | None = None

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=self.backlog)
        self.port = self.sock.getsockname()[1]
        self.requests: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, name=type(self).__name__)
        self._thread.start()

    def answer(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed: the test is over
                return
            with conn:
                seen = b""
                while b"\r\n\r\n" not in seen:
                    data = conn.recv(65536)
                    if not data:
                        break
                    seen += data
                self.requests.append(seen.split(b" ", 1)[0])
                self.answer(conn)

    def close(self) -> None:
        with contextlib.suppress(OSError):  # wakes the accept() (Linux)
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(10)


class CuttingUpstream(Upstream):
    """Answers every request with a 200, `Content-Length: 100000`, SENT and a close."""

    def answer(self, conn: socket.socket) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        conn.sendall(head + b"Content-Length: 100000\r\n\r\n" + SENT)


class DroppingUpstream(Upstream):
    """Closes the first `drop` connections as soon as a request has come, with no answer
    (what a relay whose inside connection failed does); answers the rest with a 200."""

    drop = 1

    def answer(self, conn: socket.socket) -> None:
        if len(self.requests) > self.drop:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")


class HeldUpstream(Upstream):
    """Makes no connection until `gate` is set: its accept queue holds one connection
    (listen(0)) and a filler holds it, so the kernel drops every SYN, as a packet sent into
    a void is (a ClusterIP whose rules kube-proxy has not written yet). Once let in, answers
    every request with a 200."""

    backlog = 0

    def __init__(self) -> None:
        self.gate = threading.Event()
        super().__init__()
        self.filler = socket.create_connection(("127.0.0.1", self.port))

    def _serve(self) -> None:
        self.gate.wait()
        with contextlib.suppress(OSError):  # the filler's connection, first in the queue
            conn, _ = self.sock.accept()
            conn.close()
        super()._serve()

    def answer(self, conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")

    def close(self) -> None:
        self.gate.set()
        self.filler.close()
        super().close()


@contextlib.contextmanager
def _proxying(
    upstream: Upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[httpx.Client]:
    """The server (its model-server resolver naming `upstream`), signed in with an API
    token; the upstream closed after."""

    def resolver(*_: Any) -> proxy.Upstream:
        return proxy.Upstream(f"http://127.0.0.1:{upstream.port}")

    monkeypatch.setitem(proxy.TARGETS, "model", resolver)
    settings = ServerSettings(data_dir=tmp_path / "server", port=free_port(), cpus=2)
    try:
        # log_config=None: uvicorn's loggers propagate to the root, where caplog reads them.
        with in_process(settings, log_config=None) as (platform, client):
            try:
                yield client
            finally:
                platform.engine.close()
                platform.database.dispose()
    finally:
        upstream.close()


@pytest.fixture
def proxied(
    request: pytest.FixtureRequest,
    tfkube_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[httpx.Client, Upstream]]:
    """The server proxying to an upstream of the class the test names (indirect)."""
    upstream = request.param()
    with _proxying(upstream, tmp_path, monkeypatch) as client:
        yield client, upstream


@pytest.mark.parametrize("proxied", [CuttingUpstream], indirect=True)
def test_a_body_cut_upstream_is_cut_for_the_client_with_one_line_logged(
    proxied: tuple[httpx.Client, Upstream], caplog: pytest.LogCaptureFixture
) -> None:
    client, upstream = proxied
    caplog.set_level(logging.INFO)
    chunks: list[bytes] = []
    # A GET: no request body the upstream leaves unread (its close would then be a reset).
    with client.stream("GET", "/proxy/model/cut/v1/models/m") as answer:
        assert answer.status_code == 200  # sent before the cut
        with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"):
            chunks.extend(answer.iter_raw())
    assert b"".join(chunks) == SENT  # what came, and no end: the client sees a cut
    assert upstream.requests == [b"GET"]

    def said() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "cut its answer" in r.getMessage()]

    deadline = time.monotonic() + 10
    while not said() and time.monotonic() < deadline:
        time.sleep(0.05)
    (line,) = said()
    assert line.levelno == logging.WARNING
    assert "model cut" in line.getMessage()
    assert "RemoteProtocolError" in line.getMessage()
    assert all(r.exc_info is None for r in caplog.records), [
        r.getMessage() for r in caplog.records if r.exc_info
    ]
    logged = [r.getMessage() for r in caplog.records]
    assert not [m for m in logged if "ASGI" in m], logged
    # The server answers on.
    assert client.get("/api/v1/users/me").status_code == 200


@pytest.mark.parametrize(
    ("exc", "dropped"),
    [
        (proxy.UpstreamCut("cut"), True),
        (BaseExceptionGroup("task group", [proxy.UpstreamCut("cut")]), True),
        (BaseExceptionGroup("task group", [proxy.UpstreamCut("cut"), ValueError()]), False),
        (ValueError("a bug"), False),
        (None, False),
    ],
)
def test_only_a_cut_is_kept_out_of_uvicorns_log(exc: BaseException | None, dropped: bool) -> None:
    record = logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, "x", None, None)
    if exc is not None:
        record.exc_info = (type(exc), exc, None)
    assert proxy.QUIET_CUTS.filter(record) is not dropped


@pytest.mark.parametrize("proxied", [DroppingUpstream], indirect=True)
def test_a_get_with_no_answer_is_asked_once_more_and_a_post_is_not(
    proxied: tuple[httpx.Client, Upstream], caplog: pytest.LogCaptureFixture
) -> None:
    """A GET whose first connection closed before any answer gets the second try's answer,
    with one line logged (a notebook's page loads dozens of files through the proxy; one
    failed stylesheet is JupyterLab's "Error Loading Theme" dialog, seen once in CI, its
    cause not known); a POST, which may have changed something, gets 502."""
    client, upstream = proxied
    assert isinstance(upstream, DroppingUpstream)
    caplog.set_level(logging.INFO)
    r = client.get("/proxy/model/m/v1/models/m")
    assert (r.status_code, r.text) == (200, "ok")
    assert upstream.requests == [b"GET", b"GET"]
    again = [r.getMessage() for r in caplog.records if "asking once more" in r.getMessage()]
    assert len(again) == 1, again
    assert "model m gave no answer to GET" in again[0]

    upstream.drop = 3  # the next connection is dropped too
    r = client.post("/proxy/model/m/v1/models/m:predict", json={"instances": [1]})
    assert r.status_code == 502, r.text
    assert "cannot reach the model of m" in r.json()["error"]
    assert upstream.requests == [b"GET", b"GET", b"POST"]


@pytest.mark.parametrize("proxied", [HeldUpstream], indirect=True)
def test_a_get_whose_connection_is_never_made_is_asked_once_more_on_a_new_one(
    proxied: tuple[httpx.Client, Upstream],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A GET whose connection is never made (every SYN dropped) is given up after the
    proxy's connect timeout, not its 60 s, and asked once more on a new connection, which
    gets the answer: what the in-cluster server met when a job's TensorBoard Service had
    just been made (its name resolved before kube-proxy had written its rules; the first
    connection's retransmits stayed untranslated, and the member's request hung 60 s)."""
    client, upstream = proxied
    assert isinstance(upstream, HeldUpstream)
    caplog.set_level(logging.INFO)
    monkeypatch.setattr(proxy, "TIMEOUT", httpx.Timeout(60.0, connect=2.0, read=None))
    answers: list[httpx.Response] = []
    asking = threading.Thread(target=lambda: answers.append(client.get("/proxy/model/m/v1/m")))
    t0 = time.monotonic()
    asking.start()

    def again() -> list[str]:
        return [r.getMessage() for r in caplog.records if "asking once more" in r.getMessage()]

    deadline = t0 + 30
    while not again() and time.monotonic() < deadline:
        time.sleep(0.01)
    gave_up = time.monotonic() - t0
    upstream.gate.set()  # the second connection is made (its SYN retried within 1 s)
    asking.join(30)
    (said,) = again()
    assert "model m gave no answer to GET" in said, said
    assert "ConnectTimeout" in said, said
    assert 1.5 < gave_up < 10, gave_up  # the connect timeout (2 s), not the 60 s
    (r,) = answers
    assert (r.status_code, r.text) == (200, "ok")
    assert upstream.requests == [b"GET"]  # the first connection never reached it
