"""A throwaway HDFS for the tests: Apache Hadoop's MiniDFSCluster (one NameNode, one
DataNode; built by build.sh beside this file into ~/.cache/tfkube), every address on
127.0.0.1, WebHDFS on, its data in a temp dir, stopped by PID. Standard library only;
import it by path (tests/hdfsstore.py does).

    hdfs = start_minihdfs()        # raises HdfsUnavailable with the reason
    hdfs.uri                       # hdfs://127.0.0.1:<rpc port>
    hdfs.webhdfs                   # http://127.0.0.1:<http port>/webhdfs/v1
    hdfs.put("/data/a.bin", b"...")  # through WebHDFS (CREATE, then the DataNode's PUT)
    hdfs.stop()
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BUILD = Path(__file__).resolve().parent / "build.sh"
START_TIMEOUT = 120.0
STOP_GRACE = 15.0
USER = "tfkube"
"""The user WebHDFS requests name (simple authentication: `user.name`)."""
_READY = re.compile(rb"tfkube-hdfs: ready rpc=(\d+) http=(\d+)")


class HdfsUnavailable(RuntimeError):
    pass


def _free_ports(n: int) -> list[int]:
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


def classpath(build: bool = True) -> str:
    """MiniHdfs's class path: built first when `build` (a no-op once done); else
    HdfsUnavailable when it is missing or stale."""
    argv = ["bash", str(BUILD)] if build else ["bash", str(BUILD), "--check"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        what = "failed" if build else "says MiniDFSCluster is missing or out of date"
        raise HdfsUnavailable(f"{BUILD} {what}: {done.stderr[-2000:]}")
    return subprocess.run(
        ["bash", str(BUILD), "--print-classpath"], capture_output=True, text=True, check=True
    ).stdout.strip()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@dataclass
class MiniHdfs:
    classpath: str
    workdir: Path
    rpc_port: int = 0
    http_port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"hdfs://127.0.0.1:{self.rpc_port}"

    @property
    def webhdfs(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/webhdfs/v1"

    @property
    def log(self) -> Path:
        return self.workdir / "minihdfs.log"

    def start(self) -> None:
        rpc, http = _free_ports(2)
        # Jetty (the NameNode's and DataNode's web servers) unpacks into java.io.tmpdir: in
        # the work folder, so `stop` removes it too (in /tmp, a jetty-* folder per start
        # was left behind).
        scratch = self.workdir / "tmp"
        scratch.mkdir(exist_ok=True)
        argv = ["java", "-Xmx512m", f"-Djava.io.tmpdir={scratch}", "-cp", self.classpath]
        argv += ["MiniHdfs", str(self.workdir / "dfs")]
        argv += [str(rpc), str(http)]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.workdir)}
        if "JAVA_HOME" in os.environ:
            env["JAVA_HOME"] = os.environ["JAVA_HOME"]
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
                raise HdfsUnavailable(
                    f"MiniHdfs exited with {self.process.returncode}: "
                    f"{self.log.read_text(errors='replace')[-2000:]}"
                )
            found = _READY.search(self.log.read_bytes())
            if found:
                self.rpc_port, self.http_port = int(found[1]), int(found[2])
                return
            time.sleep(0.3)
        self.stop()
        raise HdfsUnavailable(f"MiniDFSCluster was not ready in {START_TIMEOUT:.0f}s")

    # -- WebHDFS, for the tests to fill it ---------------------------------------------

    def _url(self, path: str, op: str, **params: str) -> str:
        query = urllib.parse.urlencode({"op": op, "user.name": USER, **params})
        return f"{self.webhdfs}{urllib.parse.quote(path)}?{query}"

    def put(self, path: str, data: bytes) -> None:
        """Create (or replace) a file: the NameNode answers with the DataNode to send it
        to (307), which takes the bytes."""
        opener = urllib.request.build_opener(_NoRedirect)
        ask = urllib.request.Request(
            self._url(path, "CREATE", overwrite="true"), method="PUT", data=b""
        )
        try:
            opener.open(ask, timeout=30)
            raise HdfsUnavailable("WebHDFS CREATE did not redirect to a DataNode")
        except urllib.error.HTTPError as exc:
            if exc.code != 307:
                raise
            target = exc.headers["Location"]
        send = urllib.request.Request(target, method="PUT", data=data)
        with urllib.request.urlopen(send, timeout=60) as answer:
            if answer.status != 201:
                raise HdfsUnavailable(f"WebHDFS CREATE answered {answer.status}")

    def read(self, path: str) -> bytes:
        with urllib.request.urlopen(self._url(path, "OPEN"), timeout=60) as answer:
            return bytes(answer.read())

    def list(self, path: str) -> list[dict[str, Any]]:
        with urllib.request.urlopen(self._url(path, "LISTSTATUS"), timeout=30) as answer:
            return list(json.load(answer)["FileStatuses"]["FileStatus"])

    def stop(self) -> None:
        """SIGTERM the JVM's session (its shutdown hook stops the cluster), SIGKILL after
        STOP_GRACE; then its folder is removed."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_minihdfs(build: bool = True) -> MiniHdfs:
    """Build (once; a no-op later) and start a throwaway HDFS."""
    hdfs = MiniHdfs(classpath(build), Path(tempfile.mkdtemp(prefix="tfkube-hdfs-")))
    hdfs.start()
    return hdfs
