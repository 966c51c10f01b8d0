"""Notebooks through a real server: a user's JupyterLab starts behind the proxy, its kernel
(reached over a WebSocket through the proxy) runs a cell that submits the between-graph
example with `tfkube.Client()` (no arguments: signed in from its environment) and follows
it to Succeeded; the team's code is unpacked read-only in the notebook's folder; another
user gets 404; the port alone opens nothing; stop ends the process and revokes the token;
an idle notebook is stopped by the server and opening it starts it again. The browser
drives the same from the dashboard in tests/web."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

import tfkube
from conftest import tagged_processes  # tests/conftest.py

from ._jupyter import run_cell
from ._server import Api, ServerProc, api_for, poll
from .conftest import start_server, stop_server

pytestmark = pytest.mark.tf
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mnist-between-graph"

CELL = """
import tfkube
c = tfkube.Client()
job = c.submit(name="from-a-notebook", workers=2, ps=1, code="mnist", args=["--train_steps=100"])
print("submitted", job.name, flush=True)
print("phase", c.wait(job.id, timeout=600).phase, flush=True)
"""


@pytest.fixture(scope="module")
def nb_platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProc, Api, str]]:
    server, admin, tag = start_server(tmp_path_factory.mktemp("notebooks"), "sqlite", None)
    try:
        yield server, admin, tag
    finally:
        stop_server(server, admin, tag)


def jupyterlabs(tag: str) -> list[psutil.Process]:
    """The server's JupyterLab processes (a process of the job's that ends between the
    listing and the reading of its command line is none of them)."""
    found = []
    for proc in tagged_processes(tag):
        with contextlib.suppress(psutil.Error):
            if "jupyterlab" in " ".join(proc.cmdline()):
                found.append(proc)
    return found


def _own_network(pid: int) -> bool:
    """Whether the process runs in a network namespace other than this test's."""
    return os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")


def test_a_notebook_submits_and_follows_a_job(nb_platform: tuple[ServerProc, Api, str]) -> None:
    server, admin, tag = nb_platform
    owner, teammate = admin.new_user(), admin.new_user()
    admin.add_member("default", owner, "member")
    admin.add_member("default", teammate, "member")
    api, other = api_for(server.url, owner), api_for(server.url, teammate)
    try:
        with tfkube.Client(server.url, api.token, team="default") as c:
            c.upload(EXAMPLE, "mnist")
            notebook = c.notebook()
            assert notebook.state == "running"
            assert notebook.url == f"{server.url}/proxy/notebook/{notebook.id}/lab"
            base = notebook.url.removesuffix("/lab")
            assert c.notebook().id == notebook.id  # one per user and team

            page = api.get(notebook.url, timeout=120)
            assert page.status_code == 200
            assert "JupyterLab" in page.text
            listing = api.get(f"{base}/api/contents/team-artifacts/code/mnist").json()
            assert "run.sh" in {f["name"] for f in listing["content"]}
            home = server.data_dir / "teams" / "default" / "notebooks" / owner
            copy = home / "team-artifacts" / "code" / "mnist" / "run.sh"
            assert copy.stat().st_mode & 0o222 == 0  # a read-only copy (root may write anyway)

            # Only its owner: a teammate, no credentials, the loopback port alone.
            assert other.get(notebook.url).status_code == 404
            assert other.get(f"{base}/api/status").status_code == 404
            assert httpx.get(notebook.url).status_code == 401
            rows = jupyterlabs(tag)
            assert len(rows) == 1
            port = next(
                a.split("=")[1] for a in rows[0].cmdline() if a.startswith("--ServerApp.port=")
            )
            direct = f"http://127.0.0.1:{port}/proxy/notebook/{notebook.id}/api/contents"
            if _own_network(rows[0].pid):  # confined: the port is on its own loopback
                with pytest.raises(httpx.ConnectError):
                    httpx.get(direct)
            else:
                assert httpx.get(direct).status_code == 403

            kernel = api.post(f"{base}/api/kernels", json={"name": "python3"})
            assert kernel.status_code == 201, kernel.text
            ws = base.replace("http", "ws", 1) + f"/api/kernels/{kernel.json()['id']}/channels"
            printed = run_cell(ws, api.token, CELL, timeout=900)
            assert "submitted from-a-notebook" in printed, printed
            assert "phase Succeeded" in printed, printed
            job = c.find("from-a-notebook")
            assert job is not None
            assert job.owner == owner  # submitted as the notebook's user

            tokens = api.get("/api/v1/tokens").json()
            mine = [t for t in tokens if t["name"] == f"notebook {notebook.id}"]
            assert len(mine) == 1
            assert mine[0]["revoked_at"] is None
            stopped = c.stop_notebook(notebook.id)
            assert stopped.state == "stopped"
            assert not jupyterlabs(tag)
            tokens = api.get("/api/v1/tokens").json()
            assert next(t for t in tokens if t["id"] == mine[0]["id"])["revoked_at"] is not None
    finally:
        api.close()
        other.close()


def test_an_idle_notebook_is_stopped_and_opening_it_starts_it_again(
    tmp_path: Path,
) -> None:
    """`--notebook-idle-minutes 0.2`: 12 s without a proxied request or kernel activity.
    While it runs, its API token near its expiry is renewed by the same loop (checked every
    6 s here): a notebook in use keeps its `tfkube.Client()` past `TOKEN_DAYS`."""
    server, admin, tag = start_server(tmp_path, "sqlite", None, ["--notebook-idle-minutes", "0.2"])
    try:
        with tfkube.Client(server.url, admin.token, team="default") as c:
            notebook = c.notebook()
            assert notebook.state == "running"
            assert len(jupyterlabs(tag)) == 1
            soon = time.time() + 3600  # as if given 6 days 23 hours ago
            with sqlite3.connect(server.data_dir / "tfkube.db") as db:
                changed = db.execute(
                    "UPDATE api_tokens SET expires_at = ? WHERE name = ? AND revoked_at IS NULL",
                    (soon, f"notebook {notebook.id}"),
                ).rowcount
            assert changed == 1

            def renewed() -> Any:
                tokens = admin.get("/api/v1/tokens").json()
                (token,) = [t for t in tokens if t["name"] == f"notebook {notebook.id}"]
                return token if token["expires_at"] > time.time() + 6 * 86400 else None

            kept = poll("the running notebook's token renewed", renewed, 30)
            assert kept["revoked_at"] is None

            def stopped() -> Any:
                found = next(n for n in c.notebooks() if n.id == notebook.id)
                return found if found.state == "stopped" else None

            idle = poll("the idle notebook to be stopped", stopped, 120)
            assert "idle" in (idle.message or ""), idle
            assert not jupyterlabs(tag)
            tokens = admin.get("/api/v1/tokens").json()
            mine = [t for t in tokens if t["name"] == f"notebook {notebook.id}"]
            assert mine
            assert all(t["revoked_at"] is not None for t in mine)

            page = admin.get(notebook.url, timeout=180)  # opening it starts it again
            assert page.status_code == 200, page.text[:300]
            assert "JupyterLab" in page.text
            assert next(n for n in c.notebooks() if n.id == notebook.id).state == "running"
    finally:
        stop_server(server, admin, tag)
