"""A throwaway PostgreSQL cluster for the tests and benchmarks: Debian's binaries
(installed by ensure.sh beside this file when missing), `initdb` into a temp dir, `pg_ctl`
on a free loopback port, run as an unprivileged user (root cannot run PostgreSQL), stopped
by PID. Standard library only; import it by path (tests/server/_postgres.py does).

    pg = start_postgres()          # raises PostgresUnavailable with the reason
    url = pg.create_database()     # postgresql://tfkube@127.0.0.1:<port>/<fresh db>
    pg.stop()
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ENSURE = Path(__file__).resolve().parent / "ensure.sh"


class PostgresUnavailable(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Postgres:
    bin_dir: Path
    workdir: Path
    port: int
    user: str
    pid: int | None = None

    def _run(self, argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self._as_user(argv),
            capture_output=True,
            text=True,
            check=False,
            **kw,  # type: ignore[call-overload]
        )

    def _as_user(self, argv: list[str]) -> list[str]:
        if os.geteuid() == 0:
            return ["runuser", "-u", self.user, "--", *argv]
        return argv

    def start(self) -> None:
        data = self.workdir / "data"
        init = self._run(
            [
                str(self.bin_dir / "initdb"),
                "-D",
                str(data),
                "-A",
                "trust",
                "-U",
                "tfkube",
                "--no-sync",
            ]
        )
        if init.returncode != 0:
            raise PostgresUnavailable(f"initdb failed: {init.stderr[-2000:]}")
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.workdir} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        started = self._run(
            [
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                options,
                "-l",
                str(self.workdir / "postgres.log"),
                "-w",
                "-t",
                "60",
                "start",
            ]
        )
        if started.returncode != 0:
            log = (
                (self.workdir / "postgres.log").read_text()
                if (self.workdir / "postgres.log").exists()
                else ""
            )
            raise PostgresUnavailable(
                f"pg_ctl start failed: {started.stderr[-2000:]} {log[-2000:]}"
            )
        self.pid = int((data / "postmaster.pid").read_text().splitlines()[0])

    def create_database(self) -> str:
        """A fresh database; -> its URL."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        made = self._run(
            [
                str(self.bin_dir / "createdb"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "tfkube",
                name,
            ]
        )
        if made.returncode != 0:
            raise PostgresUnavailable(f"createdb failed: {made.stderr}")
        return f"postgresql://tfkube@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        if self.pid is None:
            return
        try:
            os.kill(self.pid, signal.SIGINT)  # "fast" shutdown
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                os.kill(self.pid, 0)
                time.sleep(0.1)
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.pid = None
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_postgres() -> Postgres:
    found = subprocess.run(["bash", str(ENSURE)], capture_output=True, text=True, check=False)
    if found.returncode != 0:
        raise PostgresUnavailable(found.stderr.strip()[-2000:])
    bin_dir = Path(found.stdout.strip().splitlines()[-1])
    user = pwd.getpwuid(os.geteuid()).pw_name
    if os.geteuid() == 0:
        user = "postgres"
        try:
            pwd.getpwnam(user)
        except KeyError:
            raise PostgresUnavailable(
                "no unprivileged 'postgres' user to run the server as"
            ) from None
    workdir = Path(tempfile.mkdtemp(prefix="tfkube-pg-"))
    if os.geteuid() == 0:
        shutil.chown(workdir, user)
    pg = Postgres(bin_dir, workdir, _free_port(), user)
    try:
        pg.start()
    except BaseException:
        pg.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return pg
