"""Ctrl-C at a moment when being interrupted would leave something half-done.

Python raises KeyboardInterrupt wherever the main thread happens to be. Between "the job's
folder is in place" and "its supervisor is registered", or half-way through stopping a
job, that would leave processes nobody tracks. Such sections run with SIGINT held: the
signal is remembered and KeyboardInterrupt is raised once the section is complete, so
the caller sees the interrupt with the job in a known state.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


class _Hold:
    """A SIGINT handler that only counts."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, _signum: int, _frame: FrameType | None) -> None:
        self.count += 1


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Run the block with SIGINT held; raise KeyboardInterrupt after it if one came.

    Only the main thread receives Python's signal handlers, so elsewhere this does
    nothing (no KeyboardInterrupt can arrive there either). Nested blocks share the
    outermost hold."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if isinstance(previous, _Hold):
        yield
        return
    hold = _Hold()
    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if hold.count:
        if callable(previous):
            previous(signal.SIGINT, None)
        elif previous == signal.SIG_DFL:
            raise KeyboardInterrupt
