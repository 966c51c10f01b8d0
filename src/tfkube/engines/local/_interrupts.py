"""A stop signal at a moment when being interrupted would leave something half-done.

Python raises KeyboardInterrupt wherever the main thread happens to be, and the `tfkube`
command makes SIGTERM and SIGHUP do the same (`tfkube.cli`: a foreground command stops what
it started on any of the three). Between "the job's folder is in place" and "its supervisor
is registered", or half-way through stopping a job, that would leave processes nobody
tracks. Such sections run with SIGINT, SIGTERM and SIGHUP held: a signal is remembered and
delivered once the section is complete, so the caller sees the interrupt with the job in a
known state.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

Handler = Callable[[int, FrameType | None], object] | int | None


class _Hold:
    """A handler that only remembers the signals, in order (one for all three)."""

    def __init__(self) -> None:
        self.received: list[int] = []

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signum)


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Run the block with SIGINT, SIGTERM and SIGHUP held; then deliver the first one that
    came, as the handler it had before would have: a Python handler is called (Ctrl-C's
    raises KeyboardInterrupt), the default action is taken (SIGINT's: KeyboardInterrupt).
    A signal that is ignored stays ignored.

    Only the main thread receives Python's signal handlers, so elsewhere this does
    nothing (no KeyboardInterrupt can arrive there either). Nested blocks share the
    outermost hold."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if isinstance(signal.getsignal(signal.SIGINT), _Hold):
        yield
        return
    hold = _Hold()
    previous: dict[int, Handler] = {}
    for signum in HELD:
        current = signal.getsignal(signum)
        if current is None or current == signal.SIG_IGN:
            continue  # ignored (or set outside Python): left as it is
        previous[signum] = signal.signal(signum, hold)
    try:
        yield
    finally:
        for held, handler in previous.items():
            signal.signal(held, handler)
    if hold.received:
        _deliver(hold.received[0], previous[hold.received[0]])


def _deliver(signum: int, handler: Handler) -> None:
    if callable(handler):
        handler(signum, None)
    elif signum == signal.SIGINT:
        raise KeyboardInterrupt
    else:
        signal.raise_signal(signum)  # the default action, now that the section is done
