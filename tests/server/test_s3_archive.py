"""An ended job's logs and outputs read back from its archive in a real S3 store
(SeaweedFS, tests/s3store.py) once retention removed the local copy: a real TensorFlow
job (the between-graph example, 1 PS + 1 worker) trains, is archived, the server starts
again with `--keep-local 0` and every answer (log listing, every log whole and from a
byte position, followed as SSE, the search paged by its cursor, the outputs listing, every
file's download, the folder packed, the scalars and progress, each replica's usage, the
final checkpoint and its download, the result, the CLI's logs, the dashboard's pages) is
the same as before, read from the bucket; TensorBoard and serving answer 409 naming
--keep-local (410 once the archive is gone too). An archive replaced by one with a `../`
member or a link is refused; `--archive-retention 0` deletes the archive. On SQLite, as
tests/server/test_s3_store.py (training is slow on two cores)."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tfkube
from s3store import S3Store
from server._server import Api, ServerProc, api_for, login

from .conftest import start_server, stop_server
from .test_s3_store import credentials_file, store_args

pytestmark = pytest.mark.tf
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mnist-between-graph"


@pytest.fixture(scope="module")
def bucket(s3_store: S3Store) -> str:
    return s3_store.bucket()


@pytest.fixture(scope="module")
def platform(
    tmp_path_factory: pytest.TempPathFactory, s3_store: S3Store, bucket: str
) -> Iterator[tuple[ServerProc, Api, list[str]]]:
    tmp = tmp_path_factory.mktemp("server-s3-archive")
    keys = credentials_file(tmp / "store-keys", s3_store.access_key, s3_store.secret_key)
    args = [*store_args(s3_store, bucket, keys), "--retention-interval", "0.5"]
    server, admin, tag = start_server(tmp, "sqlite", None, args)
    try:
        yield server, admin, args
    finally:
        stop_server(server, admin, tag)


def restart(server: ServerProc, extra: list[str]) -> None:
    server.stop()
    server.extra = extra
    server.start()


def outputs_at(api: Api, job_id: str, want: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while (got := api.ok(api.get(f"/api/v1/jobs/{job_id}"))["outputs_at"]) != want:
        assert time.monotonic() < deadline, f"the job's outputs_at stayed {got!r}, not {want!r}"
        time.sleep(0.3)


def folders(api: Api, job_id: str, path: str = "") -> Iterator[dict[str, Any]]:
    for entry in api.ok(api.get(f"/api/v1/jobs/{job_id}/outputs", params={"path": path})):
        yield entry
        if entry["is_dir"]:
            yield from folders(api, job_id, entry["path"])


def packed(body: bytes) -> dict[str, str]:
    """A downloaded folder's members: name -> sha256 of its bytes ("dir" for a folder)."""
    out = {}
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        for m in tar:
            assert m.isfile() or m.isdir(), m.name
            data = tar.extractfile(m) if m.isfile() else None
            out[m.name] = hashlib.sha256(data.read()).hexdigest() if data else "dir"
    return out


def answers(api: Api, job_id: str) -> dict[str, Any]:
    """Everything the API answers about the job's kept logs and outputs."""
    base = f"/api/v1/jobs/{job_id}"
    got: dict[str, Any] = {"logs": api.ok(api.get(f"{base}/logs"))}
    for f in got["logs"]:
        log = f"{base}/logs/{f['replica']}"
        at = {"attempt": f["attempt"]}
        got[f"{f['replica']}/{f['attempt']}"] = api.get(log, params=at).text
        got[f"{f['replica']}/{f['attempt']}@100"] = api.get(
            log, params={**at, "offset": 100, "limit": 300}
        ).text
        got[f"{f['replica']}/{f['attempt']}/follow"] = api.get(
            log, params={**at, "follow": "true", "offset": 50}
        ).text
        sse = api.get(log, params={**at, "offset": 200}, headers={"Accept": "text/event-stream"})
        assert sse.status_code == 200
        got[f"{f['replica']}/{f['attempt']}/sse"] = sse.text
    pages, cursor = [], None
    while True:
        params = {"q": "s", "limit": 3, **({"cursor": cursor} if cursor else {})}
        page = api.ok(api.get(f"{base}/logs/search", params=params))
        pages.append(page)
        if (cursor := page["next"]) is None:
            break
    got["search"] = pages
    got["search-paths"] = api.ok(
        api.get(f"{base}/logs/search", params={"q": "worker", "job_paths": "true"})
    )
    got["outputs"] = list(folders(api, job_id))
    for entry in got["outputs"]:
        if not entry["is_dir"]:
            r = api.get(f"{base}/outputs/{entry['path']}")
            assert r.status_code == 200
            assert r.headers["content-length"] == str(entry["size"])
            got[f"file {entry['path']}"] = hashlib.sha256(r.content).hexdigest()
    got["packed"] = packed(api.get(f"{base}/outputs/").content)
    # What the job page shows beside its logs: charts (TensorBoard's event files), each
    # replica's CPU and memory, the trained model and its download, the result.
    got["scalars"] = api.ok(api.get(f"{base}/scalars"))
    got["usage"] = api.ok(api.get(f"{base}/usage"))
    got["checkpoint"] = api.ok(api.get(f"{base}/checkpoint"))
    download = api.get(f"{base}/checkpoint/download")
    assert download.status_code == 200, download.text
    got["checkpoint.tar.gz"] = packed(download.content)
    job = api.ok(api.get(base))
    got["result"] = (job["result"], job["result_problem"])
    return got


