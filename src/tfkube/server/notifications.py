"""Telling people when their jobs end or stall: each user chooses the events (a job of
theirs succeeded, failed, stalled) and where to be told, a webhook (tfkube's JSON body, or
Slack's incoming-webhook body) and/or e-mail through the SMTP server the server was
configured with.

    JobService._sync -> job_events (pure: what changed) -> Notifier.enqueue: one row per
      channel of the job's owner who chose that event (`notifications`, unique per user,
      job, event and channel: a message is queued once)
    Notifier's thread: every due row -> webhook (POST, signed) | e-mail (SMTP) -> sent;
      a failure is tried again after `backoff(attempts)`, given up after MAX_ATTEMPTS

A webhook's body is signed with HMAC-SHA256 over `<timestamp>.<body>` with the user's own
secret (`X-Tfkube-Signature: sha256=<hex>`, `X-Tfkube-Timestamp`): the receiver checks
the signature and the time. The secret is derived from the server's key and a number kept
per user (`user_secret`), so no secret is stored; a new one is a new number. A webhook is
sent like a member's code URL is fetched (`core.fetch`): the host resolved once and every
address judged (no loopback or private address unless `--allow-fetch-from` allows it),
the judged address connected to, no redirect followed, a short deadline."""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import logging
import re
import smtplib
import socket
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tfkube.netguard import IPNetwork, refused
from tfkube.server.core.config import ServerSettings
from tfkube.server.core.fetch import resolve
from tfkube.server.core.forwarded import parse_networks
from tfkube.server.core.tables import Job, Notification, NotificationPrefs, Team

log = logging.getLogger(__name__)

EVENTS = ("succeeded", "failed", "stalled")
FORMATS = ("json", "slack")
MAX_ATTEMPTS = 6
"""Tries per message: the first and five more, after 2, 4, 8, 16 and 32 s."""
SEND_SECONDS = 10.0
"""A receiver's whole answer (connect, send, status) must come within this."""
_EMAIL = re.compile(r"^[^@\s<>(),;:\"\[\]\\]{1,64}@[A-Za-z0-9.-]{1,253}\.[A-Za-z]{2,63}$")


# -- the rules (pure) ---------------------------------------------------------------------------


def job_events(
    before_phase: str, before_stalled: bool, phase: str, reason: str | None, stalled: bool
) -> list[str]:
    """What a change of a job tells its owner: it succeeded; it failed (not when someone
    stopped it: they know); a replica stalls (once, until none does)."""
    out = []
    if phase != before_phase:
        if phase == "Succeeded":
            out.append("succeeded")
        elif phase == "Failed" and reason != "Stopped":
            out.append("failed")
    if stalled and not before_stalled and phase in {"Running", "Restarting", "Pending"}:
        out.append("stalled")
    return out


def check_prefs(
    events: object, webhook_url: object, webhook_format: object, email: object
) -> list[tuple[str, str]]:
    """Every problem of a user's choices as (field, message); none: they can be kept."""
    problems: list[tuple[str, str]] = []
    if not isinstance(events, list) or any(e not in EVENTS for e in events):
        problems.append(("events", f"choose among {', '.join(EVENTS)}"))
    if webhook_url is not None:
        if not isinstance(webhook_url, str) or len(webhook_url) > 2048:
            problems.append(("webhook_url", "give an http(s) URL of at most 2,048 characters"))
        else:
            parts = urlsplit(webhook_url)
            if parts.scheme not in {"http", "https"} or not parts.hostname:
                problems.append(
                    ("webhook_url", "give an http(s) URL, e.g. https://hooks.example.com/x")
                )
            elif any(ord(c) < 0x21 or c == "\x7f" for c in webhook_url):
                problems.append(("webhook_url", "a URL has no spaces or control characters"))
    if webhook_format not in FORMATS:
        problems.append(("webhook_format", "json (tfkube's body) or slack (Slack's)"))
    if email is not None and (not isinstance(email, str) or not _EMAIL.fullmatch(email)):
        problems.append(("email", "give an e-mail address, e.g. ada@example.com"))
    return problems


def user_secret(key: bytes, user_id: int, generation: int) -> str:
    """A user's webhook signing secret: derived, never stored."""
    message = f"tfkube notifications:{user_id}:{generation}".encode()
    return "whsec_" + hmac.new(key, message, hashlib.sha256).hexdigest()


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """`X-Tfkube-Signature`: HMAC-SHA256 of `<timestamp>.<body>` with the secret."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + digest.hexdigest()


def backoff(attempts: int) -> float:
    """Seconds before the next try after `attempts` failed ones: 2, 4, 8, ... 300 at most."""
    return float(min(300, 2 ** max(1, attempts)))


def facts(row: Job, team: str, event: str, base_url: str) -> dict[str, Any]:
    """What a message says about a job's event."""
    return {
        "event": event,
        "job": {
            "id": row.id,
            "name": row.name,
            "team": team,
            "phase": row.phase,
            "reason": row.reason,
            "message": (row.message or "")[:500],
            "url": f"{base_url}/jobs/{row.id}",
        },
        "result": dict(row.result) if row.result else None,
    }


