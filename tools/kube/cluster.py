#!/usr/bin/env python3
"""Start and stop a real Kubernetes control plane on loopback for tests (stdlib only).

    python3 tools/kube/cluster.py up [--real-node]   # start; prints the kubeconfig path
    python3 tools/kube/cluster.py down    # stop exactly the processes `up` started
    python3 tools/kube/cluster.py status
    python3 tools/kube/cluster.py volumes NAMESPACE CLAIM...   # hostPath PVs on the real node

`up` runs etcd, kube-apiserver, kube-controller-manager, kube-scheduler and KWOK (the fake
kubelet) from the binaries that tools/kube/build.sh put in the cache, each bound to 127.0.0.1
on a free port, in a fresh temporary directory (certificates, kubeconfig, data, logs). It waits
for /readyz, registers fake nodes (some with nvidia.com/gpu) with loopback addresses, waits
until they are Ready and records every PID in a state file. `down` signals exactly those PIDs
(checking each is still the process it started) and removes the temporary directory.

`--real-node` adds one real kubelet node (containerd, runc, CNI bridge, CoreDNS; needs root)
beside the fake ones: see realnode.py. KWOK manages only the nodes annotated
`kwok.x-k8s.io/node=fake`, so it never adopts the real one, and not those labelled
`tfkube.io/silent` (`Cluster.silence_node`: a fake node whose kubelet died).

The pytest fixture in tests/cluster/fixtures.py imports this file and uses `Cluster` directly.
All traffic stays on 127.0.0.0/8: every component listens on 127.0.0.1 and the fake nodes get
127.0.1.x/127.0.2.x addresses. Pod IPs (KWOK) come from 198.18.0.0/16 because the API rejects
loopback endpoint addresses: they are bookkeeping only, with no process behind them, and must
never be dialled. ClusterIPs come from 198.19.224.0/20 (SERVICE_CIDR), also inside the
benchmarking range 198.18.0.0/15 and apart from the real node's pod subnets (198.19.N.0/24):
on a KWOK-only cluster they are numbers only; with a real node, its kube-proxy routes them
for the real node's pods and for this machine (realnode.py).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib.util
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
STAGES_DIR = HERE / "stages"
ADMIN_USER = "tfkube-admin"
FRONT_PROXY_CLIENT = "front-proxy-client"
"""The CN the API server shows an aggregated API server (metrics-server), in its own CA."""
# KWOK's fake pod IPs. Not loopback: EndpointSlice validation rejects 127.0.0.0/8 addresses.
# 198.18.0.0/15 is reserved for benchmarking (RFC 2544) and routed nowhere; these IPs are only
# numbers in pod status and EndpointSlices: nothing may ever connect to them.
POD_CIDR = "198.18.0.1/16"
SERVICE_CIDR = "198.19.224.0/20"
"""ClusterIPs. Inside 198.18.0.0/15 (the only non-loopback range tests may send to), apart
from POD_CIDR and from the real node's pod /24s (198.19.0-3.0/24): only the real node's
kube-proxy routes them; on a KWOK-only cluster they are bookkeeping."""
KUBERNETES_SERVICE_IP = "198.19.224.1"
"""The `kubernetes` Service's ClusterIP (the range's first address): in the serving cert."""
GPU_RESOURCE = "nvidia.com/gpu"


def cache_root() -> Path:
    return _sibling("images").cache_root()


def default_bin_dir() -> Path:
    return _sibling("images").default_bin_dir()


def _sibling(name: str) -> ModuleType:
    """Import a stdlib-only script beside this one (realnode.py, images.py) by file path."""
    key = f"tfkube_tools_kube_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, HERE / f"{name}.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module  # dataclasses look their module up while the class is built
        spec.loader.exec_module(module)
    return sys.modules[key]


def default_state_file() -> Path:
    return cache_root() / "kube-up" / "state.json"


SILENT_LABEL = "tfkube.io/silent"
"""A fake node labelled so is not KWOK's (see `Cluster.silence_node`)."""


class ClusterError(RuntimeError):
    pass


@dataclass
class NodeSpec:
    name: str
    ip: str
    gpus: int = 0
    cpu: str = "16"
    memory: str = "64Gi"
    pods: str = "110"

    def manifest(self) -> dict:
        capacity = {"cpu": self.cpu, "memory": self.memory, "pods": self.pods}
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
            "tfkube.io/fake-node": "true",
        }
        if self.gpus:
            capacity[GPU_RESOURCE] = str(self.gpus)
            labels["tfkube.io/gpu"] = "true"
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                "annotations": {"kwok.x-k8s.io/node": "fake"},
            },
            "spec": {},
            "status": {
                "capacity": capacity,
                "allocatable": dict(capacity),
                "addresses": [
                    {"type": "InternalIP", "address": self.ip},
                    {"type": "Hostname", "address": self.name},
                ],
            },
        }


