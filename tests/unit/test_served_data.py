"""Data a server serves to a cluster's replicas (issue 18 point 3, issue 19): the pure
parts. The launcher's reading of the data door's answers, the tar the door streams, which
folder a replica fetches, the pod environment the renderer gives each role, the claim
the door takes. The whole path against a real control plane, server and S3 store:
tests/cluster/test_k8s_data.py."""

from __future__ import annotations

import io
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from tfkube import contract
from tfkube.engines._served import share_of, tar_stream
from tfkube.kube.names import DATA_TOKEN_KEY, code_token_secret_name
from tfkube.launcher._data import MAX_WAIT, MIN_WAIT, Fail, Wait, answer_step
from tfkube.launcher._settings import contract_from_env
from tfkube.render import RenderOptions, render_job
from tfkube.server.core.security import (
    DATA_CLAIM,
    SHIP_CLAIM,
    ClaimError,
    CodeClaim,
    bearer_claim,
    sign_claim,
)
from tfkube.spec import SpecError, TFJob, parse_job


@pytest.mark.parametrize(
    ("status", "retry_after", "attempt", "expected"),
    [
        (503, "2", 0, Wait(2.0, "staging data: 1.0 of 2.0 MiB")),
        (503, None, 0, Wait(MIN_WAIT * 2, "staging data: 1.0 of 2.0 MiB")),
        (503, "3600", 0, Wait(MAX_WAIT, "staging data: 1.0 of 2.0 MiB")),
        (503, "soon", 0, Wait(MIN_WAIT * 2, "staging data: 1.0 of 2.0 MiB")),
        (0, None, 0, Wait(MIN_WAIT, "staging data: 1.0 of 2.0 MiB")),
        (502, None, 3, Wait(MIN_WAIT * 8, "staging data: 1.0 of 2.0 MiB")),
        (500, None, 30, Wait(MAX_WAIT, "staging data: 1.0 of 2.0 MiB")),
    ],
)
def test_the_launcher_waits_while_the_server_stages_or_is_away(
    status: int, retry_after: str | None, attempt: int, expected: Wait
) -> None:
    assert answer_step(status, "staging data: 1.0 of 2.0 MiB", retry_after, attempt) == expected


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 422])
def test_a_refusal_is_permanent_with_the_servers_reason(status: int) -> None:
    step = answer_step(status, "staging s3://b/p: nothing there", None, 0)
    assert isinstance(step, Fail)
    assert step.permanent
    assert "nothing there" in step.message
    bare = answer_step(status, "", None, 0)
    assert isinstance(bare, Fail)
    assert str(status) in bare.message


def test_a_replica_fetches_its_shard_folder_or_the_whole_view() -> None:
    assert share_of("worker-1", sharded=True) == "worker-1"
    assert share_of("worker-1", sharded=False) == ""


def test_the_door_streams_a_tar_that_unpacks_to_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "view"
    deep = folder / "a" / ("long-name-" * 12)  # past ustar's 100 characters: PAX
    deep.mkdir(parents=True)
    (folder / "top.bin").write_bytes(b"\x01" * 513)  # one byte into a second block
    (deep / "f.txt").write_bytes(b"hello\n")
    (folder / "empty").write_bytes(b"")
    (folder / "link").symlink_to("/etc/passwd")  # never sent
    data = b"".join(tar_stream(folder))
    assert len(data) % tarfile.BLOCKSIZE == 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {
            "a",
            f"a/{'long-name-' * 12}",
            f"a/{'long-name-' * 12}/f.txt",
            "empty",
            "top.bin",
        }
        top = tar.extractfile("top.bin")
        assert top is not None
        assert top.read() == b"\x01" * 513
        assert all(m.uid == 0 and m.mode & 0o022 == 0 for m in members.values())
    assert b"".join(tar_stream(tmp_path / "missing")) == b"\0" * 1024  # an empty tar


