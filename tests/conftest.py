"""Shared fixtures: an isolated TFKUBE_HOME per test, and a check that nothing a test's
jobs started is still running when the test ends."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

pytest_plugins = ["session_signals", "cluster.fixtures", "s3store", "hdfsstore"]
"""The test control plane's fixtures (tests/cluster/fixtures.py), for every test that asks:
one control plane and one real node per session, whichever folder the test is in; and the
S3 store (tests/s3store.py: SeaweedFS, started once per session by the first test that
asks for `s3_store`); first, what the session does with signals (tests/session_signals.py)."""

TAG = "TFK_TEST_TAG"
"""Every process a test starts inherits this variable (engines pass the environment on)."""


def tagged_processes(tag: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            if proc.environ().get(TAG) == tag and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def still_running(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those of `procs` that still run (psutil tells a recycled PID apart by its start
    time; a zombie runs no more)."""
    running = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                running.append(proc)
        except psutil.NoSuchProcess:
            continue
    return running


def port_open(port: int) -> bool:
    """Whether something listens on 127.0.0.1:`port`."""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def leftovers(tfkube_home: Path) -> Callable[[], list[psutil.Process]]:
    """The processes the current test's jobs started that still run."""
    tag = os.environ[TAG]
    return lambda: tagged_processes(tag)


@pytest.fixture
def tfkube_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh TFKUBE_HOME; fails the test if any process it started outlives it."""
    home = tmp_path / "tfkube-home"
    tag = uuid.uuid4().hex
    monkeypatch.setenv("TFKUBE_HOME", str(home))
    monkeypatch.setenv(TAG, tag)
    yield home
    deadline = time.monotonic() + 5
    left = tagged_processes(tag)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = tagged_processes(tag)
    described = []
    for proc in left:  # clean up for the next test, then fail this one
        try:
            described.append((proc.pid, proc.cmdline()))
            proc.kill()
        except psutil.Error:
            continue
    assert not described, f"processes left behind: {described}"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No socket left open when the session ends (every fixture is finalised by now): an
    unclosed client would only print a ResourceWarning after pytest exits, which warnings
    as errors cannot catch. Lists each one and fails the session."""
    import gc
    import socket
    import sys

    gc.collect()
    leaked = []
    for obj in gc.get_objects():
        try:
            if isinstance(obj, socket.socket) and obj.fileno() != -1:
                leaked.append(repr(obj))
        except ReferenceError:
            continue
    if leaked:
        print("\nsockets left open at the end of the session (close the clients):", file=sys.stderr)
        for text in leaked:
            print(f"  {text}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_SECONDS_BY_FILE: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Where the session's time goes: each test's setup, call and teardown, by file."""
    path = report.nodeid.split("::", 1)[0]
    _SECONDS_BY_FILE[path] = _SECONDS_BY_FILE.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _SECONDS_BY_FILE:
        return
    folders: dict[str, float] = {}
    for path, seconds in _SECONDS_BY_FILE.items():
        folder = path.rsplit("/", 1)[0]
        folders[folder] = folders.get(folder, 0.0) + seconds
    write = terminalreporter.write_line
    terminalreporter.write_sep("=", "time by folder and file (setup + call + teardown)")
    for folder, seconds in sorted(folders.items(), key=lambda kv: -kv[1]):
        write(f"{seconds:9.1f}s  {folder}/")
    for path, seconds in sorted(_SECONDS_BY_FILE.items(), key=lambda kv: -kv[1])[:25]:
        write(f"{seconds:9.1f}s  {path}")
