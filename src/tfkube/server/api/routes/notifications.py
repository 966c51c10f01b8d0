"""A user's notifications: which events of their own jobs (succeeded, failed, stalled)
they are told of, by webhook (signed) and/or e-mail; their signing secret (shown once);
the messages sent and how their delivery went. The user's own: not with a token limited to
one team (a notebook's)."""

from __future__ import annotations

from fastapi import APIRouter

from tfkube.server import queries
from tfkube.server.api.deps import PersonalUser, PlatformDep, SessionDep
from tfkube.server.api.errors import FieldHTTPError
from tfkube.server.notifications import check_prefs, new_secret, save_prefs
from tfkube.wire import (
    NotificationOut,
    NotificationPrefsIn,
    NotificationPrefsOut,
    NotificationSecretOut,
)

router = APIRouter(prefix="/api/v1/users/me/notifications", tags=["notifications"])


@router.get("")
def read_prefs(
    principal: PersonalUser, db: SessionDep, platform: PlatformDep
) -> NotificationPrefsOut:
    """What the caller is told about their jobs, and where."""
    return queries.notifications.prefs(db, principal.user.id, platform.notifier.smtp is not None)


@router.put("")
def write_prefs(
    body: NotificationPrefsIn, principal: PersonalUser, db: SessionDep, platform: PlatformDep
) -> NotificationPrefsOut:
    """Replace the caller's choices. 422 naming the field: an event not among succeeded,
    failed, stalled; a webhook URL that is not http(s); a format not json or slack; an
    address that is not one; an e-mail address on a server that sends no e-mail."""
    url = (body.webhook_url or "").strip() or None
    email = (body.email or "").strip() or None
    problems = check_prefs(body.events, url, body.webhook_format, email)
    if email and platform.notifier.smtp is None:
        problems.append(("email", "this server sends no e-mail (it has no --smtp-server)"))
    if problems:
        raise FieldHTTPError(problems, "; ".join(f"{f}: {m}" for f, m in problems))
    save_prefs(db, principal.user.id, body.events, url, body.webhook_format, email)
    return queries.notifications.prefs(db, principal.user.id, platform.notifier.smtp is not None)


@router.post("/secret", status_code=201)
def rotate_secret(
    principal: PersonalUser, db: SessionDep, platform: PlatformDep
) -> NotificationSecretOut:
    """A new secret to check webhook signatures with, shown this once:
    `X-Tfkube-Signature` is `sha256=` and the hex HMAC-SHA256 of
    `<X-Tfkube-Timestamp>.<body>` with it."""
    return NotificationSecretOut(secret=new_secret(db, platform.key, principal.user.id))


@router.get("/sent")
def sent(principal: PersonalUser, db: SessionDep) -> list[NotificationOut]:
    """The caller's newest 50 messages (newest first) and how each delivery went."""
    return queries.notifications.recent(db, principal.user.id)
