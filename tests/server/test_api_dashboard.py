"""The API the dashboard's issue-22 pages stand on, on SQLite and PostgreSQL alike
(migration 0009 included): comparing jobs, searching their logs, and a user's
notification choices and messages (delivery itself: tests/web/test_dashboard_notify.py,
against real receivers)."""

from __future__ import annotations

from .conftest import TeamCtx, targz, upload, wait_job

RUN = """#!/bin/sh
echo "searching for: $*"
echo '{"accuracy": 0.5}' > "$TFKUBE_LOG_DIR/result.json"
"""


def test_compare_search_and_notifications(team: TeamCtx) -> None:
    api = team.member
    api.ok(upload(api, team.name, "cmp", targz({"run.sh": RUN})), 201)
    # Told of success by webhook (never reached: the URL's address is refused here).
    prefs = {"events": ["succeeded"], "webhook_url": "http://127.0.0.1:9/hook"}
    saved = api.ok(api.http.put("/api/v1/users/me/notifications", json=prefs))
    assert saved["events"] == ["succeeded"]
    assert saved["email_available"] is False
    r = api.http.put("/api/v1/users/me/notifications", json={"email": "a@b.example"})
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "email"  # no --smtp-server here
    secret = api.ok(api.post("/api/v1/users/me/notifications/secret"), 201)["secret"]
    assert secret.startswith("whsec_")
    assert api.ok(api.get("/api/v1/users/me/notifications"))["secret_made"] is True

    ids = []
    for name, lr in (("cmp-one", "0.1"), ("cmp-two", "0.2")):
        body = {"name": name, "workers": 1, "code": "cmp", "args": [f"--lr={lr}"]}
        ids.append(str(api.ok(api.post(f"/api/v1/teams/{team.name}/jobs", json=body), 201)["id"]))
    for job_id in ids:
        wait_job(api, job_id, {"Succeeded"})

    both = api.ok(api.get("/api/v1/compare", params={"jobs": ",".join(ids)}))
    assert [r["name"] for r in both["arguments"]] == ["worker --lr"]
    assert both["arguments"][0]["values"] == ["0.1", "0.2"]
    assert both["results"] == [
        {"name": "accuracy", "values": [0.5, 0.5], "best": None, "lower_is_better": False}
    ]
    viewer = team.viewer.get("/api/v1/compare", params={"jobs": ",".join(ids)})
    assert viewer.status_code == 200

    found = api.ok(api.get(f"/api/v1/jobs/{ids[1]}/logs/search", params={"q": "LR=0.2"}))
    assert [h["replica"] for h in found["hits"]] == ["worker-0"]
    assert "--lr=0.2" in found["hits"][0]["text"]

    def told() -> list[dict[str, object]]:
        return list(api.ok(api.get("/api/v1/users/me/notifications/sent")))

    from ._server import poll

    def both_tried() -> list[dict[str, object]]:
        # Each job's message is made when the server sees its success, which may come after
        # wait_job saw it: both, not the first one tried.
        tried = [n for n in told() if n["attempts"]]
        return tried if len(tried) >= 2 else []

    notes = poll("two messages tried", both_tried, 60)
    assert {(n["job_id"], n["event"], n["channel"]) for n in told()} == {
        (ids[0], "succeeded", "webhook"),
        (ids[1], "succeeded", "webhook"),
    }
    assert all("does not send to this address" in str(n["last_error"]) for n in notes)
