"""Which addresses the server fetches a member's URL from, and when a fetch in progress
must stop (pure; no address here is ever dialled)."""

from __future__ import annotations

import pytest

from tfkube.netguard import refused
from tfkube.server.core.fetch import FetchPolicy, verdict
from tfkube.server.core.forwarded import parse_networks

REFUSED = [
    # IPv4
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback, top"),
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "this network"),
    ("10.0.0.1", "RFC 1918 10/8"),
    ("10.255.255.255", "RFC 1918 10/8, top"),
    ("172.16.0.1", "RFC 1918 172.16/12"),
    ("172.31.255.255", "RFC 1918 172.16/12, top"),
    ("192.168.1.1", "RFC 1918 192.168/16"),
    ("100.64.0.1", "CGNAT 100.64/10"),
    ("100.127.255.255", "CGNAT, top"),
    ("169.254.169.254", "link-local (cloud metadata)"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast (SSDP)"),
    ("255.255.255.255", "broadcast"),
    ("240.0.0.1", "reserved"),
    ("192.0.2.1", "documentation TEST-NET-1"),
    ("198.18.0.1", "benchmarking"),
    ("192.0.0.1", "IETF protocol assignments"),
    # IPv6
    ("::1", "loopback"),
    ("::", "unspecified"),
    ("fe80::1", "link-local"),
    ("fc00::1", "ULA fc00::/7"),
    ("fd12:3456::1", "ULA fd00::/8"),
    ("fec0::1", "site-local (deprecated)"),
    ("ff02::1", "multicast"),
    ("2001:db8::1", "documentation"),
    ("::ffff:127.0.0.1", "IPv4-mapped loopback"),
    ("::ffff:10.1.2.3", "IPv4-mapped private"),
    ("::ffff:169.254.169.254", "IPv4-mapped link-local"),
    ("::127.0.0.1", "IPv4-compatible (deprecated)"),
    ("64:ff9b::7f00:1", "NAT64 of 127.0.0.1"),
    ("64:ff9b::a00:1", "NAT64 of 10.0.0.1"),
    ("2002:7f00:1::1", "6to4 of 127.0.0.1"),
    ("2002:c0a8:101::1", "6to4 of 192.168.1.1"),
    ("2001::1", "Teredo"),
]

ALLOWED = [
    ("8.8.8.8", "public IPv4"),
    ("1.1.1.1", "public IPv4"),
    ("172.32.0.1", "just above 172.16/12"),
    ("100.128.0.1", "just above CGNAT"),
    ("11.0.0.1", "just above 10/8"),
    ("2001:4860:4860::8888", "public IPv6"),
    ("::ffff:8.8.8.8", "IPv4-mapped public"),
    ("64:ff9b::808:808", "NAT64 of a public address"),
]


@pytest.mark.parametrize(("address", "why"), REFUSED, ids=[a for a, _ in REFUSED])
def test_refused_by_default(address: str, why: str) -> None:
    assert refused(address), why


@pytest.mark.parametrize(("address", "why"), ALLOWED, ids=[a for a, _ in ALLOWED])
def test_public_addresses_are_fetched(address: str, why: str) -> None:
    assert not refused(address), why


@pytest.mark.parametrize(
    ("address", "ranges", "expected"),
    [
        ("127.0.0.1", ["127.0.0.0/8"], False),
        ("127.0.0.2", ["127.0.0.2/32"], False),
        ("127.0.0.1", ["127.0.0.2/32"], True),
        ("::ffff:127.0.0.1", ["127.0.0.0/8"], False),
        ("::ffff:127.0.0.1", ["::ffff:127.0.0.0/104"], False),
        ("10.1.2.3", ["10.1.0.0/16"], False),
        ("10.2.0.1", ["10.1.0.0/16"], True),
        ("192.168.1.1", ["10.0.0.0/8"], True),
        ("fd00::5", ["fd00::/64"], False),
        ("169.254.169.254", ["0.0.0.0/0"], False),  # the admin's choice, however wide
        ("::1", ["127.0.0.0/8"], True),  # ranges are per family
    ],
)
def test_an_admin_allows_ranges(address: str, ranges: list[str], expected: bool) -> None:
    assert refused(address, parse_networks(ranges)) is expected


POLICY = FetchPolicy(deadline=120, head_seconds=20, min_rate=1000, grace=5)


@pytest.mark.parametrize(
    ("now", "body_started", "received", "expected"),
    [
        pytest.param(10.0, None, 0, None, id="waiting-for-the-head"),
        pytest.param(21.0, None, 0, "did not answer within 20 s", id="head-too-late"),
        pytest.param(30.0, 25.0, 0, None, id="body-in-its-grace"),
        pytest.param(31.0, 25.0, 6000, None, id="body-fast-enough"),
        pytest.param(31.0, 25.0, 5999, "less than the 1000 bytes/s", id="body-too-slow"),
        pytest.param(40.0, 25.0, 3, "sent 0 bytes/s", id="a-byte-every-2-s"),
        pytest.param(121.0, 25.0, 10**9, "longer than 120 s", id="deadline"),
    ],
)
def test_verdict(now: float, body_started: float | None, received: int, expected: str) -> None:
    why = verdict(
        POLICY, now, deadline=120.0, started=0.0, body_started=body_started, received=received
    )
    if expected is None:
        assert why is None
    else:
        assert why is not None
        assert expected in why


def test_fetch_slots_per_team_and_in_all() -> None:
    from contextlib import ExitStack

    from tfkube.server.jobs.fetched import Slots

    slots = Slots(per_team=2, total=3)
    with ExitStack() as held:
        assert held.enter_context(slots.taken("a"))
        assert held.enter_context(slots.taken("a"))
        assert not held.enter_context(slots.taken("a"))  # the team's two are busy
        assert held.enter_context(slots.taken("b"))
        assert not held.enter_context(slots.taken("c"))  # three in all
    with slots.taken("a") as free:  # all given back, refused ones included
        assert free