def test_a_trained_job_is_read_back_from_its_archive(
    platform: tuple[ServerProc, Api, list[str]],
    s3_store: S3Store,
    bucket: str,
    tmp_path: Path,
) -> None:
    server, admin, args = platform
    user = admin.new_user()
    admin.add_member("default", user, "member")
    api = api_for(server.url, user)
    try:
        with tfkube.Client(server.url, api.token, team="default") as c:
            c.upload(EXAMPLE, "mnist")
            job = c.submit(name="kept", workers=1, ps=1, code="mnist", args=["--train_steps=40"])
            done = c.wait(job.id, timeout=600, poll=1.0)
            assert done.phase == "Succeeded", (done.reason, done.message)
            # A second job (a shell script, no training) to compare the first one with.
            c.upload(shell_code(tmp_path), "other")
            other = c.submit(name="other", workers=1, ps=0, code="other")
            assert c.wait(other.id, timeout=120, poll=0.5).phase == "Succeeded"
        key = f"tfk/site/outputs/default/{job.id}.tar"
        outputs_at(api, job.id, "local+archive")
        outputs_at(api, other.id, "local+archive")
        before = answers(api, job.id)
        before["compare"] = curves(api, job.id, other.id)
        assert any(f["replica"] == "worker-0" for f in before["logs"])
        assert len(before["search"]) > 2  # paged by its cursor
        assert any(e["path"] == "checkpoint" for e in before["outputs"])
        assert {s["tag"] for s in before["scalars"]["series"]} >= {"loss", "accuracy"}
        assert before["scalars"]["progress"]["total"] == 40
        assert before["usage"]["available"]
        # Samples every 2 s: a short job may have few or none (compared whatever they are).
        assert {u["replica"] for u in before["usage"]["replicas"]} <= {"ps-0", "worker-0"}
        prefix = before["checkpoint"]["prefix"]
        assert set(before["checkpoint.tar.gz"]) == {"checkpoint", *before["checkpoint"]["files"]}
        assert before["result"][0] is not None
        assert "test_accuracy" in before["result"][0]
        (local,) = server.data_dir.glob(f"**/outputs/{job.id}")
        assert (local / ".tfkube" / "logs" / "worker-0").is_dir()

        # Retention: the local copy goes at the next pass; everything is read from the bucket.
        restart(server, [*args, "--keep-local", "0"])
        outputs_at(api, job.id, "archive")
        assert not local.exists()
        after = answers(api, job.id)
        after["compare"] = curves(api, job.id, other.id)
        assert after.keys() == before.keys()
        for what in before:
            assert after[what] == before[what], what
        # TensorBoard and serving run on the output folder: they say it is gone and why.
        tb = api.get(f"/proxy/tensorboard/{job.id}/")
        assert tb.status_code == 409, tb.text
        assert "--keep-local" in tb.json()["detail"]
        assert "TensorBoard" in tb.json()["detail"]
        serve = api.post(f"/api/v1/jobs/{job.id}/model-servers", json={})
        assert serve.status_code == 409, serve.text
        assert "serving needs the job's output folder" in serve.json()["detail"]
        # The CLI (tfkube logs) and the dashboard read the same way.
        env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "TFKUBE_ENGINE": "server"}
        for name in ("TFKUBE_URL", "TFKUBE_TOKEN"):
            env.pop(name, None)
        signed = cli(env, "login", server.url, "--token", api.token, "--team", "default")
        assert signed.returncode == 0, signed.stderr
        logs = cli(env, "logs", "kept", "-r", "worker-0")
        assert logs.returncode == 0, logs.stderr
        assert logs.stdout.strip() == before["worker-0/0"].strip()
        browser, _ = login(server.url, user)
        try:
            page = browser.get(f"/jobs/{job.id}")
            assert page.status_code == 200
            assert "worker-0" in page.text
            part = browser.get(f"/jobs/{job.id}/part/outputs", params={"browse": "1"})
            assert "checkpoint" in part.text, part.text
            assert 'data-outputs-at="archive"' in part.text
            summary = browser.get(f"/jobs/{job.id}/part/summary")
            assert prefix in summary.text  # the trained model, from the archive
            assert "/proxy/tensorboard/" not in summary.text  # not offered: it would be a 409
        finally:
            browser.close()

        # An archive replaced in the bucket by one with a `../` member or a link is refused
        # whole (the index is checked again: the object's ETag changed).
        good = s3_store.client.get_object(Bucket=bucket, Key=key)["Body"].read()
        for bad, why in [
            (tar_with("../../escape.txt"), "'..'"),
            (tar_with("link", "/etc"), "link"),
        ]:
            s3_store.client.put_object(Bucket=bucket, Key=key, Body=bad)
            for path in ("logs", "logs/worker-0", "outputs", "outputs/checkpoint"):
                r = api.get(f"/api/v1/jobs/{job.id}/{path}")
                assert r.status_code == 502, (path, r.text)
                assert "refused" in r.json()["detail"]
                assert why in r.json()["detail"]
        s3_store.client.put_object(Bucket=bucket, Key=key, Body=good)
        assert api.get(f"/api/v1/jobs/{job.id}/logs/worker-0").text == before["worker-0/0"]

        # --archive-retention 0: the archive goes too, and the job says so.
        restart(server, [*args, "--keep-local", "0", "--archive-retention", "0"])
        outputs_at(api, job.id, "none")
        listed = s3_store.client.list_objects_v2(Bucket=bucket, Prefix="tfk/site/outputs/")
        assert listed.get("KeyCount", 0) == 0
        gone = api.get(f"/api/v1/jobs/{job.id}/logs/worker-0")
        assert gone.status_code == 404
        assert "removed by the server's retention" in gone.text
        for r in (
            api.get(f"/proxy/tensorboard/{job.id}/"),
            api.post(f"/api/v1/jobs/{job.id}/model-servers", json={}),
        ):
            assert r.status_code == 410, r.text
            assert "--archive-retention" in r.json()["detail"]
    finally:
        api.close()


