"""The pure rules behind accounts (issue 17, item 8): the password policy, the sign-in
lock-out, whom forwarding headers are believed from, when cookies are Secure, and the
migration that gives existing artifacts and tokens their random public ids."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from tfkube.server.api.routes.auth import secure_cookies
from tfkube.server.core.config import ServerSettings
from tfkube.server.core.db import make_engine, migrate
from tfkube.server.core.forwarded import parse_networks, resolve_client
from tfkube.server.core.ratelimit import (
    ADDRESS_FAILURES,
    KNOWN_FOR,
    NAME_FAILURES,
    NAME_WINDOW,
    PAIR_FAILURES,
    PAIR_WINDOW,
    LoginGuard,
    address_key,
)
from tfkube.server.core.security import password_problem


@pytest.mark.parametrize(
    ("password", "name", "refused"),
    [
        ("aaaaaaaaaa", "", "at least 12"),
        ("short", "", "at least 12"),
        ("aaaaaaaaaaaa", "", "too easy"),
        ("password1234", "", "most common"),
        ("1qaz2wsx3edc", "", "most common"),
        ("123456789012", "", "easy"),
        ("abcdefghijkl", "", "too easy"),
        ("qwertyuiopas", "", "easy"),
        ("margaretmargaret", "margaret", "too easy"),
        ("tfkube123456", "", "too easy"),
        (" padded password ", "", "spaces"),
        ("tab\tin the middle", "", "control"),
        ("x" * 257, "", "at most 256"),
        ("correct horse battery", "", None),
        ("long enough pass", "", None),
        ("purple walrus tangerine", "admin", None),
        ("Elephant-Canoe-42", "", None),
        ("ünïcödé pässwörd", "", None),
    ],
)
def test_password_policy(password: str, name: str, refused: str | None) -> None:
    problem = password_problem(password, name)
    if refused is None:
        assert problem is None
    else:
        assert problem is not None
        assert refused in problem


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _fail(guard: LoginGuard, name: str, address: str, times: int) -> None:
    for _ in range(times):
        assert guard.check(name, address).wait is None
        guard.failed(name, address)


def test_the_guesser_waits_and_the_user_elsewhere_does_not() -> None:
    clock = Clock()
    guard = LoginGuard(clock)
    _fail(guard, "ada", "203.0.113.9", PAIR_FAILURES)
    held = guard.check("ada", "203.0.113.9")
    assert held.wait == pytest.approx(PAIR_WINDOW)
    assert held.reason == "name and address"
    assert guard.check("ada", "198.51.100.1").wait is None  # the user, elsewhere
    assert guard.check("bob", "203.0.113.9").wait is None  # another name, same address
    clock.now += PAIR_WINDOW
    assert guard.check("ada", "203.0.113.9").wait is None


def test_one_address_spraying_names_waits() -> None:
    guard = LoginGuard(Clock())
    for i in range(ADDRESS_FAILURES):
        _fail(guard, f"user-{i}", "203.0.113.9", 1)
    assert guard.check("someone", "203.0.113.9").reason == "address"
    assert guard.check("someone", "203.0.113.10").wait is None


def test_guessing_spread_over_addresses_spares_the_users_own_addresses() -> None:
    clock = Clock()
    guard = LoginGuard(clock)
    guard.succeeded("ada", "198.51.100.1")  # where ada signs in
    for i in range(NAME_FAILURES):
        _fail(guard, "ada", f"10.0.{i // 200}.{i % 200}", 1)
    assert guard.check("ada", "203.0.113.77").reason == "name, from unknown addresses"
    assert guard.check("ada", "198.51.100.1").wait is None  # her own address still may
    guard.failed("ada", "198.51.100.1")  # her typo does not count against the name
    clock.now += NAME_WINDOW
    assert guard.check("ada", "203.0.113.77").wait is None


def test_a_remembered_address_is_forgotten_after_a_while() -> None:
    clock = Clock()
    guard = LoginGuard(clock)
    guard.succeeded("ada", "198.51.100.1")
    clock.now += KNOWN_FOR + 1
    for i in range(NAME_FAILURES):
        guard.failed("ada", f"10.1.{i // 200}.{i % 200}")
    assert guard.check("ada", "198.51.100.1").wait is not None


def test_success_forgets_the_pairs_failures() -> None:
    guard = LoginGuard(Clock())
    _fail(guard, "ada", "198.51.100.1", PAIR_FAILURES - 1)
    guard.succeeded("ada", "198.51.100.1")
    _fail(guard, "ada", "198.51.100.1", PAIR_FAILURES - 1)
    assert guard.check("ada", "198.51.100.1").wait is None


def test_an_ipv6_host_counts_as_its_64() -> None:
    guard = LoginGuard(Clock())
    for i in range(PAIR_FAILURES):
        guard.failed("ada", f"2001:db8:1:2::{i + 1:x}")
    assert guard.check("ada", "2001:db8:1:2:ffff::1").wait is not None
    assert guard.check("ada", "2001:db8:1:3::1").wait is None


@pytest.mark.parametrize(
    ("address", "key"),
    [
        ("203.0.113.9", "203.0.113.9"),
        ("::ffff:203.0.113.9", "203.0.113.9"),
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
        ("unknown", "unknown"),
    ],
)
def test_address_keys(address: str, key: str) -> None:
    assert address_key(address) == key


PROXY = parse_networks(["127.0.0.2/32", "10.0.0.0/8"])


@pytest.mark.parametrize(
    ("peer", "xff", "proto", "trusted", "address", "scheme"),
    [
        pytest.param(
            "203.0.113.9", ["1.2.3.4"], ["https"], PROXY, "203.0.113.9", "http", id="untrusted-peer"
        ),
        pytest.param(
            "127.0.0.1", ["1.2.3.4"], [], (), "127.0.0.1", "http", id="no-proxy-configured"
        ),
        pytest.param(
            "127.0.0.2", ["198.51.100.7"], ["https"], PROXY, "198.51.100.7", "https", id="proxy"
        ),
        pytest.param(
            "127.0.0.2",
            ["6.6.6.6, 198.51.100.7"],
            [],
            PROXY,
            "198.51.100.7",
            "http",
            id="spoofed-left",
        ),
        pytest.param(
            "127.0.0.2",
            ["6.6.6.6", "198.51.100.7"],
            [],
            PROXY,
            "198.51.100.7",
            "http",
            id="two-headers",
        ),
        pytest.param(
            "127.0.0.2",
            ["198.51.100.7, 10.1.2.3"],
            [],
            PROXY,
            "198.51.100.7",
            "http",
            id="proxy-chain",
        ),
        pytest.param(
            "127.0.0.2", ["10.9.9.9, 10.1.2.3"], [], PROXY, "10.9.9.9", "http", id="all-trusted"
        ),
        pytest.param("127.0.0.2", ["6.6.6.6, junk"], [], PROXY, "127.0.0.2", "http", id="junk"),
        pytest.param("127.0.0.2", [], ["https"], PROXY, "127.0.0.2", "https", id="proto-only"),
        pytest.param("127.0.0.2", [], ["javascript"], PROXY, "127.0.0.2", "http", id="bad-proto"),
        pytest.param(
            "127.0.0.2", [], ["https, http"], PROXY, "127.0.0.2", "http", id="rightmost-proto"
        ),
        pytest.param(
            "127.0.0.2", ["[2001:db8::5]:443"], [], PROXY, "2001:db8::5", "http", id="v6-port"
        ),
        pytest.param(
            "127.0.0.2", ["198.51.100.7:5000"], [], PROXY, "198.51.100.7", "http", id="v4-port"
        ),
        pytest.param(
            "::ffff:127.0.0.2",
            ["198.51.100.7"],
            [],
            PROXY,
            "198.51.100.7",
            "http",
            id="mapped-peer",
        ),
        pytest.param(None, ["1.2.3.4"], [], PROXY, "unknown", "http", id="no-peer"),
    ],
)
def test_forwarded_headers_count_only_from_trusted_proxies(
    peer: str | None,
    xff: list[str],
    proto: list[str],
    trusted: tuple[object, ...],
    address: str,
    scheme: str,
) -> None:
    client = resolve_client(peer, "http", xff, proto, trusted)  # type: ignore[arg-type]
    assert (client.address, client.scheme) == (address, scheme)


def test_trusted_proxy_values_are_checked() -> None:
    assert [str(n) for n in parse_networks(["10.0.0.5", "fd00::/8"])] == ["10.0.0.5/32", "fd00::/8"]
    with pytest.raises(ValueError, match="not an address or a network"):
        parse_networks(["10.0.0.0/33"])


@pytest.mark.parametrize(
    ("public_url", "flag", "secure"),
    [
        (None, False, False),
        ("http://tfkube.example", False, False),
        ("https://tfkube.example", False, True),
        ("HTTPS://tfkube.example/", False, True),
        (None, True, True),
    ],
)
def test_cookies_are_secure_behind_https(public_url: str | None, flag: bool, secure: bool) -> None:
    settings = ServerSettings(
        data_dir=Path("/nonexistent"), public_url=public_url, secure_cookies=flag
    )
    assert secure_cookies(settings) is secure


def test_existing_rows_get_random_public_ids(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
    config = Config()
    config.set_main_option("script_location", "tfkube.server:migrations")
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0003")
        connection.execute(
            sa.text(
                "INSERT INTO users (id, name, password_hash, site_admin, disabled, created_at) "
                "VALUES (1, 'ada', 'x', 0, 0, 0)"
            )
        )
        connection.execute(
            sa.text(
                "INSERT INTO teams (id, name, namespace, quota, created_at) "
                "VALUES (1, 't', 'n', '{}', 0)"
            )
        )
        connection.execute(
            sa.text("INSERT INTO blobs (sha256, size, created_at) VALUES ('s', 1, 0)")
        )
        for i in (1, 2, 3):
            connection.execute(
                sa.text(
                    "INSERT INTO artifacts (id, team_id, name, version, kind, sha256, size, files, "
                    f"created_at) VALUES ({i}, 1, 'a', {i}, 'code', 's', 1, 1, 0)"
                )
            )
            connection.execute(
                sa.text(
                    "INSERT INTO api_tokens (id, user_id, name, token_hash, prefix, created_at) "
                    f"VALUES ({i}, 1, 't', 'h{i}', 'p', 0)"
                )
            )
    migrate(engine)  # to the head
    with engine.connect() as connection:
        for table in ("artifacts", "api_tokens"):
            ids = connection.execute(sa.text(f"SELECT public_id FROM {table}")).scalars().all()
            assert len(set(ids)) == 3
            assert all(re.fullmatch(r"[0-9a-f]{16}", i) for i in ids), ids
            with pytest.raises(sa.exc.IntegrityError):
                connection.execute(sa.text(f"UPDATE {table} SET public_id = '{ids[0]}'"))
    engine.dispose()


def test_the_migrations_match_the_tables(tmp_path: Path) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from tfkube.server.core.tables import Base

    engine = make_engine(f"sqlite:///{tmp_path / 'head.db'}")
    migrate(engine)
    with engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
    engine.dispose()
