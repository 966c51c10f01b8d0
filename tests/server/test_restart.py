"""A restart of the server loses nothing, and the job's code token stays secret: a job
runs across a restart (SQLite and PostgreSQL, local engine), the sign-in and the token
still work, the job finishes with its logs and events, and the code claim its replicas
fetched with is in no log, answer or output."""

from __future__ import annotations

from ._server import ServerProc, login
from .conftest import TeamCtx, targz, upload, wait_job

SLOW = {
    "run.sh": "#!/usr/bin/env bash\necho start\n"
    'while [ ! -e "$TFKUBE_LOG_DIR/go" ]; do sleep 0.1; done\necho end\n',
}


def test_a_restart_loses_nothing(server: ServerProc, team: TeamCtx) -> None:
    api = team.member
    art = api.ok(upload(api, team.name, "slow", targz(SLOW)), 201)
    job = api.ok(
        api.post(
            f"/api/v1/teams/{team.name}/jobs", json={"name": "across", "workers": 1, "code": "slow"}
        ),
        201,
    )
    running = wait_job(api, job["id"], {"Running"})
    cookie, csrf = login(server.url, team.member.name)
    try:
        server.stop()
        server.start()
        # The same job, the same sign-ins, the same artifact.
        assert api.ok(api.get(f"/api/v1/jobs/{job['id']}"))["phase"] == "Running"
        assert cookie.get("/api/v1/users/me").status_code == 200
        assert api.get(f"/api/v1/artifacts/{art['id']}/download").status_code == 200
        # The sync loop picks the job up again and sees it to its end.
        outputs = server.data_dir / "teams" / team.name / "outputs" / job["id"]
        (outputs / "go").touch()
        done = wait_job(api, job["id"], {"Succeeded", "Failed"})
        assert done["phase"] == "Succeeded", done
        assert done["started_at"] == running["started_at"]
        log = api.get(f"/api/v1/jobs/{job['id']}/logs/worker-0").text
        assert "start" in log
        assert "end" in log
        events = [e["message"] for e in api.ok(api.get(f"/api/v1/jobs/{job['id']}/events"))]
        assert any("submitted" in m for m in events)
        assert len(events) == len(set(events)), events  # nothing copied twice
        # The job's code claim: in a 0600 file for its replicas, nowhere else.
        token_file = (
            server.data_dir / "teams" / team.name / "engine" / "jobs" / "across" / "code-token"
        )
        claim = token_file.read_text().strip()
        assert token_file.stat().st_mode & 0o777 == 0o600
        assert claim not in server.log.read_text()
        assert claim not in log
        assert claim not in api.get(f"/api/v1/jobs/{job['id']}").text
        for path in outputs.rglob("*"):
            if path.is_file():
                assert claim.encode() not in path.read_bytes(), path
        assert csrf not in server.log.read_text()
    finally:
        cookie.close()