def default_nodes(cpu_nodes: int = 3, gpu_nodes: int = 2, gpus_per_node: int = 4) -> list[NodeSpec]:
    nodes = [NodeSpec(f"tfkube-cpu-{i}", f"127.0.1.{i + 1}") for i in range(cpu_nodes)]
    nodes += [
        NodeSpec(f"tfkube-gpu-{i}", f"127.0.2.{i + 1}", gpus=gpus_per_node)
        for i in range(gpu_nodes)
    ]
    return nodes


@dataclass
class Proc:
    name: str
    pid: int
    start_ticks: int  # /proc/<pid>/stat field 22: guards against PID reuse
    exe: str
    log: str


@dataclass
class State:
    workdir: str
    kubeconfig: str
    server: str
    ca_file: str
    token: str
    bin_dir: str
    procs: list[Proc] = field(default_factory=list)
    nodes: list[dict] = field(default_factory=list)
    started_at: float = 0.0
    real_node: dict | None = None  # realnode.NodeState as a dict: what `down` must undo
    second_node: dict | None = None  # the second real node's (own network namespace)
    network: dict | None = None
    """The real node's bridge, claimed before the API server starts (realnode.claim_network)
    when a real node may join: the API server listens on its address so pods reach it; the
    bridge lives as long as the control plane (removed by `stop`/`down` after it)."""

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> State:
        raw = json.loads(path.read_text())
        raw["procs"] = [Proc(**p) for p in raw.get("procs", [])]
        return cls(**raw)


# --------------------------------------------------------------------------- processes


