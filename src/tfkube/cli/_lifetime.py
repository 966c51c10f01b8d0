"""What SIGINT (Ctrl-C), SIGTERM and SIGHUP (a closed terminal) do to what a command
started: one rule per kind of command (the README's table).

- A foreground command owns what it starts (`tfkube run` its job, `tfkube serve --engine
  local` its model server): any of the three stops all of it, then the command exits
  128+N (130, 143, 129). `tfkube run --detach` is how a job keeps running.
- The two services (`tfkube server`, `tfkube operator`) shut down cleanly on any of the
  three and exit 0. uvicorn and kopf do so on SIGINT and SIGTERM; a SIGHUP is passed on to
  them as SIGTERM.
- A signal ignored when the command started stays ignored: `nohup tfkube run job.yaml`
  keeps its job through a closed terminal, as nohup asks.

How: Python turns Ctrl-C into a KeyboardInterrupt raised wherever the main thread is, and
the code that must stop what it started catches exactly that (the local engine's submit
and stop hold all three signals where they must not be cut short: `interrupts_held`).
SIGTERM and SIGHUP raise the same exception (`Interrupted`, which knows its signal), so
each of those places does for them what it does for Ctrl-C.

SIGKILL cannot be caught: a foreground command's child is started with Linux's
parent-death signal (`ends_with_this_process`), so a `kill -9` of the command still ends
what it started.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Callable, Iterator
from types import FrameType

import typer

from tfkube.contract import signal_exit_code
from tfkube.engines.local import interrupts_held

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

Handler = Callable[[int, FrameType | None], object]


class Interrupted(KeyboardInterrupt):
    """A stop signal, raised like Ctrl-C's KeyboardInterrupt."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


PR_SET_PDEATHSIG = 1


def ends_with_this_process(signum: int = signal.SIGTERM) -> Callable[[], None]:
    """A `preexec_fn` for a child this command owns: the kernel sends it `signum` when this
    process dies, even by SIGKILL; a child whose parent died before it was armed exits at
    once. Call it on the thread that starts the child (the signal follows that thread)."""
    parent = os.getpid()
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before the fork

    def arm() -> None:
        if prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0 or os.getppid() != parent:
            os._exit(1)

    return arm


def exit_code(interrupt: KeyboardInterrupt) -> int:
    """128+N for the signal N that interrupted the command (a plain KeyboardInterrupt is
    Ctrl-C's: 130)."""
    return signal_exit_code(getattr(interrupt, "signum", signal.SIGINT))


def describe(interrupt: KeyboardInterrupt) -> str:
    """`interrupted` (Ctrl-C), `interrupted by SIGTERM`, `interrupted by SIGHUP`."""
    signum = getattr(interrupt, "signum", signal.SIGINT)
    return (
        "interrupted"
        if signum == signal.SIGINT
        else f"interrupted by {signal.Signals(signum).name}"
    )


def _install(handlers: dict[int, Handler]) -> dict[int, object]:
    """Set each handler unless its signal is ignored; -> the handlers replaced."""
    previous: dict[int, object] = {}
    for signum, handler in handlers.items():
        current = signal.getsignal(signum)
        if current is None or current == signal.SIG_IGN:
            continue  # ignored (nohup, a background job without job control): stays so
        previous[signum] = signal.signal(signum, handler)
    return previous


def _restore(previous: dict[int, object]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)  # type: ignore[arg-type]


def _leave_terminal(fds: list[int]) -> None:
    """The terminal hung up: writing to it now fails (EIO) and nobody reads it. Point the
    command's output there at /dev/null, so that no failed write cuts the stop short."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in fds:
            os.dup2(devnull, fd)
    finally:
        os.close(devnull)


@contextlib.contextmanager
def foreground() -> Iterator[None]:
    """For a command that owns what it starts: in the block, SIGINT, SIGTERM and SIGHUP
    each raise `Interrupted`; the command stops what it started (`stop_then_exit`)."""
    terminal = [fd for fd in (1, 2) if os.isatty(fd)]

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            _leave_terminal(terminal)
        raise Interrupted(signum)

    previous = _install(dict.fromkeys(STOP_SIGNALS, on_signal))
    try:
        yield
    finally:
        _restore(previous)


def stop_then_exit(
    interrupt: KeyboardInterrupt, stop: Callable[[KeyboardInterrupt], None]
) -> typer.Exit:
    """After a stop signal: `stop(interrupt)` to its end (the signals are held meanwhile,
    so a second Ctrl-C cannot cut it short), then the exit for the first signal, 128+N."""
    with contextlib.suppress(KeyboardInterrupt), interrupts_held():
        stop(interrupt)  # a second signal is delivered after it, and suppressed
    return typer.Exit(exit_code(interrupt))


def run_service(serve: Callable[[], object]) -> None:
    """Run a service in the foreground until SIGINT, SIGTERM or SIGHUP; return once it has
    shut down cleanly (the command then exits 0).

    `serve` shuts down cleanly on SIGINT and SIGTERM by itself (uvicorn, kopf). A SIGHUP
    is passed on to it as SIGTERM. Outside its own handlers (while it starts, or when it
    raises the signal again after shutting down, as uvicorn does) SIGTERM raises
    `Interrupted` like Ctrl-C, and either ends the service here."""

    def terminate(signum: int, _frame: FrameType | None) -> None:
        raise Interrupted(signum)

    def hang_up(_signum: int, _frame: FrameType | None) -> None:
        signal.raise_signal(signal.SIGTERM)

    previous = _install({signal.SIGTERM: terminate, signal.SIGHUP: hang_up})
    try:
        serve()
    except KeyboardInterrupt:
        pass  # stopped by a signal: it has shut down, or had not started anything yet
    finally:
        _restore(previous)
