"""Bounded inputs, against a real `tfkube server` (local engine, SQLite) on loopback: what
an attacker with a member's token sends to make the server spend memory and time, drop
connections or answer 500 (issue 17, item 7).

- a YAML alias bomb as a job manifest, and one as a CLI job file;
- bodies larger than their bound: declared (refused before a byte is read), streamed
  (cut off as they pass the bound), and a multipart upload over the code limit, with the
  server's resident memory sampled while it streams;
- control characters in names: a checkpoint a job named with a newline, a NUL in a tar
  member, in an uploaded file name, in an output path, a token name, a description;
- download names that a job chose, sent as RFC 6266 / RFC 5987 headers.
"""

from __future__ import annotations

import gzip
import io
import json
import select
import socket
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest

from server._server import Api, ServerProc, api_for, free_port
from server.conftest import start_server, stop_server, targz, upload, wait_job

MiB = 2**20
CODE_LIMIT = 512 * MiB
"""The server's limit for a code upload (the launcher's download limit)."""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProc, Api, Api, str]]:
    """A server, its admin, a member of a fresh team, the team's name."""
    server, admin, tag = start_server(
        tmp_path_factory.mktemp("inputs"),
        "sqlite",
        None,
        ["--cpus", "2", "--grpc-port", str(free_port())],
    )
    try:
        team = admin.new_team()
        member = admin.new_user()
        admin.add_member(team, member, "member")
        api = api_for(server.url, member)
        try:
            yield server, admin, api, team
        finally:
            api.close()
    finally:
        stop_server(server, admin, tag)


def alias_bomb(levels: int) -> str:
    """A Kubeflow TFJob whose `kind` is 9**levels strings: a few hundred bytes of YAML."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + f"\napiVersion: kubeflow.org/v1\nkind: *a{levels - 1}\n"


class RssSampler:
    """The server's resident memory, sampled every 20 ms while a block runs."""

    def __init__(self, server: ServerProc) -> None:
        self.server = server
        self.before = server.rss()
        self.peak = self.before
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.server.rss())
            time.sleep(0.02)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def grew_mib(self) -> float:
        return (self.peak - self.before) / MiB


# -- YAML ----------------------------------------------------------------------------------


def test_an_alias_bomb_manifest_is_refused_before_it_is_built(
    site: tuple[ServerProc, Api, Api, str],
) -> None:
    server, _, api, team = site
    bomb = alias_bomb(8)  # 424 bytes; 43 million strings once expanded
    assert len(bomb) < 500
    with RssSampler(server) as rss:
        started = time.monotonic()
        r = api.post(f"/api/v1/teams/{team}/jobs", json={"manifest": bomb}, timeout=120)
        took = time.monotonic() - started
    print(
        f"alias bomb ({len(bomb)} bytes): {r.status_code} in {took:.2f} s, answer "
        f"{len(r.content):,} bytes, server RSS peak +{rss.grew_mib:.0f} MiB"
    )
    assert r.status_code == 422, r.text[:300]
    assert len(r.content) < 10_000, "the refusal does not echo the expanded document"
    assert "20,000 values" in r.text, r.text[:300]
    assert took < 2, f"refused in {took:.2f} s"
    assert rss.grew_mib < 50, f"the server grew by {rss.grew_mib:.0f} MiB"


def test_a_deeply_nested_manifest_is_a_422_not_a_500(
    site: tuple[ServerProc, Api, Api, str],
) -> None:
    _, _, api, team = site
    r = api.post(f"/api/v1/teams/{team}/jobs", json={"manifest": "a: " + "[" * 5000})
    assert r.status_code == 422, r.text[:300]
    assert "64 levels" in r.text


def test_the_cli_refuses_an_alias_bomb_job_file(tmp_path: Path) -> None:
    job = tmp_path / "bomb.yaml"
    job.write_text(alias_bomb(6))
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tfkube", "render", str(job)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-500:]
    assert "20,000 values" in done.stderr
    assert len(done.stderr) < 10_000
    assert time.monotonic() - started < 30


# -- bodies --------------------------------------------------------------------------------