def _start_ticks(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may hold spaces: split after its closing parenthesis
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


def _is_ours(proc: Proc) -> bool:
    """True if PID still runs the process we started (same start time, not a zombie)."""
    ticks = _start_ticks(proc.pid)
    if ticks is None or ticks != proc.start_ticks:
        return False
    try:
        state = Path(f"/proc/{proc.pid}/stat").read_text()
        return state[state.rindex(")") + 2] != "Z"
    except OSError:
        return False


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """preexec_fn: SIGKILL the child when the process that started it dies (PR_SET_PDEATHSIG)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)


def stop_procs(procs: list[Proc], timeout: float = 5.0) -> list[str]:
    """Stop each still-ours PID in reverse start order: SIGTERM, then SIGKILL after `timeout`.

    One at a time, so the apiserver shuts down while etcd still answers. The state is
    throwaway, so a component slow to drain is killed rather than waited for.
    """
    report = []
    for proc in reversed(procs):
        if not _is_ours(proc):
            report.append(f"{proc.name} (pid {proc.pid}) had already exited")
            _reap(proc.pid)
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _is_ours(proc) and time.monotonic() < deadline:
            _reap(proc.pid)
            time.sleep(0.05)
        if _is_ours(proc):
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            deadline = time.monotonic() + 5
            while _is_ours(proc) and time.monotonic() < deadline:
                time.sleep(0.02)
            report.append(f"{proc.name} (pid {proc.pid}) stopped (SIGKILL after {timeout:.0f}s)")
        else:
            report.append(f"{proc.name} (pid {proc.pid}) stopped")
        _reap(proc.pid)
    return report


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- cluster


class Cluster:
    """One control plane in one temporary directory. `start()` then `stop()`."""

    def __init__(
        self,
        bin_dir: Path | None = None,
        nodes: list[NodeSpec] | None = None,
        workdir: Path | None = None,
        die_with_parent: bool = False,
        verbose: bool = False,
        real_node: bool = False,
        real_node_network: bool | None = None,
        state_file: Path | None = None,
        apiserver_args: tuple[str, ...] = (),
        kwok_args: tuple[str, ...] = (),
    ) -> None:
        self.apiserver_args = apiserver_args  # extra flags, e.g. an audit log (benchmarks)
        self.kwok_args = kwok_args  # extra flags, e.g. a KwokConfiguration (benchmarks)
        self.bin_dir = Path(bin_dir) if bin_dir else default_bin_dir()
        self.want_real_node = real_node
        # Claim the real node's bridge before the API server starts, so that it listens on an
        # address pods can reach (in-cluster clients): needed when a real node will be added
        # later (add_real_node), as the test session does. Default: with `real_node`.
        self.want_network = real_node if real_node_network is None else real_node_network
        self.state_file = state_file  # saved as soon as there is something to undo
        self.nodes = nodes if nodes is not None else default_nodes()
        self._workdir = workdir
        self.die_with_parent = die_with_parent
        self.verbose = verbose
        self.state: State | None = None

    # -- helpers
    def _log(self, msg: str) -> None:
        if self.verbose:
            print(f"kube: {msg}", file=sys.stderr, flush=True)

    def _bin(self, name: str) -> str:
        path = self.bin_dir / name
        if not os.access(path, os.X_OK):
            raise ClusterError(f"{path} is missing: build the binaries with `make kube-bins`")
        return str(path)

    def _spawn(self, name: str, argv: list[str], track: bool = True) -> Proc:
        assert self.state is not None
        logdir = Path(self.state.workdir) / "logs"
        logdir.mkdir(exist_ok=True)
        log_path = logdir / f"{name}.log"
        with open(log_path, "ab") as log:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.state.workdir,
                start_new_session=True,
                preexec_fn=_die_with_parent if self.die_with_parent else None,
            )
        ticks = _start_ticks(popen.pid) or 0
        proc = Proc(name, popen.pid, ticks, argv[0], str(log_path))
        if track:  # the real node's daemons are stopped by realnode.stop, in its own order
            self.state.procs.append(proc)
        self._popens[popen.pid] = popen
        self._log(f"started {name} pid {popen.pid}")
        return proc

    def _log_tails(self, chars: int = 1500) -> str:
        assert self.state is not None
        out = []
        procs = list(self.state.procs)
        for node in (self.state.real_node, self.state.second_node):
            procs += [Proc(**p) for p in (node or {}).get("procs", [])]
        for proc in procs:
            with contextlib.suppress(OSError):
                tail = Path(proc.log).read_text(errors="replace")[-chars:]
                out.append(f"--- {proc.name} log tail ---\n{tail}")
        return "\n".join(out)

    def _check_alive(self, proc: Proc) -> None:
        popen = self._popens.get(proc.pid)
        if popen is not None and popen.poll() is not None:
            raise ClusterError(f"{proc.name} exited with {popen.returncode}")

    def _wait(self, what: str, check, proc: Proc | None = None, timeout: float = 60.0):
        deadline = time.monotonic() + timeout
        last_err: Exception | None = None
        while time.monotonic() < deadline:
            if proc is not None:
                self._check_alive(proc)
            try:
                result = check()
                if result:
                    return result
            except (OSError, urllib.error.URLError, ValueError) as exc:
                last_err = exc
            time.sleep(0.2)
        raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}: {last_err}")

    def api(
        self,
        method: str,
        path: str,
        body: dict | None = None,
        content_type: str = "application/json",
    ) -> dict:
        """A request to the apiserver as the admin (verifies the serving cert against our CA)."""
        assert self.state is not None
        req = urllib.request.Request(
            self.state.server + path,
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={
                "Authorization": f"Bearer {self.state.token}",
                "Content-Type": content_type,
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(req, context=self._ssl, timeout=10) as resp:
                data = resp.read()
        except urllib.error.HTTPError as exc:
            body = exc.read().decode(errors="replace")[:500]
            exc.close()
            raise OSError(f"{method} {path}: HTTP {exc.code}: {body}") from None
        try:
            return json.loads(data)
        except ValueError:
            return {"raw": data.decode(errors="replace")}

    # -- start / stop
    def start(self, timeout: float = 120.0) -> State:
        t0 = time.monotonic()
        workdir = self._workdir or Path(tempfile.mkdtemp(prefix="tfkube-kube-"))
        workdir.mkdir(parents=True, exist_ok=True)
        self._popens: dict[int, subprocess.Popen] = {}
        token = os.urandom(16).hex()
        self.state = State(
            workdir=str(workdir),
            kubeconfig=str(workdir / "kubeconfig"),
            server="",
            ca_file=str(workdir / "pki" / "ca.crt"),
            token=token,
            bin_dir=str(self.bin_dir),
            started_at=time.time(),
        )
        try:
            if self.want_network:
                self.state.network = _sibling("realnode").claim_network(SERVICE_CIDR)
                self.save_state()
            self._start(workdir, timeout)
        except ClusterError as exc:
            logs = self._log_tails()
            self.stop()
            raise ClusterError(f"{exc}\n{logs}") from None
        except BaseException:
            self.stop()
            raise
        self._log(f"ready in {time.monotonic() - t0:.1f}s")
        self.save_state()
        if self.want_real_node:
            try:
                self.add_real_node()
            except BaseException:
                self.stop()
                raise
        return self.state

    def add_real_node(self, timeout: float = 300.0) -> dict:
        """Start the real node (realnode.py) next to the fake ones; returns its NodeState.
        On failure everything it made is removed again; the control plane keeps running."""
        assert self.state is not None
        realnode = _sibling("realnode")
        node = realnode.RealNode(self, verbose=self.verbose)
        try:
            node.start(timeout=timeout)
        except (realnode.NodeError, ClusterError) as exc:
            logs = self._log_tails()
            self.stop_real_node()
            raise ClusterError(f"the real node did not start: {exc}\n{logs}") from None
        except BaseException:
            self.stop_real_node()
            raise
        assert self.state.real_node is not None
        return self.state.real_node

    def add_second_real_node(self, timeout: float = 300.0) -> dict:
        """Start a second real node beside the first (realnode.py: its own network namespace,
        container runtime, kubelet, kube-proxy and pod /24; the first's CoreDNS and API
        server); returns its NodeState. On failure everything it made is removed again."""
        assert self.state is not None
        realnode = _sibling("realnode")
        node = realnode.RealNode(self, verbose=self.verbose, second=True)
        try:
            node.start(timeout=timeout)
        except (realnode.NodeError, ClusterError) as exc:
            logs = self._log_tails()
            self.stop_second_real_node()
            raise ClusterError(f"the second real node did not start: {exc}\n{logs}") from None
        except BaseException:
            self.stop_second_real_node()
            raise
        assert self.state.second_node is not None
        return self.state.second_node

    def power_off_second_node(self) -> list[str]:
        """The second real node loses its power (realnode.power_off): its kubelet, runtime,
        kube-proxy and pods are SIGKILLed, the API server is not told. A node-loss test's
        fault; `stop_second_real_node` removes the rest afterwards."""
        assert self.state is not None
        assert self.state.second_node is not None
        report = _sibling("realnode").power_off(self.state.second_node, _is_ours, Proc)
        for proc in self.state.second_node["procs"]:  # collect the exit status of our children
            popen = self._popens.get(proc["pid"])
            if popen is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    popen.wait(timeout=5)
        return report

    def stop_second_real_node(self) -> list[str]:
        """Stop the second real node, if one was started, and remove all it made; the first
        node's pods stop routing to its subnet."""
        if self.state is None or self.state.second_node is None:
            return []
        realnode = _sibling("realnode")
        api = self.api if any(_is_ours(p) for p in self.state.procs) else None
        report = realnode.stop(self.state.second_node, stop_procs, Proc, api)
        self.state.second_node = None
        if self.state.real_node is not None:
            realnode.set_routes(self.state.real_node, [])
        self.save_state()
        return report

    def save_state(self) -> None:
        if self.state is not None and self.state_file is not None:
            self.state.save(self.state_file)

    def restart(self, name: str, timeout: float = 120.0) -> float:
        """Crash one control-plane component (SIGKILL) and start it again with the same
        command line and data, as a supervisor would (fault tests: an apiserver or etcd
        restarted mid-job). Returns the seconds from the kill until it answers again."""
        assert self.state is not None
        at = next(i for i, p in enumerate(self.state.procs) if p.name == name)
        old = self.state.procs[at]
        cmdline = Path(f"/proc/{old.pid}/cmdline").read_bytes()
        argv = [a.decode() for a in cmdline.split(b"\0")[:-1]]
        killed = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.kill(old.pid, signal.SIGKILL)
        popen = self._popens.pop(old.pid, None)
        if popen is not None:
            popen.wait(10)
        while _is_ours(old):
            _reap(old.pid)
            time.sleep(0.02)
        new = self._spawn(name, argv)
        self.state.procs.pop()  # keep the start order: stop_procs stops in reverse
        self.state.procs[at] = new
        self.save_state()
        if name == "etcd":
            url = next(a.split("=", 1)[1] for a in argv if a.startswith("--listen-client-urls="))
            self._wait("etcd /health", lambda: _http_ok(url + "/health"), new, timeout)
        self._wait(  # the apiserver answers (again): the cluster is usable
            "kube-apiserver /readyz",
            lambda: self.api("GET", "/readyz").get("raw", "").strip() == "ok",
            new,
            timeout,
        )
        return time.monotonic() - killed

    def silence_node(self, name: str, silent: bool = True) -> None:
        """Make a fake node's kubelet die (`silent`) or come back: labelled SILENT_LABEL, the
        node leaves KWOK's label selector, so KWOK stops renewing its Lease, refreshing its
        conditions and acting on its pods, as a machine that lost power; the node lifecycle
        controller then marks it NotReady and taints it, as it would a real one. Unlabelled,
        KWOK adopts it again (node-initialize makes it Ready)."""
        label = {SILENT_LABEL: "true" if silent else None}
        self.api(
            "PATCH",
            f"/api/v1/nodes/{name}",
            {"metadata": {"labels": label}},
            "application/merge-patch+json",
        )

    def stop_real_node(self) -> list[str]:
        """Stop the real node, if one was started, and remove all it made (API still up)."""
        if self.state is None or self.state.real_node is None:
            return self.stop_second_real_node()
        report = self.stop_second_real_node()  # it uses the first's DNS and routes
        realnode = _sibling("realnode")
        api = self.api if any(_is_ours(p) for p in self.state.procs) else None
        report += realnode.stop(self.state.real_node, stop_procs, Proc, api)
        self.state.real_node = None
        self.save_state()
        return report

    def _start(self, workdir: Path, timeout: float) -> None:
        st = self.state
        assert st is not None
        for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"):
            self._bin(name)
        pki = workdir / "pki"
        # With a real node, the API server listens on its bridge address (pods reach it there
        # and through the `kubernetes` Service); otherwise on loopback only.
        api_ip = st.network["node_ip"] if st.network else "127.0.0.1"
        _make_pki(pki, extra_ips=(api_ip,) if st.network else ())
        if st.network:  # the real node's metrics-server is an aggregated API (metrics.k8s.io)
            _make_front_proxy(pki)
        # The client certificate the apiserver shows a real kubelet (logs, exec, port-forward).
        make_client_cert(pki, pki / "apiserver-kubelet-client", "kube-apiserver-kubelet-client",
                         "system:masters")  # fmt: skip
        self._ssl = ssl.create_default_context(cafile=st.ca_file)

        # etcd
        etcd_port, peer_port = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        etcd = self._spawn(
            "etcd",
            [
                self._bin("etcd"),
                "--name=tfkube",
                f"--data-dir={workdir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=tfkube={peer_url}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync",
                "--snapshot-count=100000",
                "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ],
        )
        self._wait("etcd /health", lambda: _http_ok(etcd_url + "/health"), etcd, timeout)

        # kube-apiserver
        tokens = workdir / "tokens.csv"
        tokens.write_text(f'{st.token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n')
        tokens.chmod(0o600)
        api_port = free_port()
        st.server = f"https://{api_ip}:{api_port}"
        apiserver = self._spawn(
            "kube-apiserver",
            [
                self._bin("kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                f"--bind-address={api_ip}",
                f"--advertise-address={api_ip}",
                f"--secure-port={api_port}",
                f"--cert-dir={pki}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--token-auth-file={tokens}",
                # Node: a real kubelet (system:node:<name>) may touch only its own node's things.
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
                # A real node's InternalIP is its bridge address (fake nodes: loopback).
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--disable-admission-plugins=ServiceAccount",
                "--allow-privileged=true",
                "--profiling=false",
                "--max-requests-inflight=1000",
                "--max-mutating-requests-inflight=500",
                "--v=1",
                *(_aggregation_args(pki) if st.network else ()),
                *self.apiserver_args,
            ],
        )
        self._wait(
            "kube-apiserver /readyz",
            lambda: self.api("GET", "/readyz").get("raw", "").strip() == "ok",
            apiserver,
            timeout,
        )
        _write_kubeconfig(Path(st.kubeconfig), st.server, st.ca_file, st.token)

        # kube-controller-manager
        kcm_port = free_port()
        kcm = self._spawn(
            "kube-controller-manager",
            [
                self._bin("kube-controller-manager"),
                f"--kubeconfig={st.kubeconfig}",
                f"--authentication-kubeconfig={st.kubeconfig}",
                f"--authorization-kubeconfig={st.kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={kcm_port}",
                f"--cert-dir={workdir / 'kcm-certs'}",
                "--leader-elect=false",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allocate-node-cidrs=false",
                "--controllers=*,-nodeipam,-csrsigning,-bootstrapsigner,-tokencleaner",
                "--kube-api-qps=500",
                "--kube-api-burst=1000",
                "--concurrent-job-syncs=10",
                "--v=1",
            ],
        )
        # kube-scheduler (its qps flags are deprecated: use a config file)
        sched_port = free_port()
        sched_cfg = workdir / "scheduler.yaml"
        sched_cfg.write_text(
            "apiVersion: kubescheduler.config.k8s.io/v1\n"
            "kind: KubeSchedulerConfiguration\n"
            "clientConnection:\n"
            f"  kubeconfig: {st.kubeconfig}\n"
            "  qps: 500\n"
            "  burst: 1000\n"
            "leaderElection:\n"
            "  leaderElect: false\n"
        )
        sched = self._spawn(
            "kube-scheduler",
            [
                self._bin("kube-scheduler"),
                f"--config={sched_cfg}",
                f"--authentication-kubeconfig={st.kubeconfig}",
                f"--authorization-kubeconfig={st.kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={sched_port}",
                f"--cert-dir={workdir / 'scheduler-certs'}",
                "--v=1",
            ],
        )
        # kwok: the fake kubelet of every node
        kwok_port = free_port()
        kwok_argv = [
            self._bin("kwok"),
            f"--kubeconfig={st.kubeconfig}",
            # Only the fake nodes (annotated so): a real kubelet's node must never be adopted.
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            # ... and not the ones a test made silent (`silence_node`): a dead kubelet.
            f"--manage-nodes-with-label-selector=!{SILENT_LABEL}",
            "--node-ip=127.0.0.1",
            f"--cidr={POD_CIDR}",
            f"--server-address=127.0.0.1:{kwok_port}",
            "--node-lease-duration-seconds=40",
        ]
        for stage in sorted(STAGES_DIR.glob("*.yaml")):
            kwok_argv.append(f"--config={stage}")
        kwok_argv += self.kwok_args
        kwok = self._spawn("kwok", kwok_argv)

        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # components' self-signed health endpoints
        self._wait(
            "kube-controller-manager /healthz",
            lambda: _http_ok(f"https://127.0.0.1:{kcm_port}/healthz", insecure),
            kcm,
            timeout,
        )
        self._wait(
            "kube-scheduler /healthz",
            lambda: _http_ok(f"https://127.0.0.1:{sched_port}/healthz", insecure),
            sched,
            timeout,
        )
        self._wait("kwok /healthz", lambda: _http_ok(f"http://127.0.0.1:{kwok_port}/healthz"), kwok)

        # fake nodes
        for node in self.nodes:
            self.api("POST", "/api/v1/nodes", node.manifest())
        st.nodes = [asdict(n) for n in self.nodes]
        self._wait("fake nodes Ready", self._nodes_ready, kwok, timeout)
        # namespaces a test may expect, created by controllers
        self._wait(
            "default service account",
            lambda: self.api("GET", "/api/v1/namespaces/default/serviceaccounts/default"),
            kcm,
            timeout,
        )

    def _nodes_ready(self) -> bool:
        items = self.api("GET", "/api/v1/nodes").get("items", [])
        want = {n.name for n in self.nodes}
        ready = set()
        for item in items:
            conds = {c["type"]: c["status"] for c in item.get("status", {}).get("conditions", [])}
            taints = {t["key"] for t in item.get("spec", {}).get("taints", []) or []}
            if conds.get("Ready") == "True" and "node.kubernetes.io/not-ready" not in taints:
                ready.add(item["metadata"]["name"])
        return want <= ready

    def stop(self, remove_workdir: bool = True) -> list[str]:
        """Stop the processes this object started; remove the temp dir unless told not to."""
        if self.state is None:
            return []
        report = self.stop_real_node()
        report += stop_procs(self.state.procs)
        for popen in getattr(self, "_popens", {}).values():
            # collect the exit status (or note it was reaped already)
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=5)
        if self.state.network:  # after the API server: it listened on the bridge's address
            report += _sibling("realnode").release_network(self.state.network)
            self.state.network = None
        if remove_workdir:
            shutil.rmtree(self.state.workdir, ignore_errors=True)
        self.state.procs = []
        return report


# --------------------------------------------------------------------------- files


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, context=context, timeout=3) as resp:
            return resp.status == 200
    except urllib.error.HTTPError as exc:
        exc.close()
        return False


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _make_pki(pki: Path, extra_ips: tuple[str, ...] = ()) -> None:
    """A CA, an apiserver serving cert for 127.0.0.1/localhost, the `kubernetes` Service IP
    and `extra_ips` (the real node's bridge address), a service-account key pair."""
    if shutil.which("openssl") is None:
        raise ClusterError("openssl is needed to make the test certificates")
    pki.mkdir(parents=True, exist_ok=True)
    ca_key, ca_crt = _make_ca(pki, "ca", "tfkube-test-ca")
    key, csr, crt = pki / "apiserver.key", pki / "apiserver.csr", pki / "apiserver.crt"
    _openssl("genrsa", "-out", str(key), "2048")
    _openssl("req", "-new", "-key", str(key), "-subj", "/CN=kube-apiserver", "-out", str(csr))
    ext = pki / "apiserver.ext"
    ext.write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid,issuer\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
        "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,"
        f"IP:{KUBERNETES_SERVICE_IP}" + "".join(f",IP:{ip}" for ip in extra_ips) + "\n"
    )
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key),
        "-CAcreateserial", "-days", "30", "-sha256", "-extfile", str(ext), "-out", str(crt),
    )  # fmt: skip
    _openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
    _openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))


