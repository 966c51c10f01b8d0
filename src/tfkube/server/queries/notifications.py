"""A user's notification choices and the messages sent to them (the API's
`/users/me/notifications` and the account page read these)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from tfkube.server.core.tables import Notification, NotificationPrefs
from tfkube.wire import NotificationOut, NotificationPrefsOut

SHOWN = 50
"""The newest messages a user's list shows."""


def prefs(db: Session, user_id: int, email_available: bool) -> NotificationPrefsOut:
    row = db.get(NotificationPrefs, user_id)
    if row is None:
        return NotificationPrefsOut(email_available=email_available, secret_made=False)
    return NotificationPrefsOut(
        events=list(row.events or []),
        webhook_url=row.webhook_url,
        webhook_format=row.webhook_format,
        email=row.email,
        email_available=email_available,
        secret_made=row.secret_generation > 0,
    )


def recent(db: Session, user_id: int, limit: int = SHOWN) -> list[NotificationOut]:
    rows = db.scalars(
        select(Notification)
        .where(Notification.user_id == user_id)
        .order_by(Notification.created_at.desc(), Notification.id.desc())
        .limit(limit)
    ).all()
    return [
        NotificationOut(
            id=n.id,
            job_id=n.job_id,
            job=str((n.body.get("job") or {}).get("name", "")),
            event=n.event,
            channel=n.channel,
            state=n.state,
            attempts=n.attempts,
            last_error=n.last_error,
            created_at=n.created_at,
            sent_at=n.sent_at,
        )
        for n in rows
    ]
