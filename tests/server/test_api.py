"""The server's API against a real server process (SQLite and PostgreSQL): set-up, sign-in,
tokens, teams, artifacts, jobs run on the local engine with small shell entrypoints."""

from __future__ import annotations

import re
import time

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


def test_team_allowances_who_reads_and_who_changes(
    admin: Api, server: ServerProc, team: TeamCtx
) -> None:
    """What members' jobs may use in the team's namespace (tfkube.engines.admission_refusals): every
    member reads it, team admins change the names, a site admin the Pod Security level, the
    priorities and the tolerations;
    entries are checked (a platform credential never), and a member's job naming a Secret
    nobody allowed is a 422 naming the field, on the local engine too."""
    from ._server import api_for

    path = f"/api/v1/teams/{team.name}/allowances"
    none = {
        "secrets": [],
        "config_maps": [],
        "claims": [],
        "service_accounts": [],
        "tensorboard_images": [],
        "pod_security": "restricted",
        "priority_classes": [],
        "toleration_keys": [],
        "schedulers": [],
        "volcano_queues": [],
    }
    assert team.viewer.ok(team.viewer.get(path)) == none
    assert team.member.http.put(path, json={"secrets": ["db"]}).status_code == 403
    team_admin_name = admin.new_user()
    admin.add_member(team.name, team_admin_name, "admin")
    team_admin = api_for(server.url, team_admin_name)
    try:
        r = team_admin.http.put(path, json={"secrets": ["db", "notebook-0a1b"]})
        assert r.status_code == 422, r.text
        assert [e["field"] for e in r.json()["errors"]] == ["secrets[1]"]
        for site_admins in (
            {"pod_security": "baseline"},
            {"priority_classes": ["high"]},
            {"toleration_keys": ["pool-a"]},
            {"schedulers": ["volcano"]},
            {"volcano_queues": ["team-a"]},
        ):
            assert team_admin.http.put(path, json=site_admins).status_code == 403, site_admins
        changed = team_admin.ok(team_admin.http.put(path, json={"secrets": ["team-*", "db"]}))
        assert changed["secrets"] == ["db", "team-*"]
        assert team.member.ok(team.member.get(path))["secrets"] == ["db", "team-*"]
        baseline = admin.ok(admin.http.put(path, json={**changed, "pod_security": "baseline"}))
        assert baseline["pod_security"] == "baseline"
        manifest = {
            "apiVersion": "tfkube.io/v1alpha1",
            "kind": "TFJob",
            "metadata": {"name": "steal"},
            "spec": {
                "replicas": {
                    "worker": {"env": {"T": {"secretKeyRef": {"name": "other", "key": "k"}}}}
                },
                "code": {"source": "artifact:hello"},
            },
        }
        r = team.member.post(f"/api/v1/teams/{team.name}/jobs", json={"manifest": manifest})
        assert r.status_code == 422, r.text
        (error,) = r.json()["errors"]
        assert error["field"] == "spec.replicas.worker.env.T.secretKeyRef.name"
        assert "ask a team admin" in error["message"]
        jobs = team.member.ok(team.member.get("/api/v1/jobs", params={"team": team.name}))
        assert jobs["items"] == []
    finally:
        team_admin.close()


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


BURN = {
    "run.sh": "#!/usr/bin/env bash\n"
    'echo "$TFKUBE_ROLE-$TFKUBE_INDEX starts"\n'
    # worker-0 keeps a core busy until the job is stopped; worker-1 idles.
    'if [ "$TFKUBE_INDEX" = 0 ]; then while :; do :; done; fi\n'
    "exec sleep 600\n",
}
GAUGE = re.compile(r"^(\w+)\{(.*)\} (\S+)$")


def _gauges(text: str, name: str, job: str) -> dict[str, float]:
    """`<role>-<index>` -> the value of gauge `name` for each replica of `job`."""
    found = {}
    for line in text.splitlines():
        m = GAUGE.match(line)
        if not m or m.group(1) != name:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        if labels.get("job") == job:
            found[f"{labels['role']}-{labels['index']}"] = float(m.group(3))
    return found


def test_replica_usage_in_the_api_and_metrics(admin: Api, team: TeamCtx) -> None:
    api = team.member
    api.ok(upload(api, team.name, "burn", targz(BURN)), 201)
    job = api.ok(
        api.post(
            f"/api/v1/teams/{team.name}/jobs",
            json={"name": "burn", "workers": 2, "ps": 0, "code": "burn"},
        ),
        201,
    )
    deadline = time.monotonic() + 120
    while True:
        text = admin.get("/metrics").text
        cpu = _gauges(text, "tfkube_replica_cpu_cores", "burn")
        memory = _gauges(text, "tfkube_replica_memory_bytes", "burn")
        if set(cpu) == {"worker-0", "worker-1"} and cpu["worker-0"] > 0.2:
            break
        assert time.monotonic() < deadline, f"no usage gauges for both workers: {cpu}"
        time.sleep(1)
    assert set(memory) == {"worker-0", "worker-1"}
    assert all(used > 100_000 for used in memory.values()), memory
    assert cpu["worker-1"] < cpu["worker-0"]

    usage = api.ok(api.get(f"/api/v1/jobs/{job['id']}/usage"))
    assert usage["available"] is True
    series = {s["replica"]: s["points"] for s in usage["replicas"]}
    assert set(series) == {"worker-0", "worker-1"}
    assert all(len(point) == 3 for points in series.values() for point in points)
    outside = httpx.get(f"{admin.url}/api/v1/jobs/{job['id']}/usage")
    assert outside.status_code == 401

    api.post(f"/api/v1/jobs/{job['id']}/stop")
    wait_job(api, job["id"], {"Failed", "Succeeded"})
    # Kept with the job's logs after it ended; /metrics shows running replicas only.
    after = api.ok(api.get(f"/api/v1/jobs/{job['id']}/usage"))
    assert {s["replica"] for s in after["replicas"]} == {"worker-0", "worker-1"}
    assert _gauges(admin.get("/metrics").text, "tfkube_replica_cpu_cores", "burn") == {}


def test_autoscaling_a_model_server_is_refused_here_by_name(team: TeamCtx) -> None:
    """Issue 20 point 5: the local engine runs one process per model server, so
    `autoscale` is refused with the field named (nothing made); a malformed one is
    refused field by field before that."""
    api = team.member
    api.ok(upload(api, team.name, "hello", targz(HELLO)), 201)
    job = api.ok(
        api.post(
            f"/api/v1/teams/{team.name}/jobs",
            json={"name": "scaled", "workers": 1, "ps": 0, "code": "hello"},
        ),
        201,
    )
    serve = f"/api/v1/jobs/{job['id']}/model-servers"
    refused = api.post(serve, json={"autoscale": {"maxReplicas": 2}})
    assert refused.status_code == 422, refused.text
    ((field, message),) = [(e["field"], e["message"]) for e in refused.json()["errors"]]
    assert field == "autoscale"
    assert "Kubernetes engine" in message
    bad = api.post(serve, json={"autoscale": {"minReplicas": 3, "maxReplicas": 2}})
    assert bad.status_code == 422, bad.text
    assert [e["field"] for e in bad.json()["errors"]] == ["autoscale.maxReplicas"]
    assert "minReplicas" in bad.text
    missing = api.post(serve, json={"autoscale": {"targetCPUUtilization": 50}})
    assert [e["field"] for e in missing.json()["errors"]] == ["autoscale.maxReplicas"]
    assert api.ok(api.get("/api/v1/model-servers", params={"stopped": "true"})) == []