_SAYS = {"succeeded": "succeeded", "failed": "failed", "stalled": "stalls"}


def sentence(body: dict[str, Any]) -> str:
    job = body["job"]
    text = f"Job {job['name']} ({job['team']}) {_SAYS.get(body['event'], body['event'])}"
    if body["event"] == "failed" and job.get("reason"):
        text += f": {job['reason']}"
    if body["event"] == "stalled":
        text += ": a replica made no progress lately"
    if body.get("result"):
        text += " · " + ", ".join(f"{k} {v}" for k, v in list(body["result"].items())[:6])
    return text


def webhook_body(body: dict[str, Any], fmt: str) -> bytes:
    """The bytes POSTed: tfkube's JSON (`{"event": "job.failed", "job": {...}, ...}`) or
    Slack's (`{"text": ...}`, with a link to the job)."""
    if fmt == "slack":
        url = body["job"]["url"]
        return json.dumps({"text": f"{sentence(body)} <{url}|open>"}).encode()
    return json.dumps({**body, "event": f"job.{body['event']}"}, sort_keys=True).encode()


# -- a user's choices (the writes) ---------------------------------------------------------------


def save_prefs(
    db: Session,
    user_id: int,
    events: list[str],
    webhook_url: str | None,
    webhook_format: str,
    email: str | None,
) -> None:
    """Keep a user's choices (already checked by `check_prefs`)."""
    row = db.get(NotificationPrefs, user_id)
    if row is None:
        row = NotificationPrefs(user_id=user_id, secret_generation=0)
        db.add(row)
    row.events = [e for e in EVENTS if e in events]
    row.webhook_url = webhook_url or None
    row.webhook_format = webhook_format
    row.email = email or None
    row.updated_at = time.time()
    db.commit()


def new_secret(db: Session, key: bytes, user_id: int) -> str:
    """A new signing secret for the user's webhook (the previous one stops signing)."""
    row = db.get(NotificationPrefs, user_id)
    if row is None:
        row = NotificationPrefs(
            user_id=user_id, events=[], webhook_format="json", secret_generation=0
        )
        db.add(row)
    row.secret_generation += 1
    row.updated_at = time.time()
    db.commit()
    return user_secret(key, user_id, row.secret_generation)


# -- sending -------------------------------------------------------------------------------------


class SendFailed(Exception):
    pass


