"""PostgreSQL's start-up script of `tfkube install --server --database postgres`
(`tfkube.render._postgres.START`), run here with Debian's PostgreSQL 15 as the unprivileged
`postgres` user, as its pod runs it (no cluster): the cluster made once on an empty folder,
the role `tfkube` and its database, `pg_hba.conf` as docs/security.md says, the role's
password (its SCRAM verifier checked) set from the file at every start, so a new one
rotates it; a password it cannot quote refused before anything runs. TCP stays off here
(`listen_addresses` empty): the socket only. The real pod: tests/cluster/test_real_node_postgres.py.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tfkube.render._postgres import START

from ._server import poll

REPO = Path(__file__).resolve().parents[2]
USER = "postgres"


@dataclass
class Pod:
    """The pod's file system, stood in for by folders of one temp dir."""

    root: Path
    bin_dir: Path
    port: int = 55000 + os.getpid() % 1000

    @property
    def pgdata(self) -> Path:
        return self.root / "data" / "pgdata"

    def script(self) -> str:
        return (
            START.replace("/etc/tfkube-postgres", str(self.root / "secret"))
            .replace("listen_addresses='*'", "listen_addresses=''")
            .replace("unix_socket_directories=/tmp", f"unix_socket_directories={self.root}")
            .replace("exec postgres -D", f"exec postgres -p {self.port} -D")
        )

    def env(self) -> dict[str, str]:
        return {"PATH": f"{self.bin_dir}:/usr/bin:/bin", "PGDATA": str(self.pgdata),
                "LANG": "C.UTF-8", "HOME": str(self.root)}  # fmt: skip

    def as_user(self, argv: list[str]) -> list[str]:
        return ["runuser", "-u", USER, "--", "env", "-i", *[f"{k}={v}" for k, v in
                self.env().items()], *argv]  # fmt: skip

    def set_password(self, password: str) -> None:
        path = self.root / "secret" / "password"
        path.write_text(password)
        shutil.chown(path, USER)
        path.chmod(0o440)

    def start(self) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            self.as_user(["sh", "-c", self.script()]),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        ready = ["pg_isready", "--quiet", f"--host={self.root}", f"--port={self.port}"]

        def up() -> bool:
            assert proc.poll() is None, proc.communicate()[0]
            return subprocess.run(self.as_user(ready), check=False).returncode == 0

        poll("PostgreSQL accepting connections on its socket", up, 60)
        return proc

    def stop(self, proc: subprocess.Popen[str]) -> str:
        """The pod's preStop hook, then the process's whole output."""
        stop = ["pg_ctl", "stop", "--mode=fast", "--wait", f"--pgdata={self.pgdata}"]
        subprocess.run(self.as_user(stop), check=True, capture_output=True)
        out, _ = proc.communicate(timeout=30)
        return out

    def sql(self, query: str) -> list[str]:
        psql = ["psql", "-h", str(self.root), "-p", str(self.port), "-U", "postgres",
                "-d", "tfkube", "-Atc", query]  # fmt: skip
        done = subprocess.run(self.as_user(psql), capture_output=True, text=True, check=True)
        return done.stdout.splitlines()


@pytest.fixture
def pod() -> Iterator[Pod]:
    if os.geteuid() != 0:
        pytest.skip("runs PostgreSQL as the `postgres` user (root needed to switch to it)")
    try:
        pwd.getpwnam(USER)
    except KeyError:
        pytest.skip("no `postgres` user (Debian's postgresql package makes it)")
    found = subprocess.run(["bash", str(REPO / "tools" / "postgres" / "ensure.sh")],
                           capture_output=True, text=True, check=False)  # fmt: skip
    if found.returncode != 0:
        pytest.skip(f"PostgreSQL is not installed: {found.stderr.strip()[-500:]}")
    # Not under pytest's temp dir: its parents are root's alone (0700).
    root = Path(tempfile.mkdtemp(prefix="tfkube-pgscript-"))
    try:
        (root / "secret").mkdir()
        (root / "data").mkdir()
        for path in (root, root / "secret", root / "data"):
            shutil.chown(path, USER)
        made = Pod(root, Path(found.stdout.strip().splitlines()[-1]))
        yield made
    finally:
        pidfile = root / "data" / "pgdata" / "postmaster.pid"
        if pidfile.exists():  # a failed test's server: stop it by its PID
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pidfile.read_text().split()[0]), signal.SIGINT)
            poll("the server stopped", lambda: not pidfile.exists(), 30)
        shutil.rmtree(root, ignore_errors=True)


def _scram_matches(verifier: str, password: str) -> bool:
    """PostgreSQL's `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` (RFC 5802,
    RFC 7677) against `password`."""
    method, rest = verifier.split("$", 1)
    assert method == "SCRAM-SHA-256", verifier
    head, keys = rest.split("$")
    iterations, salt = head.split(":")
    stored, server = (base64.b64decode(k) for k in keys.split(":"))
    salted = hashlib.pbkdf2_hmac(
        "sha256", password.encode(), base64.b64decode(salt), int(iterations)
    )
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    return hashlib.sha256(client_key).digest() == stored and server_key == server


def test_made_once_password_from_the_secret_rotated_at_restart(pod: Pod) -> None:
    pod.set_password("first_Password-1")
    proc = pod.start()
    try:
        roles = pod.sql(
            "select rolname, rolsuper, rolcreaterole, rolcreatedb from pg_roles "
            "where rolname = 'tfkube'"
        )
        assert roles == ["tfkube|f|f|f"]  # no superuser, no roles, no databases
        owner = pod.sql("select pg_get_userbyid(datdba) from pg_database where datname = 'tfkube'")
        assert owner == ["tfkube"]
        (verifier,) = pod.sql("select rolpassword from pg_authid where rolname = 'tfkube'")
        assert _scram_matches(verifier, "first_Password-1")
        assert not _scram_matches(verifier, "something else")
        hba = [
            line.split()
            for line in (pod.pgdata / "pg_hba.conf").read_text().splitlines()
            if line.strip() and not line.startswith("#")
        ]
        # The socket: peer only; TCP: every line rejects, but for tfkube's own database.
        assert {tuple(h) for h in hba if h[0] == "local"} == {
            ("local", "all", "all", "peer"),
            ("local", "replication", "all", "peer"),
        }
        tcp = [h for h in hba if h[0] == "host"]
        assert tcp[-1] == ["host", "tfkube", "tfkube", "all", "scram-sha-256"]
        assert all(h[-1] == "reject" for h in tcp[:-1])
    finally:
        first = pod.stop(proc)
    assert "a new database cluster" in first
    assert "first_Password-1" not in first

    pod.set_password("second_Password-2")  # the Secret changed, the pod restarted
    proc = pod.start()
    try:
        (verifier,) = pod.sql("select rolpassword from pg_authid where rolname = 'tfkube'")
        assert _scram_matches(verifier, "second_Password-2")
        assert pod.sql("select count(*) from pg_database where datname = 'tfkube'") == ["1"]
    finally:
        second = pod.stop(proc)
    assert "a new database cluster" not in second  # the claim's cluster, kept
    assert "not properly shut down" not in second  # the previous stop was clean
    assert "second_Password-2" not in second


@pytest.mark.parametrize("password", ["", "it's", "back\\slash"], ids=["empty", "quote", "bs"])
def test_a_password_it_cannot_quote_is_refused(pod: Pod, password: str) -> None:
    pod.set_password(password)
    proc = subprocess.run(pod.as_user(["sh", "-c", pod.script()]), capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 1
    assert "password is empty or has a quote or backslash" in proc.stderr
    assert not pod.pgdata.exists()  # nothing was made
