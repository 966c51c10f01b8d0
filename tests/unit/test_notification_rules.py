"""The rules of notifications (tfkube.server.notifications), table-tested; and a webhook
to an address the fetch policy refuses is never connected to."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket

import pytest

from tfkube.server.notifications import (
    SendFailed,
    backoff,
    check_prefs,
    job_events,
    parse_smtp,
    post_webhook,
    sentence,
    sign,
    user_secret,
    webhook_body,
)


@pytest.mark.parametrize(
    ("change", "events"),
    [
        (("Running", False, "Succeeded", None, False), ["succeeded"]),
        (("Running", False, "Failed", "BackoffLimitExceeded", False), ["failed"]),
        (("Running", False, "Failed", "Stopped", False), []),  # someone stopped it
        (("Succeeded", False, "Succeeded", None, False), []),  # no change
        (("Running", False, "Running", None, True), ["stalled"]),
        (("Running", True, "Running", None, True), []),  # still the same stall
        (("Running", True, "Running", None, False), []),
        (("Running", False, "Failed", "DeadlineExceeded", True), ["failed"]),
        (("Pending", False, "Running", None, False), []),
    ],
)
def test_what_a_change_tells(
    change: tuple[str, bool, str, str | None, bool], events: list[str]
) -> None:
    assert job_events(*change) == events


@pytest.mark.parametrize(
    ("prefs", "fields"),
    [
        ((["succeeded", "failed", "stalled"], "https://h.example/x", "json", "a@b.example"), []),
        (([], None, "slack", None), []),
        ((["exploded"], None, "json", None), ["events"]),
        (("failed", None, "json", None), ["events"]),
        (([], "ftp://h/x", "json", None), ["webhook_url"]),
        (([], "https://", "json", None), ["webhook_url"]),
        (([], "https://h.example/a b", "json", None), ["webhook_url"]),
        (([], "https://h.example/" + "x" * 2048, "json", None), ["webhook_url"]),
        (([], None, "xml", None), ["webhook_format"]),
        (([], None, "json", "nobody"), ["email"]),
        (([], None, "json", "a@b"), ["email"]),
        ((["x"], "ftp://x", "xml", "y"), ["events", "webhook_url", "webhook_format", "email"]),
    ],
)
def test_choices_checked_field_by_field(prefs: tuple[object, ...], fields: list[str]) -> None:
    assert [f for f, _ in check_prefs(*prefs)] == fields


def test_signature_and_secret() -> None:
    key = b"k" * 32
    one, two = user_secret(key, 7, 1), user_secret(key, 7, 2)
    assert one.startswith("whsec_")
    assert one != two
    assert one != user_secret(key, 8, 1)
    assert one == user_secret(key, 7, 1)  # derived, not stored
    body = b'{"a": 1}'
    expected = hmac.new(one.encode(), b"1700000000." + body, hashlib.sha256).hexdigest()
    assert sign(one, 1700000000, body) == f"sha256={expected}"


def test_backoff_grows_and_is_capped() -> None:
    assert [backoff(n) for n in (1, 2, 3, 4, 5)] == [2, 4, 8, 16, 32]
    assert backoff(30) == 300


FACTS = {
    "event": "failed",
    "job": {
        "id": "j1",
        "name": "mnist",
        "team": "vision",
        "phase": "Failed",
        "reason": "BackoffLimitExceeded",
        "message": "",
        "url": "http://s/jobs/j1",
    },
    "result": {"test_accuracy": 0.5},
}


def test_bodies() -> None:
    plain = json.loads(webhook_body(FACTS, "json"))
    assert plain["event"] == "job.failed"
    assert plain["job"]["url"] == "http://s/jobs/j1"
    slack = json.loads(webhook_body(FACTS, "slack"))
    assert slack == {
        "text": "Job mnist (vision) failed: BackoffLimitExceeded · test_accuracy 0.5 "
        "<http://s/jobs/j1|open>"
    }
    assert sentence({**FACTS, "event": "stalled", "result": None}).endswith(
        "stalls: a replica made no progress lately"
    )


@pytest.mark.parametrize(
    ("text", "parsed"), [("mail.example.com:2525", ("mail.example.com", 2525)), ("m", ("m", 25))]
)
def test_smtp_server(text: str, parsed: tuple[str, int]) -> None:
    assert parse_smtp(text) == parsed


@pytest.mark.parametrize("text", [":25", "m:x", "m:0", "m:70000"])
def test_smtp_server_refused(text: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_smtp(text)


def test_a_refused_address_is_never_connected_to() -> None:
    """A listener on loopback that would take the connection: without an admin's
    --allow-fetch-from the webhook is refused before any connection."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        with pytest.raises(SendFailed, match="does not send to this address"):
            post_webhook(f"http://127.0.0.1:{port}/x", b"{}", {}, ())
        with pytest.raises(TimeoutError):
            listener.accept()
