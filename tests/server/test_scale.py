"""`POST /api/v1/jobs/{id}/scale` on a real server with the local engine: a running PS job
grows and shrinks (the replicas, the timeline and the stored spec follow), refusals name
the field (a size out of range, a job without PS), a viewer may not, and the client's
`tfkube scale --engine server` speaks it."""

from __future__ import annotations

import time

import pytest

import tfkube
from tfkube.client import ServerBackend
from tfkube.spec import SpecError

from ._server import Api, ServerProc
from .conftest import TeamCtx, targz, upload, wait_job

IDLE = {"run.sh": '#!/usr/bin/env bash\necho "$TFKUBE_ROLE-$TFKUBE_INDEX up"\nexec sleep 600\n'}


def _submit(api: Api, team: str, name: str, ps: int) -> dict[str, object]:
    return dict(
        api.ok(
            api.post(
                f"/api/v1/teams/{team}/jobs",
                json={"name": name, "workers": 2, "ps": ps, "code": "idle"},
            ),
            201,
        )
    )


def _running(api: Api, job_id: str, keys: set[str]) -> dict[str, object]:
    deadline = time.monotonic() + 60
    while True:
        job = api.ok(api.get(f"/api/v1/jobs/{job_id}"))
        running = {r["key"] for r in job["replicas"] if r["state"] == "Running"}
        if running == keys:
            return dict(job)
        assert time.monotonic() < deadline, f"running {running}, expected {keys}"
        time.sleep(0.3)


def test_a_running_ps_job_is_scaled_through_the_api(team: TeamCtx) -> None:
    api = team.member
    api.ok(upload(api, team.name, "idle", targz(IDLE)), 201)
    job = _submit(api, team.name, "grows", ps=1)
    job_id = str(job["id"])
    wait_job(api, job_id, {"Running"})
    _running(api, job_id, {"ps-0", "worker-0", "worker-1"})

    out = api.ok(api.post(f"/api/v1/jobs/{job_id}/scale", json={"workers": 3}))
    assert [r["key"] for r in out["replicas"]] == ["ps-0", "worker-0", "worker-1", "worker-2"]
    _running(api, job_id, {"ps-0", "worker-0", "worker-1", "worker-2"})
    assert "replicas: 3" in str(api.ok(api.get(f"/api/v1/jobs/{job_id}"))["spec"])

    out = api.ok(api.post(f"/api/v1/jobs/{job_id}/scale", json={"workers": 1}))
    assert [r["key"] for r in out["replicas"]] == ["ps-0", "worker-0"]
    final = _running(api, job_id, {"ps-0", "worker-0"})
    assert final["restarts"] == 0

    events = [e["message"] for e in api.ok(api.get(f"/api/v1/jobs/{job_id}/events"))]
    deadline = time.monotonic() + 30
    while not any("scaled from 3 to 1 workers" in m for m in events):
        assert time.monotonic() < deadline, events
        time.sleep(0.5)
        events = [e["message"] for e in api.ok(api.get(f"/api/v1/jobs/{job_id}/events"))]
    assert any("scaled from 2 to 3 workers: added worker-2" in m for m in events), events
    assert any("scaled the job from 2 to 3 workers through the server" in m for m in events)

    zero = api.post(f"/api/v1/jobs/{job_id}/scale", json={"workers": 0})
    assert zero.status_code == 422
    assert [e["field"] for e in zero.json()["errors"]] == ["workers"]
    viewer = team.viewer.post(f"/api/v1/jobs/{job_id}/scale", json={"workers": 2})
    assert viewer.status_code == 403
    api.ok(api.post(f"/api/v1/jobs/{job_id}/stop"))


def test_a_job_without_ps_is_refused_naming_the_field(server: ServerProc, team: TeamCtx) -> None:
    api = team.member
    api.ok(upload(api, team.name, "idle", targz(IDLE)), 201)
    job_id = str(_submit(api, team.name, "fixed", ps=0)["id"])
    wait_job(api, job_id, {"Running"})
    refused = api.post(f"/api/v1/jobs/{job_id}/scale", json={"workers": 3})
    assert refused.status_code == 422
    errors = refused.json()["errors"]
    assert [e["field"] for e in errors] == ["spec.replicas.ps"]
    assert "no parameter servers" in errors[0]["message"]
    with (
        tfkube.Client(server.url, api.token, team=team.name) as client,
        pytest.raises(SpecError) as caught,
    ):
        ServerBackend(client).scale("fixed", 3)
    assert [e.field for e in caught.value.errors] == ["spec.replicas.ps"]
    api.ok(api.post(f"/api/v1/jobs/{job_id}/stop"))