def _post(
    server: ServerProc, api: Api, path: str, content_type: str, length: int | None
) -> socket.socket:
    """A POST whose head is sent (with `Content-Length: length`, or chunked when None)
    and whose body is left to the caller."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    size = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        f"Authorization: Bearer {api.token}\r\nContent-Type: {content_type}\r\n"
        f"{size}\r\n\r\n".encode()
    )
    return sock


def _answer(sock: socket.socket, timeout: float) -> bytes:
    """What the server answered within `timeout` (b'' when nothing)."""
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and b"\r\n\r\n" not in data:
        ready, _, _ = select.select([sock], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data


@pytest.mark.parametrize(
    ("path", "content_type", "length"),
    [
        ("artifacts?name=big&filename=big.tar.gz", "application/octet-stream", 700 * MiB),
        ("jobs", "application/json", 100 * MiB),
    ],
    ids=["upload", "json"],
)
def test_a_declared_oversized_body_is_refused_before_it_is_read(
    site: tuple[ServerProc, Api, Api, str], path: str, content_type: str, length: int
) -> None:
    server, _, api, team = site
    with _post(server, api, f"/api/v1/teams/{team}/{path}", content_type, length) as sock:
        answer = _answer(sock, 10)  # not a byte of the body sent
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"connection: close" in answer.lower()


def _stream_until_answered(
    sock: socket.socket, chunks: Iterator[bytes], most: int
) -> tuple[int, bytes]:
    """Send chunks until the server answers (or `most` bytes went); -> (sent, answer)."""
    sent = 0
    for chunk in chunks:
        ready, _, _ = select.select([sock], [], [], 0)
        if ready or sent >= most:
            break
        try:
            sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            break
        sent += len(chunk)
    return sent, _answer(sock, 30)


def _chunked(data: bytes, count: int) -> Iterator[bytes]:
    piece = f"{len(data):x}\r\n".encode() + data + b"\r\n"
    for _ in range(count):
        yield piece


def test_a_streamed_json_body_is_cut_off_at_its_bound(
    site: tuple[ServerProc, Api, Api, str],
) -> None:
    server, _, api, team = site
    sock = _post(server, api, f"/api/v1/teams/{team}/jobs", "application/json", None)
    with sock:
        sent, answer = _stream_until_answered(sock, _chunked(b" " * MiB, 64), 64 * MiB)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert sent < 16 * MiB, f"{sent / MiB:.0f} MiB were sent before the answer"


def test_a_multipart_upload_over_the_limit_is_cut_off_while_it_streams(
    site: tuple[ServerProc, Api, Api, str],
) -> None:
    """The dashboard's way: multipart, `kind` before the file. 700 MiB offered; the
    server answers 413 once the file passes the 512 MiB code limit, with its memory
    flat (the file goes to disk as it comes, and stops there)."""
    server, _, api, team = site
    boundary = uuid.uuid4().hex
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\nbig\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="kind"\r\n\r\ncode\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
        'filename="big.tar.gz"\r\nContent-Type: application/gzip\r\n\r\n'
    ).encode()
    sock = _post(
        server,
        api,
        f"/api/v1/teams/{team}/artifacts",
        f"multipart/form-data; boundary={boundary}",
        None,
    )

    def body() -> Iterator[bytes]:
        yield f"{len(head):x}\r\n".encode() + head + b"\r\n"
        yield from _chunked(b"\0" * MiB, 700)

    with sock, RssSampler(server) as rss:
        started = time.monotonic()
        sent, answer = _stream_until_answered(sock, body(), 701 * MiB)
        took = time.monotonic() - started
    print(
        f"multipart upload: {sent / MiB:.0f} MiB sent before the answer, {took:.1f} s, "
        f"server RSS {rss.before / MiB:.0f} MiB, peak +{rss.grew_mib:.0f} MiB"
    )
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert b"512" in answer or b"536,870,912" in answer
    assert sent < CODE_LIMIT + 32 * MiB, f"{sent / MiB:.0f} MiB were read before the refusal"
    assert rss.grew_mib < 64, f"the server grew by {rss.grew_mib:.0f} MiB"
    incoming = server.data_dir / "blobs" / ".incoming"
    deadline = time.monotonic() + 10
    while any(incoming.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(incoming.iterdir()), "a refused upload leaves nothing behind"


def test_a_grpc_message_over_the_bound_is_refused_before_its_token_is_read(
    site: tuple[ServerProc, Api, Api, str],
) -> None:
    """The server's gRPC listener (TensorFlow Serving's API through the server): grpcio
    reads a whole message before the handler sees the call's token. With no bound (it
    was -1) a caller with no token at all made the server hold all of a 256 MiB message
    (up to 2 GiB a call) before it was told UNAUTHENTICATED; now the REST proxy's bound
    holds, RESOURCE_EXHAUSTED."""
    import grpc

    from tfkube.server.core.inputs import MAX_PROXY_BODY_BYTES

    server = site[0]
    port = server.extra[server.extra.index("--grpc-port") + 1]
    predict = "/tensorflow.serving.PredictionService/Predict"
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(predict)
        with RssSampler(server) as rss, pytest.raises(grpc.RpcError) as caught:
            call(b"\0" * 256 * MiB, timeout=120)
        seen = f"{caught.value.code()}: {caught.value.details()} (+{rss.grew_mib:.0f} MiB)"
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, seen
        assert rss.grew_mib < MAX_PROXY_BODY_BYTES / MiB, seen
        with pytest.raises(grpc.RpcError) as caught:
            call(b"", timeout=30)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


# -- control characters in names -------------------------------------------------------------


def _tar_with_pax_path(path: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        run = b"#!/bin/sh\necho hi\n"
        info = tarfile.TarInfo("run.sh")
        info.size, info.mode = len(run), 0o755
        tar.addfile(info, io.BytesIO(run))
        info = tarfile.TarInfo("ok.txt")
        info.pax_headers = {"path": path}
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    return gzip.compress(buffer.getvalue(), mtime=0)


def test_a_nul_in_a_tar_member_is_a_400_naming_it(site: tuple[ServerProc, Api, Api, str]) -> None:
    _, _, api, team = site
    r = upload(api, team, "nul-member", _tar_with_pax_path("evil\x00.txt"))
    assert r.status_code == 400, r.text
    assert "evil" in r.json()["detail"]
    assert "control character" in r.json()["detail"]


def _multipart(boundary: str, fields: dict[str, str], files: list[tuple[str, bytes]]) -> bytes:
    """A form body written by hand: file names go as raw bytes (httpx, like browsers,
    would percent-escape control characters)."""
    out = b""
    for key, value in fields.items():
        out += (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'
        ).encode()
    for name, data in files:
        out += (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="files"; '
                f'filename="{name}"\r\nContent-Type: text/plain\r\n\r\n'
            ).encode()
            + data
            + b"\r\n"
        )
    return out + f"--{boundary}--\r\n".encode()


@pytest.mark.parametrize(
    "filename", ["run\x00.sh", "a\tb.txt", "dir/\x1b[31mred.txt"], ids=["nul", "tab", "esc"]
)
def test_control_characters_in_uploaded_file_names_are_refused(
    site: tuple[ServerProc, Api, Api, str], filename: str
) -> None:
    _, _, api, team = site
    boundary = uuid.uuid4().hex
    body = _multipart(
        boundary, {"name": "loose", "kind": "code"}, [("run.sh", b"#!/bin/sh\n"), (filename, b"x")]
    )
    r = api.post(
        f"/api/v1/teams/{team}/artifacts",
        content=body,
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == "files"


def test_a_nul_in_a_query_parameter_names_it(site: tuple[ServerProc, Api, Api, str]) -> None:
    _, _, api, team = site
    r = api.post(
        f"/api/v1/teams/{team}/artifacts",
        params={"name": "x", "filename": "a\x00.tar.gz"},
        content=targz({"run.sh": "#!/bin/sh\n"}),
        headers={"Content-Type": "application/octet-stream"},
    )
    assert r.status_code in {400, 422}, r.text
    assert r.json()["errors"][0]["field"] == "filename"


@pytest.mark.parametrize("name", ["laptop\x00", "two\nlines"], ids=["nul", "newline"])
def test_control_characters_in_a_token_name_are_refused(
    site: tuple[ServerProc, Api, Api, str], name: str
) -> None:
    _, _, api, _ = site
    r = api.post("/api/v1/tokens", json={"name": name})
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == "name"


def test_a_nul_in_a_job_description_is_refused(site: tuple[ServerProc, Api, Api, str]) -> None:
    _, _, api, team = site
    r = api.post(
        f"/api/v1/teams/{team}/jobs",
        json={"name": "described", "workers": 1, "code": "nothing", "description": "a\x00b"},
    )
    assert r.status_code == 422, r.text
    assert "description" in {e["field"] for e in r.json()["errors"]}


# -- names a job chose: checkpoints and outputs -------------------------------------------------

ODD_FOLDER = 'résumé "final"; v2'
"""Quotes, a semicolon, accents: each breaks a hand-built
`filename="..."`. (Control characters cannot reach a download name: the URL guard
refuses them in paths, and a checkpoint named with one is refused.)"""
ODD_FILE = 'été "x".txt'
WRITER = {
    "run.sh": '#!/usr/bin/env bash\nexec python3 "$(dirname "$0")/writer.py"\n',
    "writer.py": f"""import os
