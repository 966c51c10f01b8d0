"""Big pages for the dashboard's scale tests and its benchmark (benchmarks/dashboard):
a team with 1,000 jobs waiting in the local queue, and a `tfkube server --engine
kubernetes` on the test control plane with one 1,000-replica job of fake pods (KWOK),
its operator running out of cluster (tests/cluster/_support.py's Operator)."""

from __future__ import annotations

import io
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from server._server import Api

TINY_CODE = "#!/bin/sh\necho hello\n"


def tiny_code() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("run.sh")
        info.size, info.mode = len(TINY_CODE), 0o755
        tar.addfile(info, io.BytesIO(TINY_CODE.encode()))
    return buffer.getvalue()


def upload_tiny(api: Api, team: str, name: str = "tiny") -> dict[str, Any]:
    r = api.post(
        f"/api/v1/teams/{team}/artifacts",
        params={"name": name, "filename": "tiny.tar.gz"},
        content=tiny_code(),
        headers={"Content-Type": "application/octet-stream"},
    )
    return dict(api.ok(r, 201))


def crowd(admin: Api, api: Api, team: str, count: int = 1000, threads: int = 4) -> list[str]:
    """`count` jobs in `team` that all wait in the queue: the team's quota (0.1 CPU) is
    smaller than any job, so none starts (real submissions through the API)."""
    admin.ok(admin.http.patch(f"/api/v1/teams/{team}", json={"quota": {"cpu": 0.1}}))
    upload_tiny(api, team)

    def submit(i: int) -> str:
        body = {"name": f"sweep-{i:04d}", "workers": 1 + i % 4, "ps": i % 2, "code": "tiny"}
        return str(api.ok(api.post(f"/api/v1/teams/{team}/jobs", json=body), 201)["id"])

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(submit, range(count)))


def big_job_manifest(name: str, ps: int, workers: int) -> dict[str, Any]:
    """PS and workers that keep running (fake pods) until the job is deleted."""
    return {
        "apiVersion": "tfkube.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {
            "replicas": {
                "ps": {"replicas": ps},
                "worker": {
                    "replicas": workers,
                    "annotations": {"tfkube.io/fake-duration": "3600s"},
                },
            },
            "code": {"source": "artifact:tiny"},
        },
    }


def wait_running(api: Api, job_id: str, at_least: int, timeout: float) -> dict[str, Any]:
    """Until at least `at_least` replicas run (the rest may wait for room on the nodes)."""
    deadline = time.monotonic() + timeout
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = dict(api.ok(api.get(f"/api/v1/jobs/{job_id}")))
        if job["counts"].get("Running", 0) >= at_least:
            return job
        time.sleep(1)
    raise AssertionError(f"fewer than {at_least} replicas running: {job.get('counts')}")
