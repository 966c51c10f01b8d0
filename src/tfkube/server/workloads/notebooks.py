"""Notebooks: one JupyterLab server per user and team, opened through the server's proxy
at `/proxy/notebook/<id>/lab`, for its owner only.

    POST /api/v1/teams/<team>/notebook, or opening its proxy URL -> ensure:
        a fresh API token for the user (the notebook's `tfkube.Client()` signs in with it:
        TFKUBE_URL, TFKUBE_TOKEN, TFKUBE_TEAM in its environment); the previous one revoked
          local:      the team's code and data artifacts (latest version of each) unpacked
                      read-only into <home>/team-artifacts/<code|data>/<name>; `jupyter lab`
                      on a free loopback port below the proxy's base URL, with Jupyter's own
                      token auth on (JUPYTER_TOKEN): the proxy sends it, the port alone
                      opens nothing
          kubernetes: render_notebook -> server-side apply (Secret, Service, StatefulSet;
                      the home claim is kept when the notebook stops)
    idle loop (every 30 s): a notebook whose Jupyter saw no activity (its own
        `last_activity`: kernels busy, connections) and no proxied request for
        `notebook_idle_seconds` is stopped; so is one whose process died
    stop (idle, asked, server shut-down): by PID (or its objects deleted); token revoked
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import shutil
import sys
import tarfile
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tfkube.server._engines import Engines
from tfkube.server._loopback import alive, free_port, spawn, stop, wait_port
from tfkube.server.accounts import create_token
from tfkube.server.artifacts import BlobStore
from tfkube.server.core.config import ServerSettings
from tfkube.server.core.tables import ApiToken, Artifact, Notebook, Team, User
from tfkube.server.workloads.model_servers import base_env

log = logging.getLogger("tfkube.server")

RUNNING, STOPPED = "running", "stopped"
KIND = "notebook"
START_TIMEOUT = 120.0
TOKEN_DAYS = 7


def base_url(notebook_id: str) -> str:
    """The proxy path JupyterLab serves below."""
    return f"/proxy/{KIND}/{notebook_id}/"


def idle_for(now: float, last_proxied: float, jupyter_activity: float | None) -> float:
    """Seconds since anything happened in the notebook (pure)."""
    return now - max(last_proxied, jupyter_activity or 0.0)


def _iso_seconds(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def unpack_read_only(archive: Path, dest: Path) -> None:
    """An artifact's files under `dest`, read-only (tarfile's `data` filter: no links out,
    no devices, no absolute paths)."""
    partial = dest.with_name(f".{dest.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with tarfile.open(archive, "r:*") as tar:
        tar.extractall(partial, filter="data")
    for folder, dirs, files in os.walk(partial):
        for f in files:
            Path(folder, f).chmod(0o444)
        for d in dirs:
            Path(folder, d).chmod(0o555)
    if dest.exists():
        for folder, dirs, _ in os.walk(dest):  # make the old copy removable
            Path(folder).chmod(0o755)
            for d in dirs:
                Path(folder, d).chmod(0o755)
        shutil.rmtree(dest)
    partial.rename(dest)
    dest.chmod(0o555)


class Notebooks:
    def __init__(
        self,
        settings: ServerSettings,
        engines: Engines,
        sessions: sessionmaker[Session],
        blobs: BlobStore,
        key: bytes,
    ) -> None:
        self.settings = settings
        self.engines = engines
        self.sessions = sessions
        self.blobs = blobs
        self.key = key
        self._lock = threading.Lock()
        self._starting: dict[tuple[int, int], threading.Lock] = {}
        self._last_used: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def local(self) -> bool:
        return self.engines.kind == "local"

    def jupyter_token(self, row: Notebook) -> str:
        """Jupyter's token for this start of the notebook: JupyterLab shows it to its
        owner's browser (in the page), so a new start makes a new one."""
        message = f"notebook:{row.id}:{row.started_at!r}".encode()
        return hmac.new(self.key, message, hashlib.sha256).hexdigest()

    def home(self, team: Team, user: User) -> Path:
        return self.engines.team_root(team.name) / "notebooks" / user.name

    def touch(self, notebook_id: str) -> None:
        with self._lock:
            self._last_used[notebook_id] = time.time()

    # -- ensure (start), stop ----------------------------------------------------------

    def ensure(self, db: Session, user: User, team: Team) -> Notebook:
        """The user's notebook in the team, running (started if need be)."""
        with self._lock:
            gate = self._starting.setdefault((user.id, team.id), threading.Lock())
        with gate:  # two tabs opening at once start one server
            row = db.scalars(
                select(Notebook).where(Notebook.user_id == user.id, Notebook.team_id == team.id)
            ).first()
            if row is None:
                row = Notebook(
                    id=uuid.uuid4().hex[:16],
                    user_id=user.id,
                    team_id=team.id,
                    state=STOPPED,
                    created_at=time.time(),
                )
                db.add(row)
                db.commit()
            if row.state == RUNNING and (not self.local or alive(row.pid, row.pid_started)):
                self.touch(row.id)
                return row
            self._start(db, row, user, team)
            self.touch(row.id)
            return row

    def _client_token(self, db: Session, row: Notebook, user: User) -> str:
        self._revoke(db, row)
        token, value = create_token(
            db, user, f"notebook {row.id}", time.time() + TOKEN_DAYS * 86400
        )
        row.token_id = token.id
        return value

    def _revoke(self, db: Session, row: Notebook) -> None:
        if row.token_id is not None:
            token = db.get(ApiToken, row.token_id)
            if token is not None and token.revoked_at is None:
                token.revoked_at = time.time()
            row.token_id = None

    def _start(self, db: Session, row: Notebook, user: User, team: Team) -> None:
        value = self._client_token(db, row, user)
        row.started_at = time.time()
        if self.local:
            self._start_local(db, row, user, team, value)
        else:
            from tfkube.engines.kubernetes import apply_objects
            from tfkube.render import NotebookSpec, render_notebook

            spec = NotebookSpec(
                notebook_id=row.id,
                namespace=team.namespace,
                user=user.name,
                team=team.name,
                base_url=base_url(row.id),
                server_url=self.settings.replica_url,
                jupyter_token=self.jupyter_token(row),
                client_token=value,
            )
            apply_objects(self.engines.api_client(), render_notebook(spec))
        row.state, row.stopped_at, row.message = RUNNING, None, None
        db.commit()

    def _unpack_artifacts(self, db: Session, team: Team, home: Path) -> None:
        """The latest version of each of the team's artifacts, read-only in the home."""
        rows = db.scalars(
            select(Artifact)
            .where(Artifact.team_id == team.id)
            .order_by(Artifact.name, Artifact.version.desc())
        ).all()
        latest: dict[tuple[str, str], Artifact] = {}
        for a in rows:
            latest.setdefault((a.kind, a.name), a)
        root = home / "team-artifacts"
        for (kind, name), artifact in latest.items():
            dest = root / kind / name
            stamp = root / kind / f".{name}.sha256"
            if dest.is_dir() and stamp.is_file() and stamp.read_text() == artifact.sha256:
                continue
            try:
                unpack_read_only(self.blobs.path(artifact.sha256), dest)
                stamp.write_text(artifact.sha256)
            except (OSError, tarfile.TarError) as exc:
                log.warning("unpacking %s %s for a notebook failed: %s", kind, name, exc)

    def _start_local(self, db: Session, row: Notebook, user: User, team: Team, token: str) -> None:
        home = self.home(team, user)
        home.mkdir(parents=True, exist_ok=True)
        self._unpack_artifacts(db, team, home)
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--ServerApp.base_url={base_url(row.id)}",
            f"--ServerApp.root_dir={home}",
            # No calls to the internet from this machine's notebooks.
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",
        ]
        if os.geteuid() == 0:  # a server run as root (a container, CI) runs its notebooks so
            argv.append("--allow-root")
        env = base_env(
            {
                "HOME": str(home),
                "JUPYTER_TOKEN": self.jupyter_token(row),
                "TFKUBE_URL": self.settings.base_url,
                "TFKUBE_TOKEN": token,
                "TFKUBE_TEAM": team.name,
            }
        )
        log_file = home / ".tfkube-notebook.log"
        log_file.unlink(missing_ok=True)  # this start's output only
        proc, started = spawn(argv, port=port, env=env, cwd=home, log=log_file)
        if not wait_port(proc, started.pid, port, START_TIMEOUT):
            stop(started.pid, started.started)
            proc.poll()
            tail = log_file.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"JupyterLab did not start: {tail}")
        row.pid, row.pid_started, row.port = started.pid, started.started, port

    def stop(self, db: Session, row: Notebook, message: str = "stopped") -> None:
        if self.local:
            stop(row.pid, row.pid_started)
        elif row.state == RUNNING:
            from tfkube.engines.kubernetes import delete_objects
            from tfkube.render import NotebookSpec, render_notebook

            team = db.get(Team, row.team_id)
            if team is not None:
                spec = NotebookSpec(row.id, team.namespace, "", team.name, "", "", "", "")
                delete_objects(self.engines.api_client(), render_notebook(spec))
        self._revoke(db, row)
        row.pid = row.pid_started = None
        row.state, row.stopped_at, row.message = STOPPED, time.time(), message
        db.commit()

    # -- reads --------------------------------------------------------------------------

    def upstream(self, row: Notebook) -> tuple[str, dict[str, str]]:
        """Where the proxy sends a request (local engine), with Jupyter's token."""
        if not row.port:
            raise LookupError("the notebook is not running")
        return (
            f"http://127.0.0.1:{row.port}{base_url(row.id).rstrip('/')}",
            {"Authorization": f"token {self.jupyter_token(row)}"},
        )

    def _jupyter_activity(self, row: Notebook) -> float | None:
        base, headers = self.upstream(row)
        try:
            r = httpx.get(f"{base}/api/status", headers=headers, timeout=5.0)
            return _iso_seconds(r.json().get("last_activity")) if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    # -- the idle loop, shut-down --------------------------------------------------------------

    def reap_once(self) -> None:
        if not self.local:
            return
        now = time.time()
        with self.sessions() as db:
            rows = db.scalars(select(Notebook).where(Notebook.state == RUNNING)).all()
            for row in rows:
                if not alive(row.pid, row.pid_started):
                    self.stop(db, row, "its JupyterLab process exited")
                    continue
                with self._lock:
                    used = self._last_used.get(row.id, row.started_at or now)
                idle = idle_for(now, used, self._jupyter_activity(row))
                if idle > self.settings.notebook_idle_seconds:
                    log.info("notebook %s idle for %.0f s: stopping it", row.id, idle)
                    self.stop(db, row, f"stopped after {idle / 60:.0f} idle minutes")

    def _loop(self) -> None:
        while not self._stop.wait(min(30.0, self.settings.notebook_idle_seconds / 2)):
            try:
                self.reap_once()
            except Exception:
                log.exception("the notebook idle check failed")

    def start_loop(self) -> None:
        with self.sessions() as db:  # a notebook from before a restart is not ours now
            for row in db.scalars(select(Notebook).where(Notebook.state == RUNNING)).all():
                if self.local:
                    self.stop(db, row, "the server restarted")
        self._thread = threading.Thread(target=self._loop, name="tfkube-notebooks", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if not self.local:
            return
        with self.sessions() as db:
            for row in db.scalars(select(Notebook).where(Notebook.state == RUNNING)).all():
                self.stop(db, row, "the server shut down")