def shell_code(tmp: Path) -> Path:
    folder = tmp / "other-code"
    folder.mkdir()
    (folder / "run.sh").write_text("#!/bin/sh\necho other\n")
    (folder / "run.sh").chmod(0o755)
    return folder


def curves(api: Api, job_id: str, other_id: str) -> Any:
    """The compare API's curves of the two jobs (the first one's are its scalars)."""
    found = api.ok(
        api.get("/api/v1/compare", params={"jobs": f"{job_id},{other_id}", "scalars": "true"})
    )
    assert found["scalars"][0]["series"], found["scalars"]
    return found["scalars"]


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "tfkube", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)


def tar_with(name: str, link: str = "") -> bytes:
    """A tar holding a good log plus one member breaking a rule."""
    body = io.BytesIO()
    with tarfile.open(fileobj=body, mode="w") as tar:
        log = b"hello\n"
        info = tarfile.TarInfo(".tfkube/logs/worker-0/0.log")
        info.size = len(log)
        tar.addfile(info, io.BytesIO(log))
        bad = tarfile.TarInfo(name)
        if link:
            bad.type, bad.linkname = tarfile.SYMTYPE, link
            tar.addfile(bad)
        else:
            bad.size = len(log)
            tar.addfile(bad, io.BytesIO(log))
    return body.getvalue()