def post_webhook(
    url: str, data: bytes, headers: dict[str, str], allowed: Sequence[IPNetwork]
) -> None:
    """POST `data` to `url`, connecting only to an address the fetch policy allows; raises
    SendFailed unless it answers 2xx within SEND_SECONDS."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise SendFailed("the URL has an invalid port") from None
    addresses = resolve(host, port)
    if not addresses or any(refused(a, allowed) for a in addresses):
        raise SendFailed(
            "the server does not send to this address, or it does not answer (loopback and "
            "private addresses are refused unless an administrator allows them)"
        )
    try:
        sock = socket.create_connection((addresses[0], port), timeout=SEND_SECONDS)
        if parts.scheme == "https":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        conn = http.client.HTTPConnection(host, port, timeout=SEND_SECONDS)
        conn.sock = sock
        try:
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            conn.request("POST", path, body=data, headers=headers)
            answer = conn.getresponse()
            answer.read(4096)
        finally:
            conn.close()
    except (OSError, http.client.HTTPException, ssl.SSLError) as exc:
        raise SendFailed(f"{type(exc).__name__}: {exc}"[:300]) from None
    if not 200 <= answer.status < 300:
        raise SendFailed(f"the receiver answered {answer.status}")


@dataclass(frozen=True)
class Smtp:
    host: str
    port: int
    sender: str


def parse_smtp(text: str) -> tuple[str, int]:
    """`HOST:PORT` (or HOST: port 25) -> (host, port); ValueError says what is wrong."""
    host, _, port = text.rpartition(":") if ":" in text else (text, "", "25")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r}: give the SMTP server as HOST:PORT, e.g. mail.example.com:25")
    return host, int(port)


def send_email(smtp: Smtp, to: str, subject: str, text: str) -> None:
    message = EmailMessage()
    message["From"] = smtp.sender
    message["To"] = to
    message["Subject"] = subject
    message.set_content(text)
    try:
        with smtplib.SMTP(smtp.host, smtp.port, timeout=SEND_SECONDS) as client:
            client.send_message(message)
    except (OSError, smtplib.SMTPException) as exc:
        raise SendFailed(f"{type(exc).__name__}: {exc}"[:300]) from None


class Notifier:
    """Queues the messages a job's events call for and delivers them from one thread."""

    def __init__(
        self, settings: ServerSettings, sessions: sessionmaker[Session], key: bytes
    ) -> None:
        self.settings = settings
        self.sessions = sessions
        self.key = key
        self.allowed = parse_networks(settings.allow_fetch_from)
        self.smtp = (
            Smtp(*parse_smtp(settings.smtp_server), settings.smtp_from)
            if settings.smtp_server
            else None
        )
        self.poke = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def enqueue(self, db: Session, row: Job, event: str) -> None:
        """Queue `event` of `row` for its owner's channels, if they chose it (in `db`'s
        transaction: the caller commits)."""
        if row.created_by is None:
            return
        prefs = db.get(NotificationPrefs, row.created_by)
        if prefs is None or event not in (prefs.events or []):
            return
        channels = []
        if prefs.webhook_url:
            channels.append("webhook")
        if prefs.email and self.smtp is not None:
            channels.append("email")
        if not channels:
            return
        team = db.get(Team, row.team_id)
        body = facts(row, team.name if team else "", event, self.settings.base_url)
        now = time.time()
        for channel in channels:
            exists = db.scalars(
                select(Notification.id).where(
                    Notification.user_id == row.created_by,
                    Notification.job_id == row.id,
                    Notification.event == event,
                    Notification.channel == channel,
                )
            ).first()
            if exists is None:
                db.add(
                    Notification(
                        user_id=row.created_by,
                        job_id=row.id,
                        event=event,
                        channel=channel,
                        state="pending",
                        attempts=0,
                        next_at=now,
                        body=body,
                        created_at=now,
                    )
                )
        self.poke.set()

    def deliver_due(self) -> int:
        """Try every message that is due once; -> how many were tried."""
        with self.sessions() as db:
            due = db.scalars(
                select(Notification)
                .where(Notification.state == "pending", Notification.next_at <= time.time())
                .order_by(Notification.next_at)
                .limit(20)
            ).all()
            for note in due:
                prefs = db.get(NotificationPrefs, note.user_id)
                try:
                    if prefs is None:
                        raise SendFailed("the user no longer has notifications")
                    self._send(note, prefs)
                except SendFailed as exc:
                    note.attempts += 1
                    note.last_error = str(exc)
                    if note.attempts >= MAX_ATTEMPTS:
                        note.state = "failed"
                    else:
                        note.next_at = time.time() + backoff(note.attempts)
                    log.info("notification %s not delivered (%s)", note.id, exc)
                else:
                    note.attempts += 1
                    note.state = "sent"
                    note.sent_at = time.time()
                    note.last_error = None
                db.commit()
            return len(due)

    def _send(self, note: Notification, prefs: NotificationPrefs) -> None:
        if note.channel == "webhook":
            if not prefs.webhook_url:
                raise SendFailed("no webhook is set any more")
            data = webhook_body(note.body, prefs.webhook_format)
            stamp = int(time.time())
            secret = user_secret(self.key, note.user_id, prefs.secret_generation)
            headers = {
                "Content-Type": "application/json",
                "User-Agent": "tfkube-notifications",
                "X-Tfkube-Event": f"job.{note.event}",
                "X-Tfkube-Delivery": str(note.id),
                "X-Tfkube-Timestamp": str(stamp),
                "X-Tfkube-Signature": sign(secret, stamp, data),
            }
            post_webhook(prefs.webhook_url, data, headers, self.allowed)
            return
        if self.smtp is None or not prefs.email:
            raise SendFailed("no e-mail address, or the server sends no e-mail")
        text = sentence(note.body) + f"\n\n{note.body['job']['url']}\n"
        send_email(self.smtp, prefs.email, f"[tfkube] {sentence(note.body)}"[:200], text)

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.deliver_due():
                    continue
            except Exception:
                log.exception("delivering notifications failed")
            self.poke.wait(1.0)
            self.poke.clear()

    def start_loop(self) -> None:
        self._thread = threading.Thread(target=self.run, name="tfkube-notify", daemon=True)
        self._thread.start()

    def stop_loop(self) -> None:
        self._stop.set()
        self.poke.set()
        if self._thread is not None:
            self._thread.join(30)
