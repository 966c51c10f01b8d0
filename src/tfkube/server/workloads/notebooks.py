"""Notebooks: one JupyterLab server per user and team, opened through the server's proxy
at `/proxy/notebook/<id>/lab`, for its owner only.

    POST /api/v1/teams/<team>/notebook, or opening its proxy URL -> ensure:
        a fresh API token for the user limited to the notebook's team (its `tfkube.Client()`
        signs in with it: TFKUBE_URL, TFKUBE_TOKEN, TFKUBE_TEAM in its environment; the
        user's role in that team only, nothing site-wide, not their account's tokens or
        password: `accounts.Bearer`); the previous one revoked;
        Engine.start(team, NotebookWorkload) (the team's latest artifacts offered with it;
        Jupyter's own token on: the proxy sends it, the notebook's port alone opens nothing)
    idle loop (every 30 s at most): a notebook whose Jupyter saw no activity (its own
        `last_activity`, read through the proxy's upstream) and no proxied request for
        `notebook_idle_seconds` is stopped; so is one whose process ended; a running one's
        API token is renewed a day after it was given or last renewed, so it lasts as long
        as the notebook runs (`TOKEN_DAYS` after the last renewal at most)
    stop (idle, asked, server shut-down where the engine does not keep it): Engine.stop,
        token revoked
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import threading
import time
import uuid
from datetime import datetime

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tfkube.engines import ArtifactCopy, Engine, Handle, NotebookWorkload, Upstream
from tfkube.server.accounts import create_token
from tfkube.server.artifacts import BlobStore
from tfkube.server.core.config import ServerSettings
from tfkube.server.core.tables import ApiToken, Artifact, Notebook, Team, User
from tfkube.server.tenants import tenant_of

log = logging.getLogger("tfkube.server")

RUNNING, STOPPED = "running", "stopped"
KIND = "notebook"
TOKEN_DAYS = 7
"""A notebook's API token expires this long after it was made or last renewed."""
TOKEN_RENEW_SECONDS = (TOKEN_DAYS - 1) * 86400.0
"""The idle loop renews a running notebook's token once fewer seconds than this are left:
a notebook in use for weeks keeps its `tfkube.Client()`; one the server stopped has its
token revoked, and one no server watches any more (its server gone for good) loses it
within `TOKEN_DAYS`."""
VERIFY_SECONDS = 5.0
"""How long a notebook found running is trusted before opening it asks its engine again."""


def base_url(notebook_id: str) -> str:
    """The proxy path JupyterLab serves below."""
    return f"/proxy/{KIND}/{notebook_id}/"


def idle_for(now: float, last_proxied: float, jupyter_activity: float | None) -> float:
    """Seconds since anything happened in the notebook (pure)."""
    return now - max(last_proxied, jupyter_activity or 0.0)


