"""A terminated test session stops what its fixtures started (tests/session_signals.py).

A pytest session that starts a session-scoped service (a stand-in for the control plane,
SeaweedFS, PostgreSQL: a `sleep` here) is sent SIGTERM while a test runs: the service's
process is gone when pytest has exited, and pytest says it was interrupted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil

TESTS = Path(__file__).resolve().parents[1]

SESSION = textwrap.dedent(
    """
    import os
    import subprocess
    import time
    from pathlib import Path

    import pytest

    HERE = Path(__file__).parent


    @pytest.fixture(scope="session")
    def service():
        proc = subprocess.Popen(["sleep", "600"])
        (HERE / "service.pid").write_text(str(proc.pid))
        yield
        proc.terminate()
        proc.wait()
        (HERE / "torn-down").write_text("yes")


    def test_runs_long(service):
        (HERE / "running").write_text("yes")
        time.sleep(600)
    """
)


def _wait_for(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)


def test_a_terminated_session_stops_the_services_its_fixtures_started(tmp_path: Path) -> None:
    (tmp_path / "test_session.py").write_text(SESSION)
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    pytest_proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "session_signals",
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_session.py"),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    service: psutil.Process | None = None
    try:
        _wait_for(tmp_path / "running")
        service = psutil.Process(int((tmp_path / "service.pid").read_text()))
        pytest_proc.send_signal(signal.SIGTERM)
        out, _ = pytest_proc.communicate(timeout=60)
        text = out.decode(errors="replace")
        assert (tmp_path / "torn-down").exists(), f"the session was not torn down:\n{text}"
        assert not service.is_running(), "the session's service outlived it"
        assert "SIGTERM" in text, text
        assert pytest_proc.returncode == 2, text  # pytest's "interrupted"
    finally:
        if pytest_proc.poll() is None:
            pytest_proc.kill()
            pytest_proc.wait()
        if service is not None and service.is_running():
            service.kill()
