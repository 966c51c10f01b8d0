"""Accounts as NIST SP 800-63B asks, against real `tfkube server` processes on loopback
(issue 17, item 8): weak passwords refused, a lock-out that an outsider cannot turn
against a user, sessions and tokens that end with the password, `Secure` cookies behind
https, forwarding headers believed only from a configured proxy, ids nobody can walk.

Other client addresses are real: the loopback network is 127.0.0.0/8, so a client bound
to 127.0.0.2 reaches the server on 127.0.0.1 from another address.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import httpx
import pytest

from conftest import TAG  # tests/conftest.py
from server._server import (
    PASSWORD,
    Api,
    ServerProc,
    api_for,
    env_with,
    free_port,
    login,
    token_for,
)
from server.conftest import start_server, stop_server, targz, upload

OTHER_PASSWORD = "purple walrus tangerine"
SESSION_COOKIE = "tfkube_session"


def client_from(url: str, address: str) -> httpx.Client:
    """A client whose connections come from `address` (in 127.0.0.0/8)."""
    return httpx.Client(
        base_url=url, timeout=60, transport=httpx.HTTPTransport(local_address=address)
    )


def sign_in(client: httpx.Client, name: str, password: str, **headers: str) -> int:
    r = client.post(
        "/api/v1/auth/login", json={"name": name, "password": password}, headers=headers
    )
    return r.status_code


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProc, Api]]:
    """A server as it starts by default: no proxy trusted, served over http."""
    server, admin, tag = start_server(tmp_path_factory.mktemp("accounts"), "sqlite", None)
    try:
        yield server, admin
    finally:
        stop_server(server, admin, tag)


@pytest.fixture(scope="module")
def behind_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProc, Api]]:
    """A server behind an https proxy at 127.0.0.2 (`--public-url https://...
    --trusted-proxy 127.0.0.2/32`). Its cookies are Secure, so a client speaking plain
    http to it does not send them back: the admin's token is made with the cookie
    passed by hand."""
    tmp = tmp_path_factory.mktemp("proxied")
    tag = uuid.uuid4().hex
    extra = ["--public-url", "https://tfkube.test", "--trusted-proxy", "127.0.0.2/32"]
    server = ServerProc(tmp / "data", free_port(), None, env_with(TAG, tag, tmp / "home"), extra)
    server.start()
    try:
        r = httpx.post(
            f"{server.url}/api/v1/setup",
            json={"token": server.setup_token, "name": "admin", "password": PASSWORD},
        )
        assert r.status_code == 201, r.text
        made = httpx.post(
            f"{server.url}/api/v1/tokens",
            json={"name": "tests"},
            headers={
                "Cookie": f"{SESSION_COOKIE}={r.cookies[SESSION_COOKIE]}",
                "X-CSRF-Token": r.json()["csrf_token"],
                "Origin": server.url,
            },
        )
        assert made.status_code == 201, made.text
        admin = Api(server.url, made.json()["token"], "admin")
    except BaseException:
        server.stop()
        raise
    try:
        yield server, admin
    finally:
        stop_server(server, admin, tag)


# -- passwords -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "password",
    ["aaaaaaaaaa", "aaaaaaaaaaaa", "password1234", "1qaz2wsx3edc", "123456789012", "qwertyuiopas"],
)
def test_weak_passwords_are_refused(plain: tuple[ServerProc, Api], password: str) -> None:
    _, admin = plain
    r = admin.post(
        "/api/v1/users", json={"name": f"weak-{uuid.uuid4().hex[:6]}", "password": password}
    )
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == "password"


def test_a_password_made_of_the_users_name_is_refused(plain: tuple[ServerProc, Api]) -> None:
    _, admin = plain
    name = f"margaret-{uuid.uuid4().hex[:4]}"
    r = admin.post("/api/v1/users", json={"name": name, "password": name + name})
    assert r.status_code == 422, r.text


def test_ones_own_new_password_follows_the_rules_too(plain: tuple[ServerProc, Api]) -> None:
    server, admin = plain
    name = admin.new_user()
    api = api_for(server.url, name)
    try:
        r = api.http.patch(
            f"/api/v1/users/{name}",
            json={"password": "aaaaaaaaaaaa", "current_password": PASSWORD},
        )
        assert r.status_code == 422, r.text
        assert r.json()["errors"][0]["field"] == "password"
    finally:
        api.close()


# -- lock-out ------------------------------------------------------------------------------


def test_an_outsider_cannot_lock_a_user_out(plain: tuple[ServerProc, Api]) -> None:
    """Six wrong passwords for the user from 127.0.0.2 stop 127.0.0.2; the user at
    127.0.0.1 still signs in, at once."""
    server, admin = plain
    name = admin.new_user()
    with client_from(server.url, "127.0.0.2") as attacker:
        codes = [sign_in(attacker, name, "not the password!") for _ in range(6)]
        assert codes == [401] * 5 + [429], codes
        assert sign_in(attacker, name, PASSWORD) == 429  # the guesser waits, even if right
    with client_from(server.url, "127.0.0.1") as user:
        assert sign_in(user, name, PASSWORD) == 200


# -- sessions and tokens end with the password -------------------------------------------


def test_a_password_change_ends_other_sessions_and_revokes_tokens(
    plain: tuple[ServerProc, Api],
) -> None:
    server, admin = plain
    name = admin.new_user()
    changer, csrf = login(server.url, name)
    other, _ = login(server.url, name)
    token = token_for(server.url, name)
    with_token = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"})
    try:
        assert other.get("/api/v1/users/me").status_code == 200
        assert with_token.get("/api/v1/users/me").status_code == 200
        r = changer.patch(
            f"/api/v1/users/{name}",
            json={"password": OTHER_PASSWORD, "current_password": PASSWORD},
            headers={"X-CSRF-Token": csrf, "Origin": server.url},
        )
        assert r.status_code == 200, r.text
        assert other.get("/api/v1/users/me").status_code == 401, "another session survived"
        assert with_token.get("/api/v1/users/me").status_code == 401, "a token survived"
        assert changer.get("/api/v1/users/me").status_code == 200, "the changer's session is kept"
        tokens = changer.get("/api/v1/tokens").json()
        assert all(t["revoked_at"] for t in tokens), tokens
        # An admin's reset ends every session of the user, the changer's too.
        admin.ok(admin.http.patch(f"/api/v1/users/{name}", json={"password": PASSWORD}))
        assert changer.get("/api/v1/users/me").status_code == 401
    finally:
        for client in (changer, other, with_token):
            client.close()


# -- cookies and proxies -------------------------------------------------------------------


def test_the_session_cookie_is_secure_behind_https(
    behind_proxy: tuple[ServerProc, Api],
) -> None:
    server, admin = behind_proxy
    name = admin.new_user()
    r = httpx.post(f"{server.url}/api/v1/auth/login", json={"name": name, "password": PASSWORD})
    assert r.status_code == 200, r.text
    cookie = r.headers["set-cookie"]
    attributes = {a.strip().split("=")[0].lower() for a in cookie.split(";")[1:]}
    assert {"secure", "httponly"} <= attributes, cookie
    assert re.search(r"samesite=lax", cookie, re.IGNORECASE), cookie


def test_forwarded_for_counts_from_the_trusted_proxy_only(
    behind_proxy: tuple[ServerProc, Api],
) -> None:
    server, admin = behind_proxy
    name = admin.new_user()
    with client_from(server.url, "127.0.0.2") as proxy:
        # Through the proxy: the client is the address the proxy appended.
        for _ in range(5):
            assert sign_in(proxy, name, "wrong!", **{"X-Forwarded-For": "198.51.100.7"}) == 401
        assert sign_in(proxy, name, PASSWORD, **{"X-Forwarded-For": "198.51.100.7"}) == 429
        # Another client behind the same proxy is not held back...
        assert sign_in(proxy, name, PASSWORD, **{"X-Forwarded-For": "198.51.100.8"}) == 200
        # ...and what a client wrote left of the proxy's entry is not believed.
        spoofed = {"X-Forwarded-For": "198.51.100.9, 198.51.100.7"}
        assert sign_in(proxy, name, PASSWORD, **spoofed) == 429
    with client_from(server.url, "127.0.0.4") as direct:
        # Not the proxy: its X-Forwarded-For is ignored, it is 127.0.0.4.
        for _ in range(5):
            assert sign_in(direct, name, "wrong!", **{"X-Forwarded-For": "198.51.100.8"}) == 401
    with client_from(server.url, "127.0.0.2") as proxy:
        assert sign_in(proxy, name, PASSWORD, **{"X-Forwarded-For": "198.51.100.8"}) == 200


# -- public ids ----------------------------------------------------------------------------


def test_artifact_and_token_ids_cannot_be_enumerated(plain: tuple[ServerProc, Api]) -> None:
    server, admin = plain
    team = admin.new_team()
    name = admin.new_user()
    admin.add_member(team, name, "member")
    api = api_for(server.url, name)
    try:
        ids = []
        for i in range(2):
            code = targz({"run.sh": f"#!/bin/sh\necho {i}\n"})
            ids.append(api.ok(upload(api, team, f"enum-{i}", code), 201)["id"])
        tokens = [t["id"] for t in api.ok(api.get("/api/v1/tokens"))]
        for public in [*ids, *tokens]:
            assert isinstance(public, str), public
            assert re.fullmatch(r"[0-9a-f]{16}", public), public
        assert api.ok(api.get(f"/api/v1/artifacts/{ids[0]}"))["name"] == "enum-0"
        for guess in ("1", "2", "3"):
            assert api.get(f"/api/v1/artifacts/{guess}").status_code == 404
            assert api.delete(f"/api/v1/tokens/{guess}").status_code == 404
    finally:
        api.close()


def test_a_spoofed_forwarded_for_does_not_escape_the_address_limit(
    plain: tuple[ServerProc, Api],
) -> None:
    """31 failed sign-ins for 31 names from 127.0.0.1, each claiming another address in
    X-Forwarded-For (uvicorn believed it from 127.0.0.1, so anyone on this host, a job
    included, could): the server trusts no proxy, so they are one address, held after 30.
    Last in the module: it holds 127.0.0.1 back from signing in for a minute."""
    server, _ = plain
    with client_from(server.url, "127.0.0.1") as spoofer:
        codes = [
            sign_in(
                spoofer, f"nobody-{i}", "not the password!", **{"X-Forwarded-For": f"203.0.113.{i}"}
            )
            for i in range(31)
        ]
    assert codes[:30] == [401] * 30, codes
    assert codes[30] == 429, codes
