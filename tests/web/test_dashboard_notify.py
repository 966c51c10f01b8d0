"""Notifications against real local receivers started here: an HTTP receiver on
127.0.0.1 (which refuses the first two deliveries, so a message is retried with backoff)
and an SMTP server (aiosmtpd) on 127.0.0.1, beside a real `tfkube server` (local engine)
told to send there (`--allow-fetch-from 127.0.0.1/32 --smtp-server`). bob chooses his
events, a webhook and an e-mail address on his account page in Chromium, makes his
signing secret there, and his jobs' failure, success and stall arrive signed (checked
with that secret), Slack-compatible when he asks, and by e-mail."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from conftest import TAG  # tests/conftest.py
from server._server import Api, ServerProc, env_with, free_port
from server.conftest import stop_server, targz, upload, wait_job

from ._browser import LAPTOP, poll, shot, sign_in
from .conftest import PASSWORD, Site, two_teams


@dataclass
class Received:
    requests: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    refuse: int = 0
    """How many of the next requests answer 500."""
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture(scope="module")
def receiver() -> Iterator[tuple[str, Received]]:
    got = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with got.lock:
                got.requests.append((dict(self.headers.items()), body))
                refuse = got.refuse > 0
                got.refuse -= 1 if refuse else 0
            self.send_response(500 if refuse else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", got
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.fixture(scope="module")
def mailbox() -> Iterator[tuple[int, list[Any]]]:
    from aiosmtpd.controller import Controller

    messages: list[Any] = []

    class Handler:
        async def handle_DATA(self, _server: Any, _session: Any, envelope: Any) -> str:
            messages.append(envelope)
            return "250 OK"

    port = free_port()
    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield port, messages
    finally:
        controller.stop()


@pytest.fixture(scope="module")
def site(
    tmp_path_factory: pytest.TempPathFactory, mailbox: tuple[int, list[Any]]
) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("web-notify")
    tag = uuid.uuid4().hex
    extra = ["--cpus", "2", "--allow-fetch-from", "127.0.0.1/32"]
    extra += ["--smtp-server", f"127.0.0.1:{mailbox[0]}", "--smtp-from", "tfkube@example.com"]
    server = ServerProc(tmp / "data", free_port(), None, env_with(TAG, tag, tmp / "home"), extra)
    server.start()
    made = Site(server, tag)
    try:
        yield made
    finally:
        from server._server import api_for

        stop_server(server, api_for(server.url, made.admin), tag)


@dataclass
class World:
    bob: Api
    carol: Api


@pytest.fixture(scope="module")
def world(site: Site) -> Iterator[World]:
    bob, carol = two_teams(site)
    code = {
        "run.sh": (
            "#!/bin/sh\n"
            'case "$*" in *--fail*) echo boom; exit 3 ;; esac\n'
            'case "$*" in *--hang*) echo quiet now; sleep 120 ;; esac\n'
            'echo \'{"test_accuracy": 0.75}\' > "$TFKUBE_LOG_DIR/result.json"\n'
        )
    }
    bob.ok(upload(bob, "vision", "notify", targz(code)), 201)
    try:
        yield World(bob, carol)
    finally:
        bob.close()
        carol.close()


def _submit(api: Api, name: str, args: list[str], **extra: Any) -> str:
    body = {"name": name, "workers": 1, "code": "notify", "args": args, **extra}
    return str(api.ok(api.post("/api/v1/teams/vision/jobs", json=body), 201)["id"])


def _verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    lower = {k.lower(): v for k, v in headers.items()}
    stamp = lower["x-tfkube-timestamp"]
    expected = hmac.new(secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256)
    return hmac.compare_digest(lower["x-tfkube-signature"], "sha256=" + expected.hexdigest())


def test_the_api_refuses_bad_choices(world: World) -> None:
    url = "/api/v1/users/me/notifications"
    for body, field_name in (
        ({"events": ["exploded"]}, "events"),
        ({"webhook_url": "ftp://example.com/x"}, "webhook_url"),
        ({"webhook_url": "https://"}, "webhook_url"),
        ({"webhook_format": "xml"}, "webhook_format"),
        ({"email": "not an address"}, "email"),
    ):
        r = world.carol.http.put(url, json=body)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["errors"][0]["field"] == field_name
    assert world.carol.ok(world.carol.get(url))["email_available"] is True


def test_told_by_signed_webhook_and_email(
    browser: Any,
    site: Site,
    world: World,
    receiver: tuple[str, Received],
    mailbox: tuple[int, list[Any]],
) -> None:
    hook, got = receiver
    _port, messages = mailbox
    context = browser.new_context(viewport=LAPTOP, base_url=site.url)
    context.set_default_timeout(30_000)
    page = context.new_page()
    sign_in(page, site.url, "bob", PASSWORD)
    page.goto("/account")
    section = page.locator("#notifications")
    section.get_by_label("succeeded").check()
    section.get_by_label("failed (not when stopped)").check()
    section.get_by_label("stalls").check()
    section.get_by_label("Webhook URL").fill("ftp://nowhere")
    section.get_by_role("button", name="Save notifications").click()
    section.locator('[data-error-for="webhook_url"]').filter(has_text="http(s)").wait_for()
    section.get_by_label("Webhook URL").fill(hook)
    section.get_by_label("E-mail address").fill("bob@example.com")
    with page.expect_navigation():
        section.get_by_role("button", name="Save notifications").click()
    assert page.locator("#notifications").get_by_label("Webhook URL").input_value() == hook
    page.locator("#notifications").get_by_role("button", name="Make my signing secret").click()
    secret_box = page.locator("[data-secret-value]")
    poll("the secret", lambda: secret_box.inner_text().startswith("whsec_"), 30)
    secret = secret_box.inner_text()
    shot(page, "80-notifications")

    # A job that fails: the receiver refuses twice, the third try (after 2 + 4 s) lands.
    with got.lock:
        got.refuse = 2
    failed = _submit(world.bob, "fails", ["--fail"], restart_policy="Never")
    wait_job(world.bob, failed, {"Failed"}, timeout=180)
    poll("three tries of the webhook", lambda: len(got.requests) >= 3, 120)
    tries = got.requests[:3]
    assert len({h["X-Tfkube-Delivery"] for h, _ in tries}) == 1  # one message, retried
    headers, body = tries[-1]
    assert _verify(secret, headers, body)
    assert not _verify(secret + "x", headers, body)
    sent = json.loads(body)
    assert sent["event"] == "job.failed"
    assert sent["job"]["id"] == failed
    assert sent["job"]["url"] == f"{site.url}/jobs/{failed}"
    assert headers["X-Tfkube-Event"] == "job.failed"
    stamps = [int(h["X-Tfkube-Timestamp"]) for h, _ in tries]
    assert stamps[2] - stamps[0] >= 5  # backoff: 2 s, then 4 s
    poll("the e-mail", lambda: messages, 60)
    mail = messages[0]
    assert mail.rcpt_tos == ["bob@example.com"]
    assert mail.mail_from == "tfkube@example.com"
    text = mail.content.decode()
    assert "Job fails (vision) failed" in text
    assert f"/jobs/{failed}" in text

    page.goto("/account")
    row = page.locator("table.notifications tr", has_text="webhook")
    assert "sent after 3 tries" in row.first.inner_text()
    shot(page, "81-notifications-sent")

    # Slack-compatible, for a job that succeeds (with its result in the text).
    prefs = world.bob.ok(world.bob.get("/api/v1/users/me/notifications"))
    prefs.pop("email_available")
    prefs.pop("secret_made")
    world.bob.ok(
        world.bob.http.put(
            "/api/v1/users/me/notifications", json={**prefs, "webhook_format": "slack"}
        )
    )
    before = len(got.requests)
    done = _submit(world.bob, "works", [])
    wait_job(world.bob, done, {"Succeeded"}, timeout=180)
    poll("the Slack message", lambda: len(got.requests) > before, 60)
    headers, body = got.requests[before]
    assert _verify(secret, headers, body)
    slack = json.loads(body)
    assert list(slack) == ["text"]
    assert slack["text"].startswith("Job works (vision) succeeded · test_accuracy 0.75")
    assert f"<{site.url}/jobs/{done}|open>" in slack["text"]

    # A job that stalls (no output for 2 s): told once, while it runs.
    before = len(got.requests)
    manifest = {
        "apiVersion": "tfkube.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": "hangs"},
        "spec": {
            "replicas": {"worker": {"replicas": 1, "args": ["--hang"]}},
            "code": {"source": "artifact:notify"},
            "runPolicy": {"stallSeconds": 2},
        },
    }
    hangs = str(
        world.bob.ok(world.bob.post("/api/v1/teams/vision/jobs", json={"manifest": manifest}), 201)[
            "id"
        ]
    )
    poll("the stall message", lambda: len(got.requests) > before, 90)
    assert "stalls" in json.loads(got.requests[before][1])["text"]
    world.bob.post(f"/api/v1/jobs/{hangs}/stop")
    wait_job(world.bob, hangs, {"Failed"}, timeout=60)
    stopped = [
        n
        for n in world.bob.ok(world.bob.get("/api/v1/users/me/notifications/sent"))
        if n["job_id"] == hangs
    ]
    # Told of the stall by webhook and e-mail; a job someone stopped is no failure to tell.
    assert sorted((n["event"], n["channel"]) for n in stopped) == [
        ("stalled", "email"),
        ("stalled", "webhook"),
    ]
    # carol chose nothing and owns none of these jobs: nothing is hers.
    assert world.carol.ok(world.carol.get("/api/v1/users/me/notifications/sent")) == []
    context.close()
