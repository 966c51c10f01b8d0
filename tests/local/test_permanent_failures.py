"""Permanent failures are not retried: bad code is refused at submit (exit 2, nothing
started, the reason printed), and the launcher's own failures in a replica end the job at
once with the reason in status, while the training code's own exits (even 78 or 127)
are retried by policy."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import os
import tarfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tfkube.contract import EX_CONFIG, EX_NOTFOUND
from tfkube.engines.local import LocalBackend
from tfkube.launcher._fetch import MAX_UNPACKED_BYTES
from tfkube.planner import JobPhase, ReplicaState
from tfkube.spec import parse_job

from .conftest import MakeJob
from .test_cli import tfkube, write_job
from .test_engine import WAIT

Member = tuple[tarfile.TarInfo, bytes]


def member(name: str, data: bytes = b"x", kind: bytes = tarfile.REGTYPE, link: str = "") -> Member:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = 0o755
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, data


def bomb_header() -> bytes:
    """A .tar.gz whose one member declares 3 GiB (the data is never there: the header
    alone must get it refused, before anything is read or written)."""
    info = tarfile.TarInfo("big.bin")
    info.size = 3 << 30
    raw = io.BytesIO()
    with gzip.GzipFile(fileobj=raw, mode="wb") as gz:
        gz.write(member("run.sh", b"exit 0\n")[0].tobuf() + b"exit 0\n".ljust(512, b"\0"))
        gz.write(info.tobuf())
    return raw.getvalue()


def archive(members: list[Member]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.type == tarfile.REGTYPE else None)
    return raw.getvalue()


RUN = member("run.sh", b"#!/bin/sh\nexit 0\n")


@pytest.mark.parametrize(
    ("make", "hint"),
    [
        pytest.param(lambda: archive([RUN, member("../evil")]), "outside", id="dotdot"),
        pytest.param(lambda: archive([RUN, member("/etc/evil")]), "absolute", id="absolute"),
        pytest.param(
            lambda: archive([RUN, member("etc", kind=tarfile.SYMTYPE, link="/etc")]),
            "etc",
            id="symlink-out",
        ),
        pytest.param(
            lambda: archive([RUN, member("null", kind=tarfile.CHRTYPE)]),
            "special file",
            id="device",
        ),
        pytest.param(bomb_header, f"the limit is {MAX_UNPACKED_BYTES}", id="size-bomb"),
        pytest.param(lambda: archive([member("train.sh")]), "run.sh", id="no-entrypoint"),
    ],
)
def test_a_bad_archive_is_refused_at_submit(
    tfkube_home: Path,
    tmp_path: Path,
    code_server: Callable[[bytes], str],
    make: Callable[[], bytes],
    hint: str,
) -> None:
    data = make()
    url = code_server(data)
    sha = hashlib.sha256(data).hexdigest()
    job = write_job(tmp_path, "badcode", "", code={"source": url, "sha256": sha})
    result = tfkube("run", str(job))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "spec.code." in result.stderr
    assert hint in result.stderr
    jobs = tfkube_home / "jobs"
    assert not jobs.exists() or not any(jobs.iterdir()), "nothing half-created"


def test_a_folder_with_a_link_out_is_refused_at_submit(tfkube_home: Path, tmp_path: Path) -> None:
    job = write_job(tmp_path, "linkout", "exit 0\n")
    os.symlink("/etc", tmp_path / "code" / "etc")
    result = tfkube("run", str(job))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "spec.code.source" in result.stderr
    assert "'etc'" in result.stderr


@pytest.fixture
def code_server() -> Iterator[Callable[[bytes], str]]:
    """Serve bytes as a .tar.gz over http on 127.0.0.1 (the server is stopped after)."""
    served: dict[str, bytes] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = served.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def serve(data: bytes) -> str:
        served["/code.tar.gz"] = data
        return f"http://127.0.0.1:{server.server_address[1]}/code.tar.gz"

    yield serve
    server.shutdown()
    server.server_close()
    thread.join()


def test_a_launcher_failure_in_a_replica_ends_the_job_at_once(
    backend: LocalBackend, make_job: MakeJob
) -> None:
    job, base = make_job("envfails", "exit 0\n", policy={"backoffLimit": 5})
    raw = job.model_dump(by_alias=True)
    raw["spec"]["replicas"]["worker"]["env"] = {"BROKEN": {"command": "echo no >&2; exit 3"}}
    backend.submit(parse_job(raw), base)
    final = backend.wait(job.name, timeout=WAIT)
    assert final.phase is JobPhase.FAILED
    assert final.reason == "SetupFailed"
    assert final.restarts == 0, "never retried, although OnFailure with backoffLimit 5"
    assert "env BROKEN" in (final.message or "")
    worker = final.replicas[0]
    assert worker.state is ReplicaState.FAILED
    assert worker.exit_code == EX_CONFIG
    assert worker.message is not None
    assert "env BROKEN" in worker.message


@pytest.mark.parametrize("code", [EX_CONFIG, EX_NOTFOUND])
def test_the_training_code_s_own_exit_codes_are_retried(
    backend: LocalBackend, make_job: MakeJob, code: int
) -> None:
    job, base = make_job(
        f"own{code}",
        f"exit {code}\n",
        policy={"backoffLimit": 1, "backoff": {"baseSeconds": 0.1}},
    )
    backend.submit(job, base)
    final = backend.wait(job.name, timeout=WAIT)
    assert final.phase is JobPhase.FAILED
    assert final.reason == "BackoffLimitExceeded"
    assert final.restarts == 1
    assert final.replicas[0].exit_code == code
