"""A throwaway S3-compatible store for the tests and benchmarks: SeaweedFS's `weed server
-s3` (built by build.sh beside this file into ~/.cache/tfkube), every port a free loopback
one, its data in a temp dir, one admin credential from the environment, stopped by PID.
Standard library only; import it by path (tests/_s3.py does).

    store = start_seaweed()        # raises S3Unavailable with the reason
    store.endpoint                 # http://127.0.0.1:<port>
    store.access_key, store.secret_key
    store.stop()

Nothing leaves the machine: every server binds 127.0.0.1 and SeaweedFS's anonymous usage
report (`-master.telemetry`, on by default) is off.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

BUILD = Path(__file__).resolve().parent / "build.sh"
START_TIMEOUT = 90.0
STOP_GRACE = 3.0
START_ATTEMPTS = 3


class S3Unavailable(RuntimeError):
    pass


class PortTaken(S3Unavailable):
    """weed could not bind a port chosen for it: another process took it meanwhile."""


def _free_ports(n: int) -> list[int]:
    """n distinct free loopback ports (held open together so none repeats)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def weed_binary(build: bool = True) -> Path:
    """The built `weed`: built first when `build` and it is missing or stale; else
    S3Unavailable when it is."""
    argv = ["bash", str(BUILD)] if build else ["bash", str(BUILD), "--check"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        what = "failed" if build else "says SeaweedFS is missing or out of date (make s3-bins)"
        raise S3Unavailable(f"{BUILD} {what}: {done.stderr[-2000:]}")
    path = subprocess.run(
        ["bash", str(BUILD), "--print-bin"], capture_output=True, text=True, check=False
    ).stdout.strip()
    if not path or not Path(path).is_file():
        raise S3Unavailable(f"SeaweedFS is not built; run `make s3-bins` ({BUILD})")
    return Path(path)


@dataclass
class Seaweed:
    binary: Path
    workdir: Path
    s3_port: int
    access_key: str = field(default_factory=lambda: "tfkube-" + secrets.token_hex(4))
    secret_key: str = field(default_factory=lambda: secrets.token_hex(16))
    process: subprocess.Popen[bytes] | None = None
    grpc_sockets: list[Path] = field(default_factory=list)
    """The unix sockets weed makes beside its gRPC ports, at a fixed place in /tmp: removed
    after it stops (a killed weed leaves them)."""

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    @property
    def log(self) -> Path:
        return self.workdir / "weed.log"

    def start(self) -> None:
        """Start weed on free ports, again on new ones (up to START_ATTEMPTS times) when a
        port was taken between choosing it and weed binding it: the ports are free when
        chosen, not reserved (a CI run failed so: `bind: address already in use`)."""
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self._start_once()
                return
            except PortTaken:
                if attempt == START_ATTEMPTS:
                    raise
                self.s3_port = _free_ports(1)[0]

    def _start_once(self) -> None:
        ports = [p for p in _free_ports(8) if p != self.s3_port][:7]
        master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3_grpc = ports
        self.grpc_sockets = [
            Path(f"/tmp/seaweedfs-{kind}-grpc-{port}.sock")
            for kind, port in (
                ("master", master_grpc),
                ("volume", volume_grpc),
                ("filer", filer_grpc),
            )
        ]
        data = self.workdir / "data"
        shutil.rmtree(data, ignore_errors=True)  # a failed attempt's, if any
        data.mkdir(parents=True)
        for sock in ("filer.sock", "s3.sock"):
            (self.workdir / sock).unlink(missing_ok=True)
        argv = [
            str(self.binary),
            "server",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={data}",
            "-master.telemetry=false",
            f"-master.port={master}",
            f"-master.port.grpc={master_grpc}",
            # Every bucket is a collection of its own, which grows 7 volumes at its first
            # write: room for many buckets (a test makes its own), small sparse files.
            "-master.volumeSizeLimitMB=64",
            "-volume.max=400",
            f"-volume.port={volume}",
            f"-volume.port.grpc={volume_grpc}",
            f"-filer.port={filer}",
            f"-filer.port.grpc={filer_grpc}",
            f"-filer.localSocket={self.workdir / 'filer.sock'}",
            "-s3",
            f"-s3.port={self.s3_port}",
            f"-s3.port.grpc={s3_grpc}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.localSocket={self.workdir / 's3.sock'}",
        ]
        # The S3 gateway makes these an admin identity (its documented quick set-up).
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.workdir),
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
        }
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                argv,
                cwd=self.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                said = self.log.read_text()
                self._clean_up_sockets()
                problem = PortTaken if "address already in use" in said else S3Unavailable
                raise problem(f"weed exited with {self.process.returncode}: {said[-2000:]}")
            if self._answers():
                return
            time.sleep(0.3)
        self.stop()
        raise S3Unavailable(f"weed's S3 gateway did not answer in {START_TIMEOUT:.0f}s")

    def _answers(self) -> bool:
        """Whether the S3 gateway answers HTTP (an anonymous request: any status will do)."""
        try:
            with urllib.request.urlopen(self.endpoint + "/", timeout=2):
                return True
        except urllib.error.HTTPError:
            return True
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        """SIGTERM the server's session (by its PID, which leads it), SIGKILL after
        STOP_GRACE (its orderly shutdown takes some 25 s, flushing what a throwaway store
        does not keep); then its folder and sockets are removed."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self._clean_up_sockets()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _clean_up_sockets(self) -> None:
        for sock in self.grpc_sockets:
            sock.unlink(missing_ok=True)


def start_seaweed(build: bool = True) -> Seaweed:
    """Build (once; a no-op later) and start a throwaway store."""
    binary = weed_binary(build)
    store = Seaweed(
        binary=binary,
        workdir=Path(tempfile.mkdtemp(prefix="tfkube-s3-")),
        s3_port=_free_ports(1)[0],
    )
    store.start()
    return store