def iso_seconds(text: str | None) -> float | None:
    """An ISO 8601 time (Jupyter's `last_activity`) in seconds since the epoch, or None."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class Notebooks:
    def __init__(
        self,
        settings: ServerSettings,
        engine: Engine,
        sessions: sessionmaker[Session],
        blobs: BlobStore,
        key: bytes,
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.sessions = sessions
        self.blobs = blobs
        self.key = key
        self._lock = threading.Lock()
        self._starting: dict[tuple[int, int], threading.Lock] = {}
        self._last_used: dict[str, float] = {}
        self._verified: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def jupyter_token(self, row: Notebook) -> str:
        """Jupyter's token for this start of the notebook: JupyterLab shows it to its
        owner's browser (in the page), so a new start makes a new one."""
        message = f"notebook:{row.id}:{row.started_at!r}".encode()
        return hmac.new(self.key, message, hashlib.sha256).hexdigest()

    def touch(self, notebook_id: str) -> None:
        with self._lock:
            self._last_used[notebook_id] = time.time()

    def workload(
        self, db: Session, row: Notebook, client_token: str = ""
    ) -> tuple[Team, NotebookWorkload]:
        team, user = db.get(Team, row.team_id), db.get(User, row.user_id)
        assert team is not None
        assert user is not None
        return team, NotebookWorkload(
            id=row.id,
            user=user.name,
            base_url=base_url(row.id),
            server_url=self.settings.replica_url,
            jupyter_token=self.jupyter_token(row),
            client_token=client_token,
            artifacts=self._artifacts(db, team) if client_token else (),
        )

    def _artifacts(self, db: Session, team: Team) -> tuple[ArtifactCopy, ...]:
        """The latest version of each of the team's artifacts."""
        rows = db.scalars(
            select(Artifact)
            .where(Artifact.team_id == team.id)
            .order_by(Artifact.name, Artifact.version.desc())
        ).all()
        latest: dict[tuple[str, str], Artifact] = {}
        for a in rows:
            latest.setdefault((a.kind, a.name), a)
        return tuple(
            ArtifactCopy(kind, name, a.sha256, self.blobs.path(a.sha256))
            for (kind, name), a in latest.items()
        )

    # -- ensure (start), stop ----------------------------------------------------------

    def _running(self, db: Session, row: Notebook) -> bool:
        """Whether the notebook runs (asked of its engine at most every VERIFY_SECONDS)."""
        if row.state != RUNNING:
            return False
        now = time.monotonic()
        with self._lock:
            if now - self._verified.get(row.id, -VERIFY_SECONDS) < VERIFY_SECONDS:
                return True
        team, workload = self.workload(db, row)
        if self.engine.status(tenant_of(team), workload, Handle(row.handle or {})).exited:
            return False
        with self._lock:
            self._verified[row.id] = now
        return True

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
                    handle={},
                    created_at=time.time(),
                )
                db.add(row)
                db.commit()
            if self._running(db, row):
                self.touch(row.id)
                return row
            self._start(db, row, user)
            self.touch(row.id)
            return row

    def _client_token(self, db: Session, row: Notebook, user: User) -> str:
        self._revoke(db, row)
        token, value = create_token(
            db, user, f"notebook {row.id}", time.time() + TOKEN_DAYS * 86400, team_id=row.team_id
        )
        row.token_id = token.id
        return value

    def _revoke(self, db: Session, row: Notebook) -> None:
        if row.token_id is not None:
            token = db.get(ApiToken, row.token_id)
            if token is not None and token.revoked_at is None:
                token.revoked_at = time.time()
            row.token_id = None

    def _start(self, db: Session, row: Notebook, user: User) -> None:
        if row.handle:  # a process that ended by itself: what is left of it goes
            team, old = self.workload(db, row)
            with contextlib.suppress(Exception):
                self.engine.stop(tenant_of(team), old, Handle(row.handle))
        value = self._client_token(db, row, user)
        row.started_at = time.time()
        team, workload = self.workload(db, row, value)
        handle = self.engine.start(tenant_of(team), workload)
        row.handle = dict(handle.data)
        row.state, row.stopped_at, row.message = RUNNING, None, None
        with self._lock:
            self._verified[row.id] = time.monotonic()
        db.commit()

    def stop(self, db: Session, row: Notebook, message: str = "stopped") -> None:
        if row.state == RUNNING or row.handle:
            team, workload = self.workload(db, row)
            self.engine.stop(tenant_of(team), workload, Handle(row.handle or {}))
        self._forget(db, row, message)

    def _forget(self, db: Session, row: Notebook, message: str) -> None:
        self._revoke(db, row)
        row.handle = {}
        row.state, row.stopped_at, row.message = STOPPED, time.time(), message
        with self._lock:
            self._verified.pop(row.id, None)
        db.commit()

    # -- reads --------------------------------------------------------------------------

    def upstream(self, db: Session, row: Notebook) -> Upstream:
        """Where the proxy sends a request. Raises NotAvailable."""
        team, workload = self.workload(db, row)
        return self.engine.upstream(tenant_of(team), workload, Handle(row.handle or {}))

    def _jupyter_activity(self, db: Session, row: Notebook) -> float | None:
        """Jupyter's own record of when its kernels or terminals were last busy."""
        with contextlib.suppress(Exception):
            up = self.upstream(db, row)
            transport = None if up.unix is None else httpx.HTTPTransport(uds=up.unix)
            with httpx.Client(verify=up.verify, transport=transport) as client:
                r = client.get(
                    f"{up.prefix}/api/status", headers=up.headers, params=up.params, timeout=5.0
                )
            if r.status_code == 200:
                return iso_seconds(r.json().get("last_activity"))
        return None

    # -- the idle loop, start-up, shut-down ----------------------------------------------------

    def reap_once(self) -> None:
        now = time.time()
        with self.sessions() as db:
            rows = db.scalars(select(Notebook).where(Notebook.state == RUNNING)).all()
            for row in rows:
                team, workload = self.workload(db, row)
                handle = Handle(row.handle or {})
                if self.engine.status(tenant_of(team), workload, handle).exited:
                    self.stop(db, row, "its JupyterLab process exited")
                    continue
                with self._lock:
                    used = self._last_used.get(row.id, row.started_at or now)
                idle = idle_for(now, used, self._jupyter_activity(db, row))
                if idle > self.settings.notebook_idle_seconds:
                    log.info("notebook %s idle for %.0f s: stopping it", row.id, idle)
                    self.stop(db, row, f"stopped after {idle / 60:.0f} idle minutes")
                    continue
                self._renew_token(db, row, now)

    @staticmethod
    def _renew_token(db: Session, row: Notebook, now: float) -> None:
        """A running notebook's token, near its expiry, lasts `TOKEN_DAYS` from now (the
        same token: the notebook's environment keeps working)."""
        token = db.get(ApiToken, row.token_id) if row.token_id is not None else None
        if token is None or token.revoked_at is not None or token.expires_at is None:
            return
        if token.expires_at - now > TOKEN_RENEW_SECONDS:
            return
        token.expires_at = now + TOKEN_DAYS * 86400
        db.commit()
        log.info("notebook %s: its API token renewed for %d days", row.id, TOKEN_DAYS)

    def _loop(self) -> None:
        while not self._stop.wait(min(30.0, self.settings.notebook_idle_seconds / 2)):
            try:
                self.reap_once()
            except Exception:
                log.exception("the notebook idle check failed")

    def start_loop(self) -> None:
        with self.sessions() as db:  # one that ended while no server watched is stopped
            for row in db.scalars(select(Notebook).where(Notebook.state == RUNNING)).all():
                team, workload = self.workload(db, row)
                if self.engine.status(tenant_of(team), workload, Handle(row.handle or {})).exited:
                    self.stop(db, row, "the server restarted")
        self._thread = threading.Thread(target=self._loop, name="tfkube-notebooks", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the loop; release every notebook: one the engine stops (a process here) is
        recorded as stopped, one it keeps (a pod) stays running for the next server."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        with self.sessions() as db:
            for row in db.scalars(select(Notebook).where(Notebook.state == RUNNING)).all():
                team, workload = self.workload(db, row)
                try:
                    kept = self.engine.release(tenant_of(team), workload, Handle(row.handle or {}))
                except Exception:
                    log.exception("releasing notebook %s failed", row.id)
                    continue
                if not kept:
                    self._forget(db, row, "the server shut down")