def _make_ca(pki: Path, name: str, common_name: str) -> tuple[Path, Path]:
    """`<name>.key` and `<name>.crt`: a CA for 30 days."""
    key, crt = pki / f"{name}.key", pki / f"{name}.crt"
    _openssl("genrsa", "-out", str(key), "2048")
    _openssl(
        "req", "-x509", "-new", "-key", str(key), "-sha256", "-days", "30",
        "-subj", f"/CN={common_name}", "-out", str(crt),
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
    )  # fmt: skip
    return key, crt


def _make_front_proxy(pki: Path) -> None:
    """The aggregation layer's own CA and the client certificate the API server shows an
    aggregated API server (the real node's metrics-server), which trusts the user it names
    in X-Remote-User only from that CA (`_aggregation_args`)."""
    _make_ca(pki, "front-proxy-ca", "tfkube-test-front-proxy-ca")
    make_client_cert(pki, pki / "front-proxy-client", FRONT_PROXY_CLIENT, "", ca="front-proxy-ca")


def _aggregation_args(pki: Path) -> list[str]:
    """kube-apiserver flags of the aggregation layer. `--enable-aggregator-routing`: it
    dials the aggregated server's endpoint address (the real node's bridge address), not its
    Service's ClusterIP, so this machine needs no route to the service range."""
    return [
        f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
        f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
        "--enable-aggregator-routing=true",
    ]