def job_of(data: dict[str, Any] | None = None) -> TFJob:
    spec: dict[str, Any] = {
        "replicas": {"ps": {"replicas": 1}, "worker": {"replicas": 2}},
        "code": {"source": "https://server/api/v1/code/" + "a" * 64},
    }
    if data is not None:
        spec["storage"] = {"data": data}
    return parse_job({"metadata": {"name": "d"}, "spec": spec})


def _env_of(objects: list[dict[str, Any]], role: str) -> dict[str, Any]:
    job = next(
        o
        for o in objects
        if o["kind"] == "Job" and o["metadata"]["labels"].get("tfkube.io/replica-type") == role
    )
    container = job["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e for e in container["env"]}


def test_workers_get_the_data_door_the_ps_not() -> None:
    door = "http://server/api/v1/data/j1"
    objects = render_job(
        job_of({"source": "s3://bkt/p", "credentials": "keys", "shard": "byWorker"}),
        RenderOptions(namespace="team-a", managed=True, data_url=door),
    )
    worker = _env_of(objects, "worker")
    assert worker[contract.DATA_URL]["value"] == door
    ref = worker[contract.DATA_TOKEN]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": code_token_secret_name("d"), "key": DATA_TOKEN_KEY}
    ps = _env_of(objects, "ps")
    assert contract.DATA_URL not in ps
    assert contract.DATA_TOKEN not in ps


def test_a_data_set_never_goes_into_a_shared_claim() -> None:
    with pytest.raises(SpecError) as caught:
        render_job(
            job_of({"claimName": "team-datasets"}),
            RenderOptions(namespace="team-a", data_url="http://server/api/v1/data/j1"),
        )
    assert [e.field for e in caught.value.errors] == ["spec.storage.data.claimName"]


def test_the_entrypoint_never_sees_the_data_token() -> None:
    env = {
        contract.JOB: "d",
        contract.ROLE: "worker",
        contract.INDEX: "0",
        contract.CLUSTER: '{"worker": ["h:1"]}',
        contract.COMMAND: '["true"]',
        contract.WORK_DIR: "/w",
        contract.DATA_URL: "http://server/api/v1/data/j1",
        contract.DATA_TOKEN: "secret-claim",
    }
    out = contract_from_env(env).environment(env)
    assert contract.DATA_URL not in out
    assert contract.DATA_TOKEN not in out


def test_the_door_takes_only_a_data_claim_of_the_job() -> None:
    key = b"k" * 32
    now = time.time()
    data = sign_claim(key, CodeClaim("j1", DATA_CLAIM, now + 60))
    assert bearer_claim(f"Bearer {data}", key, DATA_CLAIM, now).job == "j1"
    assert bearer_claim(f"bearer  {data}", key, DATA_CLAIM, now).job == "j1"
    ship = sign_claim(key, CodeClaim("j1", SHIP_CLAIM, now + 60))
    expired = sign_claim(key, CodeClaim("j1", DATA_CLAIM, now - 1))
    forged = sign_claim(b"x" * 32, CodeClaim("j1", DATA_CLAIM, now + 60))
    for header in ("", "Bearer", "Bearer ", f"Basic {data}", data, f"Bearer {ship}",
                   f"Bearer {expired}", f"Bearer {forged}", "Bearer tfk_member_token"):  # fmt: skip
        with pytest.raises(ClaimError):
            bearer_claim(header, key, DATA_CLAIM, now)


def test_the_servers_cache_is_bounded_as_the_local_engines(tmp_path: Path) -> None:
    from tfkube.engines import served_cache_limit

    assert served_cache_limit(tmp_path / "c", "500MiB") == 500 * 2**20
    assert served_cache_limit(tmp_path / "c", "off") is None
    share = served_cache_limit(tmp_path / "c", "")
    assert share is not None
    assert share > 0
    with pytest.raises(ValueError, match="TFKUBE_DATA_CACHE_LIMIT"):
        served_cache_limit(tmp_path / "c", "lots")


# -- the launcher's fetch against a real door on loopback ---------------------------------


class _Door:
    """A data door on loopback answering from a script of (status, body, headers), one
    per request (the last repeated), recording what it was asked."""

    def __init__(self, answers: list[tuple[int, bytes, dict[str, str]]]) -> None:
        import http.server
        import threading

        self.answers = answers
        self.asked: list[tuple[str, str]] = []
        door = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                door.asked.append((self.path, self.headers.get("Authorization", "")))
                status, body, headers = door.answers[min(len(door.asked), len(door.answers)) - 1]
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/api/v1/data/j1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)

    def __enter__(self) -> _Door:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _tar_of(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_the_launcher_waits_for_the_staging_then_unpacks_its_data(tmp_path: Path) -> None:
    from tfkube.launcher._data import fetch_data

    staging = json_body({"detail": "staging data: 1.0 of 2.0 MiB"})
    door = _Door(
        [
            (503, staging, {"Retry-After": "0"}),
            (503, staging, {"Retry-After": "0"}),
            (200, _tar_of({"a/x.bin": b"xyz", "b.txt": b"hello"}), {}),
        ]
    )
    said: list[str] = []
    data, work = tmp_path / "data", tmp_path / "work"
    data.mkdir()
    (data / "left-over").write_text("from an earlier start that died mid-fetch")
    try:
        size = fetch_data(door.url, "claim-1", "worker-1", data, work, 30, said.append)
        again = fetch_data(door.url, "claim-1", "worker-1", data, work, 30, said.append)
    finally:
        door.close()
    assert size > 0
    assert again == 0  # a restarted container of the same pod: nothing fetched
    assert files_of(data) == {"a/x.bin": b"xyz", "b.txt": b"hello"}
    assert (work / contract.DATA_READY_FILE).is_file()
    assert said == ["waiting for the data: staging data: 1.0 of 2.0 MiB"]  # once per change
    assert door.asked == [("/api/v1/data/j1/worker-1", "Bearer claim-1")] * 3


def test_a_failed_staging_fails_the_replica_for_good_with_its_reason(tmp_path: Path) -> None:
    from tfkube.launcher._data import fetch_data
    from tfkube.launcher._fetch import FetchError

    reason = "staging s3://b/p/: s3://b/p/x: the store at http://s answered NoSuchKey"
    with (
        _Door([(410, json_body({"detail": reason}), {})]) as door,
        pytest.raises(FetchError) as caught,
    ):
        fetch_data(door.url, "claim-1", "worker-0", tmp_path / "d", tmp_path / "w", 30)
    assert caught.value.permanent
    assert reason in str(caught.value)
    assert not (tmp_path / "w" / contract.DATA_READY_FILE).exists()


def test_an_unsafe_data_archive_is_refused(tmp_path: Path) -> None:
    from tfkube.launcher._data import fetch_data
    from tfkube.launcher._fetch import FetchError

    with (
        _Door([(200, _tar_of({"../escape.txt": b"x"}), {})]) as door,
        pytest.raises(FetchError) as caught,
    ):
        fetch_data(door.url, "claim-1", "worker-0", tmp_path / "d", tmp_path / "w", 30)
    assert caught.value.permanent
    assert "the data" in str(caught.value)
    assert not (tmp_path / "escape.txt").exists()


def test_a_server_that_never_answers_is_a_temporary_failure(tmp_path: Path) -> None:
    from tfkube.launcher._data import fetch_data
    from tfkube.launcher._fetch import FetchError

    with _Door([(502, b"", {})]) as door, pytest.raises(FetchError) as caught:
        fetch_data(door.url, "claim-1", "worker-0", tmp_path / "d", tmp_path / "w", 1.5)
    assert not caught.value.permanent
    assert "no data after 2s" in str(caught.value) or "no data after 1s" in str(caught.value)


def json_body(value: dict[str, str]) -> bytes:
    import json

    return json.dumps(value).encode()


def files_of(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }
