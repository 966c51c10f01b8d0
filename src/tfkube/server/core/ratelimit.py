"""Sign-in throttling that an outsider cannot turn against a user (NIST SP 800-63B
§5.2.2: limit failed attempts on an account without letting an attacker deny the real
user). Kept in memory; the clock is a parameter, so every rule is tested without waiting.

Three counts of failed sign-ins, each in a sliding window:

- per (name, address): 5 a minute. The guesser at one address waits; the same user at
  another address does not.
- per address: 30 a minute, whatever the names (one address spraying many names).
- per name, from addresses it never signed in from: 100 an hour (guessing spread over
  many addresses). Past that, such addresses wait; an address the user signed in from
  in the last 30 days (remembered per name, in this server process) still may try.

An address is an IPv4 address, or an IPv6 /64 (one host usually holds a whole /64, so
its addresses count as one). Who the address is behind a proxy is decided before
(`core/forwarded.py`).
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

MAX_FAILURES = 5
WINDOW_SECONDS = 60.0
MAX_KEYS = 100_000
"""Memory bound: past this many remembered keys the oldest are forgotten."""

PAIR_FAILURES = 5
"""Failed sign-ins per (name, address) per `PAIR_WINDOW`."""
PAIR_WINDOW = 60.0
ADDRESS_FAILURES = 30
"""Failed sign-ins per address (all names) per `ADDRESS_WINDOW`."""
ADDRESS_WINDOW = 60.0
NAME_FAILURES = 100
"""Failed sign-ins per name from unknown addresses per `NAME_WINDOW` (NIST: at most 100
consecutive failures on one account)."""
NAME_WINDOW = 3600.0
KNOWN_FOR = 30 * 86400.0
"""How long an address a user signed in from stays theirs."""
KNOWN_PER_NAME = 20
"""Addresses remembered per name (the most recent)."""


class LoginLimiter:
    """At most `max_failures` failures per key within a sliding `window`."""

    def __init__(
        self,
        max_failures: int = MAX_FAILURES,
        window: float = WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_failures = max_failures
        self.window = window
        self.clock = clock
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, key: str, now: float) -> deque[float]:
        times = self._failures.get(key, deque())
        while times and times[0] <= now - self.window:
            times.popleft()
        return times

    def retry_after(self, *keys: str) -> float | None:
        """Seconds until any of `keys` may try again, or None when all may try now."""
        now = self.clock()
        waits = []
        with self._lock:
            for key in keys:
                times = self._recent(key, now)
                if len(times) >= self.max_failures:
                    waits.append(times[-self.max_failures] + self.window - now)
        return max(waits) if waits else None

    def failed(self, *keys: str) -> None:
        now = self.clock()
        with self._lock:
            for key in keys:
                times = self._recent(key, now)
                times.append(now)
                self._failures[key] = times
            while len(self._failures) > MAX_KEYS:
                self._failures.pop(next(iter(self._failures)))

    def succeeded(self, key: str) -> None:
        with self._lock:
            self._failures.pop(key, None)


def address_key(address: str) -> str:
    """The unit an address counts as: itself (IPv4, or anything unparsable), its /64
    (IPv6; an IPv4-mapped IPv6 address is its IPv4 address)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network(f"{ip}/64", strict=False))
    return str(ip)


@dataclass(frozen=True)
class Verdict:
    wait: float | None
    """Seconds before this (name, address) may try again; None: it may try now."""
    reason: str = ""
    """Which count holds it back (for the log; the answer does not say)."""


class LoginGuard:
    """The three counts above and the addresses each name signed in from."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.pairs = LoginLimiter(PAIR_FAILURES, PAIR_WINDOW, clock)
        self.addresses = LoginLimiter(ADDRESS_FAILURES, ADDRESS_WINDOW, clock)
        self.names = LoginLimiter(NAME_FAILURES, NAME_WINDOW, clock)
        self._known: OrderedDict[str, OrderedDict[str, float]] = OrderedDict()
        self._lock = threading.Lock()

    def _is_known(self, name: str, address: str, now: float) -> bool:
        with self._lock:
            addresses = self._known.get(name)
            seen = addresses.get(address) if addresses is not None else None
        return seen is not None and now - seen < KNOWN_FOR

    def check(self, name: str, address: str) -> Verdict:
        """Whether `name` may try to sign in from `address` now."""
        where = address_key(address)
        waits = []
        if (wait := self.pairs.retry_after(f"{name}\n{where}")) is not None:
            waits.append((wait, "name and address"))
        if (wait := self.addresses.retry_after(where)) is not None:
            waits.append((wait, "address"))
        if (
            not self._is_known(name, where, self.clock())
            and (wait := self.names.retry_after(name)) is not None
        ):
            waits.append((wait, "name, from unknown addresses"))
        if not waits:
            return Verdict(None)
        wait, reason = max(waits)
        return Verdict(wait, reason)

    def failed(self, name: str, address: str) -> None:
        where = address_key(address)
        self.pairs.failed(f"{name}\n{where}")
        self.addresses.failed(where)
        if not self._is_known(name, where, self.clock()):
            self.names.failed(name)

    def succeeded(self, name: str, address: str) -> None:
        """The pair's failures are forgotten and the address becomes the user's."""
        where = address_key(address)
        self.pairs.succeeded(f"{name}\n{where}")
        with self._lock:
            seen = self._known.pop(name, None) or OrderedDict()
            seen.pop(where, None)
            seen[where] = self.clock()
            while len(seen) > KNOWN_PER_NAME:
                seen.popitem(last=False)
            self._known[name] = seen
            while len(self._known) > MAX_KEYS:
                self._known.popitem(last=False)