def make_serving_cert(
    pki: Path, prefix: Path, common_name: str, ips: tuple[str, ...], dns: tuple[str, ...] = ()
) -> None:
    """`<prefix>.key` and `<prefix>.crt`: a serving certificate for these addresses and
    names, signed by our CA (the real node's kubelet and metrics-server)."""
    key, csr, crt = (prefix.with_suffix(s) for s in (".key", ".csr", ".crt"))
    _openssl("genrsa", "-out", str(key), "2048")
    _openssl("req", "-new", "-key", str(key), "-subj", f"/CN={common_name}", "-out", str(csr))
    ext = prefix.with_suffix(".ext")
    names = [f"IP:{ip}" for ip in ips] + [f"DNS:{d}" for d in dns]
    ext.write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        f"subjectAltName={','.join(names)}\n"
    )
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(pki / "ca.crt"), "-CAkey", str(pki / "ca.key"),
        "-CAcreateserial", "-days", "30", "-sha256", "-extfile", str(ext), "-out", str(crt),
    )  # fmt: skip
    key.chmod(0o600)


def make_client_cert(
    pki: Path, prefix: Path, common_name: str, organization: str, ca: str = "ca"
) -> None:
    """`<prefix>.key` and `<prefix>.crt`: a client certificate for CN/O, signed by our CA."""
    key, csr, crt = (prefix.with_suffix(s) for s in (".key", ".csr", ".crt"))
    _openssl("genrsa", "-out", str(key), "2048")
    subject = (f"/O={organization}" if organization else "") + f"/CN={common_name}"
    _openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr))
    ext = prefix.with_suffix(".ext")
    ext.write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=clientAuth\n"
    )
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(pki / f"{ca}.crt"),
        "-CAkey", str(pki / f"{ca}.key"), "-CAcreateserial", "-days", "30", "-sha256",
        "-extfile", str(ext), "-out", str(crt),
    )  # fmt: skip
    key.chmod(0o600)


