"""What a test session does with signals (a plugin of tests/conftest.py).

- SIGTERM ends the session the way Ctrl-C does: its fixtures are torn down, so every
  service a session started (the control plane and its real nodes, SeaweedFS, MiniHDFS,
  PostgreSQL, Chromium) is stopped by its PID. Python's default for SIGTERM ends the
  interpreter at once, and a terminated suite (a CI time-out, `kill` of `make test`) left
  them all running. A second SIGTERM ends it at once.
- SIGINT and SIGHUP inherited ignored get back what they mean at a terminal (below)."""

from __future__ import annotations

import signal

import pytest


class Terminated(KeyboardInterrupt):
    """The session was sent SIGTERM (pytest stops as after Ctrl-C, tearing down)."""


def pytest_sessionstart(session: pytest.Session) -> None:
    """Ctrl-C means what it means at a terminal. A suite started in the background by a
    shell without job control (`make test &`, `nohup`, some CI runners) inherits SIGINT
    ignored, and so would every process the tests start: `tfkube run` would then rightly
    ignore the tests' Ctrl-C (and `os.kill(self, SIGINT)` would raise nothing), failing the
    interrupt tests for a reason no user at a terminal has. Python's own handler again; the
    processes the tests start get the default disposition.

    `nohup make test` ignores SIGHUP the same way, and the commands the tests hang up on
    would rightly keep ignoring it (tests/local/test_lifetimes.py). The suite itself keeps
    surviving a hang-up, as nohup asked, through a handler that does nothing: unlike an
    ignored signal, a handler does not survive `exec`, so the processes the tests start
    get the default disposition here too.

    SIGTERM, unless ignored, tears the session down (`_terminate`)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
        signal.signal(signal.SIGHUP, _survive_hangup)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate)


def _survive_hangup(signum: int, frame: object) -> None:
    """pytest's SIGHUP under `nohup` (pytest_sessionstart): nothing happens."""


def _terminate(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM: at once
    raise Terminated(f"{signal.Signals(signum).name}: the session is torn down")
