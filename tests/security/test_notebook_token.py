"""A notebook's token (what its `tfkube.Client()` signs in with: TFKUBE_TOKEN in the
kernel's environment, readable by any code the notebook runs) is limited to the notebook's
team and dies with the notebook. Against a real `tfkube server` (local engine) and a real
JupyterLab: the token is taken from the notebook's own environment, as code in it would.

The notebook's owner is a site admin and a member of two teams, so every wider power the
token could leak is there to be refused: another team of the owner's (404, as for a team
that does not exist), site-wide powers (403), the owner's account (new or listed tokens,
password, notifications: 403); then, once stopped, the token is refused (401). On
Kubernetes the same token reaches the pod from a Secret (tests/cluster/
test_real_node_incluster.py, tests/unit/test_render_serving.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

import tfkube
from conftest import tagged_processes  # tests/conftest.py
from server._server import PASSWORD, Api, ServerProc, api_for, poll
from server.conftest import start_server, stop_server, targz, upload


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProc, Api, str]]:
    server, admin, tag = start_server(tmp_path_factory.mktemp("nbtoken"), "sqlite", None)
    try:
        yield server, admin, tag
    finally:
        stop_server(server, admin, tag)


def _notebook_token(tag: str, notebook_id: str) -> str:
    """TFKUBE_TOKEN from the environment of the notebook's JupyterLab process."""
    for proc in tagged_processes(tag):
        with contextlib.suppress(psutil.Error):
            if f"/proxy/notebook/{notebook_id}/" in " ".join(proc.cmdline()):
                token = proc.environ().get("TFKUBE_TOKEN")
                if token:
                    return token
    raise AssertionError(f"no JupyterLab of notebook {notebook_id} with a TFKUBE_TOKEN")


def test_a_notebooks_token_reaches_its_team_only_and_dies_with_it(
    world: tuple[ServerProc, Api, str], tmp_path: Path
) -> None:
    server, admin, tag = world
    owner = admin.new_user(site_admin=True)
    other_team = admin.new_team()
    admin.add_member("default", owner, "member")
    admin.add_member(other_team, owner, "member")
    mine = api_for(server.url, owner)
    try:
        upload(mine, "default", "here", targz({"run.sh": "echo here\n"}))
        upload(mine, other_team, "there", targz({"run.sh": "echo there\n"}))
        with tfkube.Client(server.url, mine.token, team="default") as c:
            notebook = c.notebook()
            assert notebook.state == "running"
            token = _notebook_token(tag, notebook.id)
            assert token != mine.token
            with httpx.Client(
                base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
            ) as nb:
                # Its own team: what a notebook is for.
                assert nb.get("/api/v1/teams/default").status_code == 200
                listed = nb.get("/api/v1/artifacts").json()
                assert {a["name"] for a in listed} == {"here"}
                assert [t["name"] for t in nb.get("/api/v1/teams").json()] == ["default"]
                # The owner's other team does not exist for it.
                assert nb.get(f"/api/v1/teams/{other_team}").status_code == 404
                theirs = nb.get("/api/v1/artifacts", params={"team": other_team})
                assert theirs.status_code == 404 or theirs.json() == [], theirs.text
                jobs = nb.get("/api/v1/jobs", params={"team": other_team})
                assert jobs.status_code == 404 or jobs.json()["items"] == [], jobs.text
                # Nothing site-wide, though its owner is a site admin.
                made = nb.post("/api/v1/users", json={"name": "mallory", "password": PASSWORD})
                assert made.status_code == 403, made.text
                team = nb.post("/api/v1/teams", json={"name": "evil", "quota": {}})
                assert team.status_code == 403, team.text
                # Nothing of the owner's account: no wider token made from it.
                assert nb.post("/api/v1/tokens", json={"name": "wider"}).status_code == 403
                assert nb.get("/api/v1/tokens").status_code == 403
                changed = nb.patch(
                    f"/api/v1/users/{owner}",
                    json={"password": "another long passphrase", "current_password": PASSWORD},
                )
                assert changed.status_code == 403, changed.text
                assert nb.get("/api/v1/users/me/notifications").status_code == 403
                # The owner's own token still has all of it.
                assert mine.get(f"/api/v1/teams/{other_team}").status_code == 200
                listed_tokens = mine.get("/api/v1/tokens")
                assert listed_tokens.status_code == 200
                # The owner sees which of their tokens is limited, and to which team.
                limited = [t for t in listed_tokens.json() if not t["revoked_at"]]
                assert {(t["name"], t["team"]) for t in limited} >= {
                    (f"notebook {notebook.id}", "default")
                }, limited
                assert all(
                    t["team"] is None for t in limited if not t["name"].startswith("notebook")
                )

                stopped = c.stop_notebook(notebook.id)
                assert stopped.state == "stopped"
                poll(
                    "the notebook's token refused once it stopped",
                    lambda: nb.get("/api/v1/teams/default").status_code == 401,
                    30,
                )
    finally:
        mine.close()