def write_cert_kubeconfig(
    path: Path, server: str, ca_file: str, cert: Path, key: Path, user: str
) -> None:
    """A kubeconfig that authenticates with a client certificate (the real kubelet's)."""
    credentials = {"client-certificate": str(cert), "client-key": str(key)}
    _write_kubeconfig(path, server, ca_file, user=user, credentials=credentials)


def _write_kubeconfig(
    path: Path,
    server: str,
    ca_file: str,
    token: str = "",
    user: str = ADMIN_USER,
    credentials: dict | None = None,
) -> None:
    # JSON is valid YAML: no YAML library needed.
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "tfkube-test", "cluster": {"server": server, "certificate-authority": ca_file}}
        ],
        "users": [{"name": user, "user": credentials or {"token": token}}],
        "contexts": [{"name": "tfkube-test", "context": {"cluster": "tfkube-test", "user": user}}],
        "current-context": "tfkube-test",
    }
    path.write_text(json.dumps(cfg, indent=2) + "\n")
    path.chmod(0o600)


# --------------------------------------------------------------------------- CLI


def _running(state_file: Path) -> State | None:
    if not state_file.exists():
        return None
    try:
        state = State.load(state_file)
    except (ValueError, TypeError, KeyError):
        return None
    return state if any(_is_ours(p) for p in state.procs) else None


