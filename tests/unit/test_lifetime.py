"""The lifetime rule's mechanics, in this process: 128+N, each stop signal as an interrupt
that knows its signal, a held signal delivered after the section to the handler it had,
a second signal during a stop, and a service's SIGHUP passed on as SIGTERM. The real
commands under real signals: tests/local/test_interrupts.py, test_lifetimes.py,
tests/server/test_shutdown.py, tests/cluster/test_operator.py."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from types import FrameType

import pytest

from tfkube.cli._lifetime import (
    STOP_SIGNALS,
    Interrupted,
    exit_code,
    foreground,
    run_service,
    stop_then_exit,
)
from tfkube.contract import exit_status, signal_exit_code
from tfkube.engines.local import interrupts_held


@pytest.mark.parametrize(
    ("returncode", "status"), [(0, 0), (1, 1), (75, 75), (-2, 130), (-9, 137), (-15, 143)]
)
def test_exit_status_is_the_shells(returncode: int, status: int) -> None:
    assert exit_status(returncode) == status


def test_a_signal_exits_128_plus_n() -> None:
    assert [signal_exit_code(s) for s in STOP_SIGNALS] == [130, 143, 129]
    assert exit_code(KeyboardInterrupt()) == 130  # Python's own Ctrl-C


@pytest.fixture
def recorded() -> Iterator[list[int]]:
    """Recording handlers for the three signals (so that none of them ends pytest); the
    previous ones come back after the test."""
    got: list[int] = []

    def record(signum: int, _frame: FrameType | None) -> None:
        got.append(signum)

    previous = {s: signal.signal(s, record) for s in STOP_SIGNALS}
    yield got
    for s, handler in previous.items():
        signal.signal(s, handler)


@pytest.mark.parametrize("signum", STOP_SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_in_the_foreground_each_stop_signal_interrupts_with_its_exit_code(
    recorded: list[int], monkeypatch: pytest.MonkeyPatch, signum: int
) -> None:
    monkeypatch.setattr("os.isatty", lambda _fd: False)  # pytest's own terminal stays
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    with pytest.raises(Interrupted) as caught, foreground():
        signal.raise_signal(signum)
    assert caught.value.signum == signum
    assert exit_code(caught.value) == 128 + signum
    assert {s: signal.getsignal(s) for s in STOP_SIGNALS} == before
    assert recorded == []


def test_an_ignored_signal_stays_ignored_in_the_foreground(recorded: list[int]) -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # nohup
    with foreground():
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        signal.raise_signal(signal.SIGHUP)  # nothing happens


def test_a_held_signal_is_delivered_after_the_section_once(recorded: list[int]) -> None:
    with interrupts_held():
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGINT)
        with interrupts_held():  # nested: the outer hold keeps them
            signal.raise_signal(signal.SIGHUP)
        assert recorded == []
    assert recorded == [signal.SIGTERM]  # the first, to the handler it had


def test_a_second_signal_during_the_stop_waits_for_it(
    recorded: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.isatty", lambda _fd: False)
    stopped: list[str] = []

    def stop(_interrupt: KeyboardInterrupt) -> None:
        signal.raise_signal(signal.SIGINT)  # Ctrl-C while stopping
        stopped.append("done")

    with foreground():
        try:
            signal.raise_signal(signal.SIGTERM)
        except KeyboardInterrupt as interrupt:
            exit = stop_then_exit(interrupt, stop)
    assert stopped == ["done"]
    assert exit.exit_code == 143  # the first signal's


def test_a_service_gets_a_hang_up_as_sigterm_and_returns(recorded: list[int]) -> None:
    """As uvicorn: its own SIGTERM handler while it serves (a clean shutdown), then the
    signal raised again once it is down; `run_service` returns (exit 0)."""
    shut_down: list[int] = []

    def serve() -> None:
        outer = signal.signal(signal.SIGTERM, lambda s, _f: shut_down.append(s))
        try:
            signal.raise_signal(signal.SIGHUP)  # the terminal closes
        finally:
            signal.signal(signal.SIGTERM, outer)
        signal.raise_signal(signal.SIGTERM)

    run_service(serve)
    assert shut_down == [signal.SIGTERM]
    assert recorded == []
