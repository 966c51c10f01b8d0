"""`--profile DIR`, the control plane's side: Go CPU profiles of kube-apiserver,
kube-scheduler and kube-controller-manager over one runner's run.

Each serves `/debug/pprof/profile` on its secure port (the admin token authenticates, by
TokenReview for the two controllers, and is allowed; the test cluster's API server runs
with `--profiling=false`, so the benchmark adds `--profiling=true` with `--profile`). The
fake kubelet (KWOK v0.7.0) is not profiled: it mounts only pprof's index, whose
`/debug/pprof/profile` answers 404 (its CPU seconds are in every row). A profile
covers one window of `WINDOW` seconds, so each component is sampled in back-to-back
windows from the runner's start to its end, one file per window:
`{namespace}-{component}-{n}.pb.gz`. pprof merges them when given together:

    go tool pprof -top -nodecount 40 DIR/tfkube-1000x10000-kube-scheduler-*.pb.gz

Why: at 11,000 replicas the scheduler spent 1.57x the floor's CPU on the same pods (run
Q3), and one tfkube run cost the control plane 605 CPU-s against 384-436 in the others
(run Q10.4, docs/benchmarks.md); the profiles say where.
"""

from __future__ import annotations

import contextlib
import ssl
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

COMPONENTS = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
WINDOW = 15  # s per profile: the last window ends at most this long after the run
APISERVER_ARGS = ("--profiling=true",)  # after the cluster's own --profiling=false: last wins


def _flag(pid: int, name: str) -> str | None:
    """The value of a component's `--name=value` argument (the last, as Go's flags take)."""
    value = None
    for arg in Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0"):
        if arg.startswith(f"--{name}="):
            value = arg.split("=", 1)[1]
    return value


def profile_url(name: str, pid: int) -> str:
    """Where a component serves its pprof handlers."""
    port = _flag(pid, "secure-port")
    if port is None:
        raise LookupError(f"{name} (pid {pid}) has no --secure-port argument")
    return f"https://{_flag(pid, 'bind-address') or '127.0.0.1'}:{port}"


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
            profile_url(name, pids[name]),
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
