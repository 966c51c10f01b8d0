"""The server's API against a real server process (SQLite and PostgreSQL): set-up, sign-in,
tokens, teams, artifacts, jobs run on the local engine with small shell entrypoints."""

from __future__ import annotations

import httpx

from ._server import PASSWORD, Api, ServerProc, login
from .conftest import TeamCtx, targz, upload, wait_job

HELLO = {
    "run.sh": '#!/usr/bin/env bash\necho "hello from $TFKUBE_ROLE-$TFKUBE_INDEX"\n'
    'echo done > "$TFKUBE_LOG_DIR/out-$TFKUBE_ROLE-$TFKUBE_INDEX.txt"\n'
    # worker-0's success ends the job (and stops worker-1): it waits for worker-1's output.
    'if [ "$TFKUBE_INDEX" = 0 ] && [ "${TFKUBE_NUM_WORKERS:-1}" -gt 1 ]; then\n'
    "  for _ in $(seq 1200); do\n"
    '    [ -e "$TFKUBE_LOG_DIR/out-worker-1.txt" ] && break; sleep 0.1\n'
    "  done\n"
    "fi\n",
}


def test_health_and_docs_need_no_sign_in(server: ServerProc) -> None:
    assert httpx.get(f"{server.url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{server.url}/docs").status_code == 200
    assert "/api/v1/jobs" in httpx.get(f"{server.url}/openapi.json").json()["paths"]


def test_setup_link_works_once(server: ServerProc) -> None:
    r = httpx.post(
        f"{server.url}/api/v1/setup",
        json={"token": server.setup_token, "name": "intruder", "password": PASSWORD},
    )
    assert r.status_code == 403
    assert httpx.get(f"{server.url}/api/v1/setup").json() == {"needed": False}


def test_everything_else_needs_authentication(server: ServerProc) -> None:
    for path in ("/api/v1/jobs", "/api/v1/teams", "/api/v1/artifacts", "/api/v1/users/me"):
        assert httpx.get(f"{server.url}{path}").status_code == 401
    bad = httpx.get(f"{server.url}/api/v1/jobs", headers={"Authorization": "Bearer tfk_nope"})
    assert bad.status_code == 401


def test_four_fields_job_runs_and_keeps_its_logs(team: TeamCtx) -> None:
    api = team.member
    art = api.ok(upload(api, team.name, "hello", targz(HELLO)), 201)
    assert art["version"] == 1
    job = api.ok(
        api.post(
            f"/api/v1/teams/{team.name}/jobs",
            json={"name": "hello", "workers": 2, "ps": 0, "code": "hello"},
        ),
        201,
    )
    assert job["code"] == "hello:1"
    done = wait_job(api, job["id"], {"Succeeded", "Failed"})
    assert done["phase"] == "Succeeded", done
    logs = api.ok(api.get(f"/api/v1/jobs/{job['id']}/logs"))
    assert {(f["replica"], f["attempt"]) for f in logs} == {("worker-0", 0), ("worker-1", 0)}
    text = api.get(f"/api/v1/jobs/{job['id']}/logs/worker-1").text
    assert "hello from worker-1" in text
    events = api.ok(api.get(f"/api/v1/jobs/{job['id']}/events"))
    assert any("submitted" in e["message"] for e in events)
    outputs = {f["path"] for f in api.ok(api.get(f"/api/v1/jobs/{job['id']}/outputs"))}
    assert "out-worker-1.txt" in outputs
    assert api.get(f"/api/v1/jobs/{job['id']}/outputs/out-worker-1.txt").text == "done\n"


def test_form_errors_name_the_field(team: TeamCtx) -> None:
    r = team.member.post(
        f"/api/v1/teams/{team.name}/jobs",
        json={"name": "Bad_Name", "workers": 0, "code": "nothing-here"},
    )
    assert r.status_code == 422
    fields = {e["field"] for e in r.json()["errors"]}
    assert "workers" in fields


def test_viewer_reads_but_cannot_submit(team: TeamCtx) -> None:
    r = team.viewer.post(
        f"/api/v1/teams/{team.name}/jobs", json={"name": "x", "workers": 1, "code": "hello"}
    )
    assert r.status_code == 403
    assert team.viewer.get("/api/v1/jobs", params={"team": team.name}).status_code == 200


def test_cookie_session_needs_csrf_and_same_origin(server: ServerProc, team: TeamCtx) -> None:
    client, csrf = login(server.url, team.member.name)
    try:
        assert client.get("/api/v1/users/me").status_code == 200
        body = {"name": "t"}
        assert client.post("/api/v1/tokens", json=body).status_code == 403
        other = {"X-CSRF-Token": csrf, "Origin": "http://evil.example"}
        assert client.post("/api/v1/tokens", json=body, headers=other).status_code == 403
        wrong = {"X-CSRF-Token": "0" * 64, "Origin": server.url}
        assert client.post("/api/v1/tokens", json=body, headers=wrong).status_code == 403
        good = {"X-CSRF-Token": csrf, "Origin": server.url}
        assert client.post("/api/v1/tokens", json=body, headers=good).status_code == 201
        # A Bearer token needs no CSRF token: browsers never attach it on their own.
        assert team.member.post("/api/v1/tokens", json=body).status_code == 201
    finally:
        client.close()


def test_other_teams_get_404(admin: Api, server: ServerProc, team: TeamCtx) -> None:
    from ._server import api_for

    api = team.member
    api.ok(upload(api, team.name, "hello", targz(HELLO)), 201)
    job = api.ok(
        api.post(
            f"/api/v1/teams/{team.name}/jobs", json={"name": "mine", "workers": 1, "code": "hello"}
        ),
        201,
    )
    outsider_name = admin.new_user()
    other_team = admin.new_team()
    admin.add_member(other_team, outsider_name, "admin")
    outsider = api_for(server.url, outsider_name)
    try:
        for path in (
            f"/api/v1/jobs/{job['id']}",
            f"/api/v1/jobs/{job['id']}/logs",
            f"/api/v1/jobs/{job['id']}/logs/worker-0",
            f"/api/v1/jobs/{job['id']}/events",
            f"/api/v1/jobs/{job['id']}/outputs",
            f"/api/v1/teams/{team.name}",
        ):
            assert outsider.get(path).status_code == 404, path
        assert outsider.post(f"/api/v1/jobs/{job['id']}/stop").status_code == 404
        assert outsider.delete(f"/api/v1/jobs/{job['id']}").status_code == 404
        assert outsider.get("/api/v1/jobs").json()["items"] == []
        assert outsider.get("/api/v1/artifacts").json() == []
    finally:
        outsider.close()
        wait_job(api, job["id"], {"Succeeded", "Failed"})


def test_prometheus_metrics(server: ServerProc, admin: Api, team: TeamCtx) -> None:
    assert team.member.get("/metrics").status_code == 403
    assert httpx.get(f"{server.url}/metrics").status_code == 401
    text = admin.get("/metrics").text
    assert "tfkube_api_request_seconds_bucket" in text
    assert 'route="/api/v1/jobs/{job_id}"' in text or "tfkube_jobs" in text
    assert "tfkube_submit_seconds_count" in text
