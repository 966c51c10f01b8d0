"""A real `tfkube server` process on a loopback port, and small httpx helpers."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


TEST_TAG = "TFK_TEST_TAG"
"""tests/conftest.py's TAG (a server passes it on to its workloads when told to)."""


@dataclass
class ServerProc:
    data_dir: Path
    port: int
    database_url: str | None
    env: dict[str, str]
    extra: list[str] = field(default_factory=list)
    prefix: list[str] = field(default_factory=list)
    """A command the server runs under (e.g. `unshare ...`): its argv's start."""
    proc: subprocess.Popen[bytes] | None = None
    setup_token: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.data_dir.parent / f"server-{self.port}.log"

    def start(self, timeout: float = 60) -> None:
        argv = [
            *self.prefix,
            sys.executable,
            "-m",
            "tfkube",
            "server",
            "--data-dir",
            str(self.data_dir),
            "--port",
            str(self.port),
            # The suite finds every process a server started by a tag in its environment.
            *(["--workload-env", TEST_TAG] if TEST_TAG in self.env else []),
            *self.extra,
        ]
        if self.database_url:
            argv += ["--database-url", self.database_url]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited:\n{self.log.read_text()[-4000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        else:
            raise RuntimeError(f"the server did not answer:\n{self.log.read_text()[-4000:]}")
        found = re.findall(r"/setup\?token=([A-Za-z0-9_-]+)", self.log.read_text())
        self.setup_token = found[-1] if found else None

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def rss(self) -> int:
        assert self.proc is not None
        return int(psutil.Process(self.proc.pid).memory_info().rss)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


PASSWORD = "correct horse battery"


class Api:
    """A signed-in user's API client (Bearer token), plus the admin's helpers."""

    def __init__(self, url: str, token: str, name: str) -> None:
        self.url = url
        self.name = name
        self.token = token
        self.http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        )

    def close(self) -> None:
        self.http.close()

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return self.http.get(path, **kw)

    def post(self, path: str, **kw: Any) -> httpx.Response:
        return self.http.post(path, **kw)

    def patch(self, path: str, **kw: Any) -> httpx.Response:
        return self.http.patch(path, **kw)

    def delete(self, path: str, **kw: Any) -> httpx.Response:
        return self.http.delete(path, **kw)

    def ok(self, response: httpx.Response, status: int = 200) -> Any:
        assert response.status_code == status, (response.status_code, response.text)
        return response.json() if response.content else None

    # admin helpers
    def new_user(self, name: str | None = None, **kw: Any) -> str:
        name = name or unique("user")
        self.ok(self.post("/api/v1/users", json={"name": name, "password": PASSWORD, **kw}), 201)
        return name

    def new_team(self, name: str | None = None, quota: dict[str, Any] | None = None) -> str:
        name = name or unique("team")
        self.ok(self.post("/api/v1/teams", json={"name": name, "quota": quota or {}}), 201)
        return name

    def add_member(self, team: str, user: str, role: str) -> None:
        self.ok(self.http.put(f"/api/v1/teams/{team}/members/{user}", json={"role": role}), 200)


def login(url: str, name: str, password: str = PASSWORD) -> tuple[httpx.Client, str]:
    """A cookie session: -> (client holding the cookie, its CSRF token)."""
    client = httpx.Client(base_url=url, timeout=60)
    r = client.post("/api/v1/auth/login", json={"name": name, "password": password})
    if r.status_code != 200:
        client.close()
        raise AssertionError(r.text)
    return client, r.json()["csrf_token"]


def token_for(url: str, name: str, password: str = PASSWORD) -> str:
    client, csrf = login(url, name, password)
    try:
        r = client.post(
            "/api/v1/tokens",
            json={"name": "tests"},
            headers={"X-CSRF-Token": csrf, "Origin": url},
        )
        assert r.status_code == 201, r.text
        return str(r.json()["token"])
    finally:
        client.close()


def api_for(url: str, name: str) -> Api:
    return Api(url, token_for(url, name), name)


def first_admin(server: ServerProc, name: str = "admin") -> Api:
    """Set up a fresh server with its one-time token (as the first person does) and sign
    in as that administrator."""
    assert server.setup_token, "the server printed no set-up link"
    r = httpx.post(
        f"{server.url}/api/v1/setup",
        json={"token": server.setup_token, "name": name, "password": PASSWORD},
    )
    assert r.status_code == 201, r.text
    return api_for(server.url, name)


def env_with(tag_name: str, tag: str, home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env[tag_name] = tag
    env["TFKUBE_HOME"] = str(home)
    return env


def poll(what: str, check: Callable[[], Any], timeout: float) -> Any:
    """`check()`'s first true value, polled every 0.5 s for up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)
    return value


def through_grpc(
    address: str,
    server_id: str,
    model: str,
    token: str,
    stranger: str,
    x: Any,
    version: int | None = None,
) -> Any:
    """TensorFlow Serving's own client (tensorflow-serving-api), unchanged, through the
    server's gRPC door at `address` (`host:port`): the token and the model server's id as
    metadata. -> the classes predicted for `x` (an array); on the way, GetModelStatus
    answers AVAILABLE (for `version`, which answered the prediction, when given), a call
    without a token or with a bad one is UNAUTHENTICATED, and `stranger`'s (another
    team's member) is told NOT_FOUND."""
    import grpc
    import numpy as np
    import pytest
    import tensorflow as tf
    from tensorflow_serving.apis import (
        get_model_status_pb2,
        model_service_pb2_grpc,
        predict_pb2,
        prediction_service_pb2_grpc,
    )

    def metadata(bearer: str | None) -> list[tuple[str, str]]:
        given = [("tfkube-model-server", server_id)]
        return given + ([("authorization", f"Bearer {bearer}")] if bearer else [])

    with grpc.insecure_channel(address) as channel:
        predictions = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        request = predict_pb2.PredictRequest()
        request.model_spec.name = model
        request.inputs["x"].CopyFrom(tf.make_tensor_proto(x, dtype=tf.float32))
        answer = predictions.Predict(request, metadata=metadata(token), timeout=120)
        status = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(
            get_model_status_pb2.GetModelStatusRequest(model_spec=request.model_spec),
            metadata=metadata(token),
            timeout=60,
        )
        (served,) = status.model_version_status
        assert served.state == 30, status  # AVAILABLE
        if version is not None:
            assert served.version == version, status
            assert answer.model_spec.version.value == version, answer.model_spec
        for bearer, code in ((None, grpc.StatusCode.UNAUTHENTICATED), ("tfk_nope", None)):
            with pytest.raises(grpc.RpcError) as refused:
                predictions.Predict(request, metadata=metadata(bearer), timeout=60)
            assert refused.value.code() == (code or grpc.StatusCode.UNAUTHENTICATED)
        with pytest.raises(grpc.RpcError) as hidden:  # another team's: no such model server
            predictions.Predict(request, metadata=metadata(stranger), timeout=60)
        assert hidden.value.code() == grpc.StatusCode.NOT_FOUND
    return np.asarray(tf.make_ndarray(answer.outputs["classes"]))


@contextlib.contextmanager
def in_process(settings: Any, **config: Any) -> Iterator[tuple[Any, httpx.Client]]:
    """The real app (`create_app`) under uvicorn in a thread of this process, so its
    objects and loggers are the test's -> (its Platform, a client signed in as the first
    admin with an API token). `config`: more of uvicorn.Config's."""
    import threading

    import uvicorn

    from tfkube.server.accounts import new_setup_token
    from tfkube.server.app import build_platform, create_app

    platform = build_platform(settings)
    app = create_app(settings, platform)
    server = uvicorn.Server(uvicorn.Config(app, port=settings.port, log_level="warning", **config))
    thread = threading.Thread(target=server.run, name="test-server")
    thread.start()
    base = settings.base_url
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        with platform.sessions() as db:  # the one it printed at start, made again
            setup = new_setup_token(db)
        with httpx.Client(base_url=base, timeout=60) as client:
            who = {"name": "admin", "password": PASSWORD}
            assert client.post("/api/v1/setup", json={"token": setup, **who}).status_code == 201
            csrf = client.post("/api/v1/auth/login", json=who).json()["csrf_token"]
            made = client.post(
                "/api/v1/tokens",
                json={"name": "tests"},
                headers={"X-CSRF-Token": csrf, "Origin": base},
            )
            client.cookies.clear()
            client.headers["Authorization"] = f"Bearer {made.json()['token']}"
            yield platform, client
    finally:
        server.should_exit = True
        thread.join(30)
