"""Login rate limiting: a bounded number of failed attempts per key (the user name and
the client's address, each on its own) within a sliding window. The clock is a parameter,
so the rule is tested without waiting."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

MAX_FAILURES = 5
WINDOW_SECONDS = 60.0
MAX_KEYS = 100_000
"""Memory bound: past this many remembered keys the oldest are forgotten."""


class LoginLimiter:
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
                    waits.append(times[0] + self.window - now)
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
