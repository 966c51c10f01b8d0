"""A job submitted through the server is parsed at most twice in the server's process: the
request body, and the stored job once, where the sync loop hands it to its engine. Counted
on the real server (uvicorn serving the FastAPI app in a thread of this process, so every
parse can be counted), a real SQLite database and the real local engine, whose job then
runs in processes of its own (the supervisor reads the job's folder: another process
boundary)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tfkube.server.core.config import ServerSettings
from tfkube.spec import TFJob

from ._server import free_port, in_process
from .conftest import targz

RUN_SH = {"run.sh": "#!/usr/bin/env bash\necho parsed-once\n"}


@pytest.fixture
def api(tfkube_home: Path, tmp_path: Path) -> Iterator[tuple[httpx.Client, str]]:
    """The server with its loops running, an admin's API token and a team it is in."""
    settings = ServerSettings(data_dir=tmp_path / "server", port=free_port(), cpus=2)
    with in_process(settings) as (_, client):
        yield _in_team(client), "t"


def _in_team(client: httpx.Client) -> httpx.Client:
    """The admin in team t, which has the code uploaded."""
    assert client.post("/api/v1/teams", json={"name": "t", "quota": {}}).status_code == 201
    assert client.put("/api/v1/teams/t/members/admin", json={"role": "member"}).is_success
    uploaded = client.post(
        "/api/v1/teams/t/artifacts",
        params={"name": "code", "filename": "code.tar.gz"},
        content=targz(RUN_SH),
        headers={"Content-Type": "application/octet-stream"},
    )
    assert uploaded.status_code == 201, uploaded.text
    return client


SYNC_LOOP = "tfkube-job-sync"
"""The thread of the server's sync loop (`JobService.start_loop`), which starts jobs."""


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Callable[[], Counter[str]]:
    """How many times a TFJob was validated (parsed) in this process so far: by the sync
    loop, and by everyone else (the requests). The loop may start a job while its submit
    answers, so only the thread tells the two apart."""
    count: Counter[str] = Counter()
    validate = TFJob.model_validate

    def counting(*args: Any, **kwargs: Any) -> TFJob:
        who = "sync" if threading.current_thread().name == SYNC_LOOP else "requests"
        count[who] += 1
        return validate(*args, **kwargs)

    monkeypatch.setattr(TFJob, "model_validate", counting)
    return lambda: Counter(count)


def _until_started(client: httpx.Client, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        job: dict[str, Any] = client.get(f"/api/v1/jobs/{job_id}").json()
        if not job["queued"] and job["phase"] in {"Running", "Succeeded", "Failed"}:
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} never started: {job}")


MANIFEST = """apiVersion: tfkube.io/v1alpha1
kind: TFJob
metadata: {name: manifest}
spec:
  replicas: {worker: {replicas: 2}}
  code: {source: "artifact:code"}
"""


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"name": "form", "workers": 2, "ps": 1, "code": "code"}, id="four-fields"),
        pytest.param({"manifest": MANIFEST}, id="manifest"),
    ],
)
def test_a_submitted_job_is_parsed_at_most_twice(
    api: tuple[httpx.Client, str], parses: Callable[[], Counter[str]], body: dict[str, Any]
) -> None:
    client, team = api
    assert not parses()
    answer = client.post(f"/api/v1/teams/{team}/jobs", json=body)
    assert answer.status_code == 201, answer.text
    job = _until_started(client, answer.json()["id"])
    assert parses() == Counter(requests=1, sync=1), (
        "the request body once, and the stored job once, when its engine takes it"
    )
    assert len(job["replicas"]) in (2, 3)
    done = client.get(f"/api/v1/jobs/{job['id']}").json()
    deadline = time.monotonic() + 120
    while done["phase"] not in {"Succeeded", "Failed"} and time.monotonic() < deadline:
        time.sleep(0.2)
        done = client.get(f"/api/v1/jobs/{job['id']}").json()
    assert done["phase"] == "Succeeded", done
    assert client.delete(f"/api/v1/jobs/{job['id']}").is_success
