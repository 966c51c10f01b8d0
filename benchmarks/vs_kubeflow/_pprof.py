"""`--profile DIR`, the control plane's side: Go CPU profiles of kube-scheduler and
kube-controller-manager over one runner's run (the test cluster's API server runs with
`--profiling=false`).

Each serves `/debug/pprof/profile` on its secure port (profiling is on by default; the
admin token authenticates, by the API server's TokenReview, and is allowed). A profile
covers one window of `WINDOW` seconds, so each component is sampled in back-to-back
windows from the runner's start to its end, one file per window:
`{namespace}-{component}-{n}.pb.gz`. pprof merges them when given together:

    go tool pprof -top -nodecount 40 DIR/tfkube-1000x10000-kube-scheduler-*.pb.gz

Why: at 11,000 replicas the scheduler spent 1.57x the floor's CPU on the same pods (run
Q3, docs/benchmarks.md); the profiles say where.
"""

from __future__ import annotations

import contextlib
import ssl
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

COMPONENTS = ("kube-scheduler", "kube-controller-manager")
WINDOW = 15  # s per profile: the last window ends at most this long after the run


def secure_port(pid: int) -> int:
    """The port a component serves on: its `--secure-port=` argument."""
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    for arg in argv:
        if arg.startswith(b"--secure-port="):
            return int(arg.split(b"=", 1)[1])
    raise LookupError(f"pid {pid} has no --secure-port argument")


class _Sampler(threading.Thread):
    """Back-to-back CPU profiles of one component until told to stop."""

    def __init__(self, url: str, token: str, prefix: Path, done: threading.Event) -> None:
        super().__init__(daemon=True, name=f"pprof {prefix.name}")
        self.url, self.token, self.prefix, self.done = url, token, prefix, done
        self.error: str | None = None

    def run(self) -> None:
        tls = ssl.create_default_context()
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE  # the components' self-signed serving certificates
        n = 0
        while not self.done.is_set():
            request = urllib.request.Request(
                f"{self.url}/debug/pprof/profile?seconds={WINDOW}",
                headers={"Authorization": f"Bearer {self.token}"},
            )
            try:
                with urllib.request.urlopen(request, timeout=WINDOW + 30, context=tls) as resp:
                    body = resp.read()
            except OSError as exc:
                self.error = f"{self.url}: {exc}"
                return
            out = self.prefix.with_name(f"{self.prefix.name}-{n:03d}.pb.gz")
            out.write_bytes(body)
            n += 1


@contextlib.contextmanager
def control_plane_profiles(
    out_dir: Path, namespace: str, token: str, pids: dict[str, int]
) -> Iterator[None]:
    """Profile the control plane's Go components while the body runs."""
    out_dir.mkdir(parents=True, exist_ok=True)
    done = threading.Event()
    samplers = [
        _Sampler(
            f"https://127.0.0.1:{secure_port(pids[name])}",
            token,
            out_dir / f"{namespace}-{name}",
            done,
        )
        for name in COMPONENTS
        if name in pids
    ]
    for s in samplers:
        s.start()
    try:
        yield
    finally:
        done.set()
        for s in samplers:
            s.join(WINDOW + 35)
            if s.error is not None:
                print(f"pprof: {s.error}", flush=True)