def cmd_up(args: argparse.Namespace) -> int:
    state_file = Path(args.state)
    running = _running(state_file)
    if running is not None:
        print(
            f"kube-up: a control plane is already running (state {state_file}).\n"
            f"kube-up: kubeconfig: {running.kubeconfig}\n"
            "kube-up: stop it first with `make kube-down`.",
            file=sys.stderr,
        )
        return 1
    if state_file.exists():  # stale: its processes are gone
        stale = State.load(state_file)
        shutil.rmtree(stale.workdir, ignore_errors=True)
        state_file.unlink()
        print("kube-up: removed a stale state file (its processes had exited)", file=sys.stderr)
    nodes = default_nodes(args.cpu_nodes, args.gpu_nodes, args.gpus_per_node)
    cluster = Cluster(bin_dir=Path(args.bin_dir) if args.bin_dir else None, nodes=nodes,
                      verbose=True, real_node=args.real_node or args.second_node,
                      state_file=state_file)  # fmt: skip
    t0 = time.monotonic()
    try:
        state = cluster.start(timeout=args.timeout)
    except ClusterError as exc:
        print(f"kube-up: FAILED: {exc}", file=sys.stderr)
        return 1
    if args.second_node and state.real_node:
        try:
            cluster.add_second_real_node()
        except ClusterError as exc:
            print(f"kube-up: FAILED: {exc}", file=sys.stderr)
            cluster.stop()
            return 1
    state.save(state_file)
    names = ", ".join(n.name + (f" ({n.gpus} GPU)" if n.gpus else "") for n in nodes)
    if state.real_node:
        real = state.real_node
        names += (f"; real node {real['name']} at {real['node_ip']} (label and taint "
                  "tfkube.io/real-node=true; DNS on the same address)")  # fmt: skip
    if state.second_node:
        names += f"; second real node {state.second_node['name']} at {state.second_node['node_ip']}"
    print(
        f"kube-up: control plane ready in {time.monotonic() - t0:.1f}s at {state.server}\n"
        f"kube-up: nodes: {names}\n"
        f"kube-up: logs: {state.workdir}/logs; stop with `make kube-down`\n"
        f"kube-up: export KUBECONFIG={state.kubeconfig}",
        file=sys.stderr,
    )
    print(state.kubeconfig)
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    state_file = Path(args.state)
    if not state_file.exists():
        print("kube-down: no control plane is running (no state file)", file=sys.stderr)
        return 0
    state = State.load(state_file)
    if not any(_is_ours(p) for p in state.procs):
        print("kube-down: no control plane is running (its processes had already exited);"
              " cleaning up", file=sys.stderr)  # fmt: skip
    report = []
    if state.real_node or state.second_node:
        cluster = Cluster(bin_dir=Path(state.bin_dir), nodes=[])
        cluster.state = state
        cluster._ssl = ssl.create_default_context(cafile=state.ca_file)
        report += cluster.stop_real_node()
    report += stop_procs(state.procs)
    if state.network:
        report += _sibling("realnode").release_network(state.network)
    for line in report:
        print(f"kube-down: {line}", file=sys.stderr)
    shutil.rmtree(state.workdir, ignore_errors=True)
    state_file.unlink()
    print(f"kube-down: removed {state.workdir}", file=sys.stderr)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    state = _running(Path(args.state))
    if state is None:
        print("kube: not running")
        return 1
    procs = list(state.procs)
    for node in (state.real_node, state.second_node):
        procs += [Proc(**p) for p in (node or {}).get("procs", [])]
    for p in procs:
        print(f"{p.name:24} pid {p.pid:<8} {'running' if _is_ours(p) else 'EXITED'}")
    for node in (state.real_node, state.second_node):
        if node:
            print(f"real node: {node['name']} at {node['node_ip']}")
    print(f"kubeconfig: {state.kubeconfig}")
    return 0


