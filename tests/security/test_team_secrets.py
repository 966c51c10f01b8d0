"""A team's secrets serve its own jobs only (issue 19): a job of team A naming a secret
that only team B has is refused at submit as if the secret did not exist (nothing of B is
named), and B's value never reaches A's job; a member cannot make the server dial a
loopback store with the team's secret (the fetch policy applies to a data source's
endpoint as to code URLs). A real `tfkube server` (SQLite, as root); nothing is dialled:
the endpoint is a closed loopback port the server must refuse before connecting."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from server._server import Api, ServerProc, api_for, free_port
from server.conftest import start_server, stop_server

SECRET_VALUE = "team-b-only-value-0123456789"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProc, Api]]:
    server, admin, tag = start_server(tmp_path_factory.mktemp("secrets-sec"), "sqlite", None)
    try:
        yield server, admin
    finally:
        stop_server(server, admin, tag)


def manifest(name: str, endpoint: str, secret: str) -> dict[str, Any]:
    return {
        "manifest": {
            "apiVersion": "tfkube.io/v1alpha1",
            "kind": "TFJob",
            "metadata": {"name": name},
            "spec": {
                "replicas": {"worker": {"replicas": 1, "command": ["true"]}},
                "storage": {
                    "data": {
                        "source": "s3://bucket/prefix/",
                        "endpoint": endpoint,
                        "credentials": secret,
                    }
                },
            },
        }
    }


def test_a_job_cannot_use_another_teams_secret(site: tuple[ServerProc, Api]) -> None:
    server, admin = site
    team_a, team_b = admin.new_team(), admin.new_team()
    alice, bob = admin.new_user(), admin.new_user()
    admin.add_member(team_a, alice, "admin")
    admin.add_member(team_b, bob, "admin")
    a, b = api_for(server.url, alice), api_for(server.url, bob)
    endpoint = f"http://127.0.0.1:{free_port()}"
    try:
        stored = b.post(
            f"/api/v1/teams/{team_b}/secrets",
            json={"name": "bs-keys", "access_key_id": "AKB", "secret_access_key": SECRET_VALUE},
        )
        assert stored.status_code == 201, stored.text
        # A cannot see, replace or delete B's secrets: the team does not exist for A.
        assert a.get(f"/api/v1/teams/{team_b}/secrets").status_code == 404
        assert a.delete(f"/api/v1/teams/{team_b}/secrets/bs-keys").status_code == 404

        r = a.post(f"/api/v1/teams/{team_a}/jobs", json=manifest("steal", endpoint, "bs-keys"))
        assert r.status_code == 422, r.text
        (error,) = r.json()["errors"]
        assert error["field"] == "spec.storage.data.credentials"
        assert f"team {team_a} has no secret named 'bs-keys'" in error["message"]
        assert team_b not in r.text
        assert SECRET_VALUE not in r.text
        assert a.get("/api/v1/jobs", params={"team": team_a}).json()["items"] == []

        # With A's own secret, the loopback endpoint is refused before any connection.
        own = a.post(
            f"/api/v1/teams/{team_a}/secrets",
            json={"name": "a-keys", "access_key_id": "AKA", "secret_access_key": "a" * 20},
        )
        assert own.status_code == 201, own.text
        r = a.post(f"/api/v1/teams/{team_a}/jobs", json=manifest("dial", endpoint, "a-keys"))
        assert r.status_code == 422, r.text
        assert r.json()["errors"][0]["field"] == "spec.storage.data.endpoint"
        assert "--allow-fetch-from" in r.text
    finally:
        a.close()
        b.close()
    assert SECRET_VALUE not in server.log.read_text()