out = os.environ["TFKUBE_LOG_DIR"]
# A checkpoint index naming a checkpoint whose name holds a newline, and its files.
with open(os.path.join(out, "checkpoint"), "w") as f:
    f.write('model_checkpoint_path: "bad\\nname"\\n')
for suffix in (".index", ".data-00000-of-00001"):
    open(os.path.join(out, "bad\\nname" + suffix), "w").close()
os.makedirs(os.path.join(out, {ODD_FOLDER!r}))
with open(os.path.join(out, {ODD_FOLDER!r}, "f.txt"), "w") as f:
    f.write("kept\\n")
with open(os.path.join(out, {ODD_FILE!r}), "w") as f:
    f.write("odd\\n")
""",
}


@pytest.fixture(scope="module")
def odd_job(site: tuple[ServerProc, Api, Api, str]) -> dict[str, Any]:
    _, _, api, team = site
    api.ok(upload(api, team, "odd-names", targz(WRITER)), 201)
    job = api.ok(
        api.post(
            f"/api/v1/teams/{team}/jobs",
            json={"name": "odd-names", "workers": 1, "code": "odd-names"},
        ),
        201,
    )
    done = wait_job(api, job["id"], {"Succeeded", "Failed"})
    assert done["phase"] == "Succeeded", done
    return done


def _filename_star(header: str) -> str:
    """The RFC 5987 `filename*` of a Content-Disposition, decoded."""
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key.lower() == "filename*":
            charset, _, encoded = value.partition("''")
            assert charset.upper() == "UTF-8"
            return unquote(encoded, encoding="utf-8", errors="strict")
    raise AssertionError(f"no filename* in {header!r}")


def test_a_checkpoint_named_with_a_newline_is_a_422_not_a_dropped_connection(
    site: tuple[ServerProc, Api, Api, str], odd_job: dict[str, Any]
) -> None:
    _, _, api, _ = site
    try:
        r = api.get(f"/api/v1/jobs/{odd_job['id']}/checkpoint/download")
    except httpx.RemoteProtocolError as exc:
        pytest.fail(f"the server dropped the connection: {exc}")
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == "checkpoint"
    assert "newline" in r.text


def test_download_names_a_job_chose_are_escaped(
    site: tuple[ServerProc, Api, Api, str], odd_job: dict[str, Any]
) -> None:
    _, _, api, _ = site
    base = f"/api/v1/jobs/{odd_job['id']}/outputs"
    try:
        folder = api.get(f"{base}/{ODD_FOLDER}")
        file = api.get(f"{base}/{ODD_FILE}")
    except httpx.RemoteProtocolError as exc:
        pytest.fail(f"the server dropped the connection: {exc}")
    assert folder.status_code == 200, folder.text
    header = folder.headers["content-disposition"]
    assert header.isascii()
    assert _filename_star(header) == ODD_FOLDER + ".tar.gz"
    assert header.startswith('attachment; filename="')
    assert header.count('"') == 2, header
    assert file.status_code == 200
    assert file.text == "odd\n"
    assert _filename_star(file.headers["content-disposition"]) == ODD_FILE


def test_control_characters_in_an_output_path_are_refused(
    site: tuple[ServerProc, Api, Api, str], odd_job: dict[str, Any]
) -> None:
    _, _, api, _ = site
    for path in ("a%00b.txt", "x%0Ay"):
        r = api.get(f"/api/v1/jobs/{odd_job['id']}/outputs/{path}")
        assert r.status_code in {400, 422}, (path, r.status_code, r.text)
        assert r.json()["errors"], r.text
    r = api.get(f"/api/v1/jobs/{odd_job['id']}/outputs", params={"path": "a\x00"})
    assert r.status_code in {400, 422}, r.text
    assert r.json()["errors"][0]["field"] == "path"


def test_refusals_are_json(site: tuple[ServerProc, Api, Api, str]) -> None:
    server, _, _, _ = site
    r = httpx.get(f"{server.url}/api/v1/jobs/%00")
    assert r.status_code == 400
    assert json.loads(r.text)["errors"][0]["field"] == "(path)"