def cmd_volumes(args: argparse.Namespace) -> int:
    """Pre-bound hostPath PVs on the real node (no provisioner), e.g. for a job's claims."""
    state = _running(Path(args.state))
    if state is None or not state.real_node:
        print("kube: no cluster with a real node runs (make kube-up REAL_NODE=1)", file=sys.stderr)
        return 1
    cluster = Cluster(bin_dir=Path(state.bin_dir), nodes=[])
    cluster.state = state
    cluster._ssl = ssl.create_default_context(cafile=state.ca_file)
    realnode = _sibling("realnode")
    node = realnode.NodeState(**state.real_node)
    for name in realnode.bind_claims(cluster.api, node, args.namespace, args.claims, args.size):
        print(name)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--state", default=str(default_state_file()), help="state file")
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start the control plane, print the kubeconfig path")
    up.add_argument("--bin-dir", help="binaries (default: tools/kube/build.sh --print-bin-dir)")
    up.add_argument("--cpu-nodes", type=int, default=3)
    up.add_argument("--gpu-nodes", type=int, default=2)
    up.add_argument("--gpus-per-node", type=int, default=4)
    up.add_argument("--timeout", type=float, default=120.0)
    up.add_argument(
        "--real-node",
        action="store_true",
        help="also start one real kubelet node (root; see tools/kube/realnode.py)",
    )
    up.add_argument(
        "--second-node",
        action="store_true",
        help="with --real-node: a second real node in its own network namespace",
    )
    sub.add_parser("down", help="stop the processes `up` started and remove its directory")
    sub.add_parser("status", help="show whether it runs")
    vol = sub.add_parser("volumes", help="hostPath PVs on the real node, pre-bound to claims")
    vol.add_argument("namespace")
    vol.add_argument("claims", nargs="+", help="claim names, e.g. JOB-data JOB-logs")
    vol.add_argument("--size", default="10Gi")
    args = parser.parse_args(argv)
    commands = {"up": cmd_up, "down": cmd_down, "status": cmd_status, "volumes": cmd_volumes}
    return commands[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
