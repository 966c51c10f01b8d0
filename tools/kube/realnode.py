"""Real kubelet nodes (one, and a second on demand) beside KWOK's fake ones (stdlib only;
used by cluster.py).

    RealNode(bin_dir, workdir, api).start()   # after the control plane is up
    RealNode.stop(state, api)                   # stop by PID, remove everything it made

What it runs, all as root, every file under `<cluster workdir>/real-node/`:

    bridge tfkube<N> 198.19.N.1/24   node IP, kubelet address, CNI bridge, DNS address
      and a routing rule: from the bridge to the service range, unreachable (a packet
      kube-proxy did not translate is refused here, never sent off this machine)
    containerd (Debian's 1.6, CRI v1) own config, root, state and socket; runc; CNI bridge
      + host-local (Debian's containernetworking-plugins); images imported from the cache
      (tools/kube/images.py): the pause image, tensorflow/tensorflow:2.21.0, tfkube's own
      (ghcr.io/tfkube/operator:<version>; rebuilt first when only tfkube's source changed)
      and PostgreSQL's (ghcr.io/tfkube/postgres:15-bookworm)
    CoreDNS (built from its Go module) on 198.19.N.1:53, zone cluster.local (kubernetes plugin)
    kubelet v1.34.4 (built from its Go module), node `tfkube-real-<N>`, cgroup root /tfkube-<N>
    kube-proxy v1.34.4 (built from its Go module), iptables mode: ClusterIPs (198.19.224.0/20)
      route for the node's pods (a CNI route to the service range via 198.19.N.1, forwarding
      on the bridge only) and for this machine; its rules are removed at stop (`--cleanup`)
    kube-router v2.1.0 (built from its Go module), its network policy controller only
      (`--run-firewall`, no routing, no service proxy): NetworkPolicy enforced with iptables
      and ipset (Debian's) for the node's pods; its chains and sets are removed at stop
      (`remove_kube_router_rules`)

When the control plane is started for a real node (cluster.py: `up --real-node`, or the test
session that has real-node tests), the bridge is claimed first (`claim_network`) and the API
server listens on 198.19.N.1: pods reach it there and through the `kubernetes` Service
(in-cluster config); the bridge then lives as long as the control plane.

N (the slot, 0-3) is the first whose bridge does not exist yet: creating the bridge claims
it, so test sessions on one machine never share a bridge, an address or a cgroup.

Facts that shaped it (docs/testing.md, "The real node"): root lacks CAP_SYS_RESOURCE here, so
containerd must `restrict_oom_score_adj`; the machine mounts cgroup v1, so kubelet needs
`failCgroupV1: false` and the cgroupfs driver; the kubelet refuses a loopback node IP, hence
the bridge address; pods have no route off the bridge, so cluster DNS is ours.

Scheduling contract: the node carries the label `tfkube.io/real-node=true` and the taint
`tfkube.io/real-node=true:NoSchedule`; only pods that select and tolerate it land there.
KWOK never adopts it (cluster.py runs KWOK for nodes annotated `kwok.x-k8s.io/node=fake`).

A second node (`RealNode(cluster, second=True)`, cluster.py `add_second_real_node`, the
`second_real_node` test fixture) joins a running first one:

    network namespace tfkube<N>b (`ip netns add`), veth tfkube<N>b (machine, 198.19.(32+N).1/30)
      <-> eth0 (namespace, .2/30); bridge cbr0 198.19.(16+N).1/24 in the namespace: node IP,
      kubelet address, CNI bridge. Routes: the machine sends 198.19.(16+N).0/24 down the veth
      (forwarding on the veth only), the namespace sends the first node's /24 up it (forwarding
      on inside: the namespace's own; the machine's own connections to it leave from the first
      node's address, the API server's, as from a control-plane host); both nodes' pods route
      the other's /24 via their node address (the first node's CNI file is rewritten:
      containerd reloads it)
    containerd, kubelet, kube-proxy and kube-router run inside it through `nsenter --net=`
      (not `ip netns exec`: the mount namespace stays the machine's, so the kubelet's volume
      mounts and containerd's pod namespaces are seen by both); their own root, state, socket,
      kubelet dirs and cgroup root /tfkube-<N>b; node `tfkube-real-<N>b`; kube-proxy's and
      kube-router's iptables rules (and ipsets) are the namespace's own, so they go with it
    no CoreDNS, no metrics-server of its own: its pods use the first node's DNS address (routed),
      metrics-server scrapes both kubelets; the API server stays on the first node's bridge
    taints: NODE_TAINT and SECOND_NODE_TAINT, so pods written for one real node never land there

Its hostPath claims can be folders every node mounts (`bind_claims(..., nodes=[...])`): the
nodes share this machine's file system, so a checkpoint written on one is read on the other.

Not emulated: a route off the bridge (pods reach only each other, the node
addresses and ClusterIPs), registries (images are imported, once per node), GPUs, node
restarts. One kube-proxy per machine's network namespace: its iptables chains are global to
it, so a first real node is refused while another runs in the machine's namespace.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import ipaddress
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
NODE_LABEL = "tfkube.io/real-node"
"""Label and taint key of the real node: select it and tolerate the taint to land there."""
NODE_TAINT = {"key": NODE_LABEL, "value": "true", "effect": "NoSchedule"}
SECOND_NODE_TAINT = {"key": "tfkube.io/second-node", "value": "true", "effect": "NoSchedule"}
"""The second node's own taint, besides NODE_TAINT: only pods that tolerate it too land
there, so the tests written for one real node never meet the second."""
SUBNET_BASE = ipaddress.ip_network("198.19.0.0/16")
"""Slot N uses 198.19.N.0/24; KWOK's fake pod IPs are 198.18.0.0/16, so they never meet."""
MAX_SLOTS = 4
SECOND_OFFSET = 16
"""The second node of slot N: pods 198.19.(16+N).0/24, the first address its node IP."""
LINK_OFFSET = 32
"""The second node's link to the machine: 198.19.(32+N).0/30 (.1 the machine, .2 the node)."""
SECOND_BRIDGE = "cbr0"
"""The second node's CNI bridge, inside its own network namespace."""
CLUSTER_DOMAIN = "cluster.local"
CGROUP_ROOT = Path("/sys/fs/cgroup")
CNI_BIN_DIR = "/usr/lib/cni"
CONTAINERD = "/usr/bin/containerd"
CTR = "/usr/bin/ctr"
RUNC = "/usr/sbin/runc"
IPSET = "/usr/sbin/ipset"
KUBELET_PORT = 10250
KUBE_PROXY_HEALTHZ_PORT = 10256
KUBE_PROXY_METRICS_PORT = 10249
HEALTHZ_PORT = 10248
READY_PORT = 8181
METRICS_NAMESPACE = "kube-system"
METRICS_SERVICE = "metrics-server"
METRICS_SERVICE_DNS = f"{METRICS_SERVICE}.{METRICS_NAMESPACE}.svc"
"""The name the API server checks metrics-server's certificate for."""
METRICS_APISERVICE = "v1beta1.metrics.k8s.io"
METRIC_RESOLUTION = "10s"
"""How often metrics-server scrapes the kubelet (its minimum)."""
CONTAINER_LOGS = Path("/var/log/containers")
"""The kubelet links every container's log here (a fixed path); we remove ours."""
FIXED_DIRS = ("/run/containerd/s", "/run/containerd", "/var/lib/cni/results", "/var/lib/cni")
"""Folders containerd 1.6 (shim sockets) and libcni (its result cache) use whatever the
configuration says: removed at stop when we created them and they are empty again."""


class NodeError(RuntimeError):
    pass


def _sibling(name: str) -> ModuleType:
    """Import a stdlib-only script beside this one (works when loaded by file path too)."""
    key = f"tfkube_tools_kube_{name}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, HERE / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
    return module


def missing_parts(bin_dir: Path) -> list[str]:
    """What the real node lacks on this machine, each with the command that fixes it."""
    out = []
    if os.geteuid() != 0:
        out.append("root (the real node creates a bridge, cgroups and mounts)")
    for path in (CONTAINERD, CTR, RUNC, f"{CNI_BIN_DIR}/bridge", f"{CNI_BIN_DIR}/host-local"):
        if not os.access(path, os.X_OK):
            out.append(f"{path} (run tools/kube/node-deps.sh)")
    if not os.access(IPSET, os.X_OK):
        out.append(f"{IPSET} (run tools/kube/node-deps.sh)")
    node_bins = ("kubelet", "kube-proxy", "kube-router", "coredns", "metrics-server")
    for name in (*node_bins, "tfkube-pause"):
        if not os.access(bin_dir / name, os.X_OK):
            out.append(f"{bin_dir / name} (run tools/kube/build.sh --with-node)")
    if not out:  # the images need the pause binary: only look once the rest is there
        images = _sibling("images")
        try:
            pause, tensorflow, own, postgres = images.images(bin_dir)
            for image in (pause, tensorflow, own, postgres):
                # tfkube's own layer is built at start (seconds) when its dependencies are
                if image is own and tensorflow.present() and images.deps_cached(tensorflow):
                    continue
                if not image.present():
                    out.append(f"image {image.name} (run python3 tools/kube/images.py build)")
        except images.ImageError as exc:
            out.append(str(exc))
    return out


@dataclass
class NodeState:
    """What `stop` needs to undo everything, saved in the cluster's state file."""

    name: str
    slot: int
    bridge: str
    node_ip: str
    subnet: str
    dir: str
    cgroup: str  # kubelet cgroupRoot, e.g. /tfkube-0
    containerd_socket: str
    procs: list[dict[str, Any]] = field(default_factory=list)  # cluster.Proc as dicts
    volumes_dir: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    created_dirs: list[str] = field(default_factory=list)  # FIXED_DIRS that did not exist
    owns_bridge: bool = True  # False: the cluster claimed it first (cluster.State.network)
    service_cidr: str = ""  # routed to the bridge address in pods (kube-proxy's ClusterIPs)
    netns: str = ""  # the second node: its network namespace (empty: the machine's own)
    uplink: str = ""  # the second node: the machine's end of its veth pair
    dns_ip: str = ""  # the cluster DNS address when it is not node_ip (the second node)
    routes: list[str] = field(default_factory=list)  # the other node's pod /24, via node_ip


def _run(argv: list[str], check: bool = True, timeout: float = 120) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise NodeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def _claim_slot() -> int:
    """Create the first free bridge tfkube<N>; its existence is the claim on slot N."""
    for slot in range(MAX_SLOTS):
        proc = subprocess.run(
            ["ip", "link", "add", f"tfkube{slot}", "type", "bridge"],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode == 0:
            return slot
        if "File exists" not in proc.stderr:
            raise NodeError(f"cannot create a bridge: {proc.stderr.strip()}")
    raise NodeError(
        f"all {MAX_SLOTS} real-node slots are taken (bridges tfkube0-{MAX_SLOTS - 1} exist): "
        "stop other clusters with `make kube-down`, or delete a stale bridge"
    )


def claim_network(service_cidr: str) -> dict[str, Any]:
    """Claim a slot's bridge and give it its address (198.19.N.1/24), up, with IPv4
    forwarding on this bridge only (a pod's packet to a ClusterIP is routed to the bridge
    address, DNATed by kube-proxy to a pod IP and forwarded back out). A packet from the
    bridge still addressed to `service_cidr` after kube-proxy's rules is answered
    "unreachable" here (`_void_rule`) instead of following this machine's default route off
    it. Returns slot, bridge, node_ip, subnet and service_cidr; `release_network` removes it
    (the sysctl goes with the device, the rule does not)."""
    slot = _claim_slot()
    bridge = f"tfkube{slot}"
    net = list(SUBNET_BASE.subnets(new_prefix=24))[slot]
    node_ip = str(net.network_address + 1)
    network = {
        "slot": slot,
        "bridge": bridge,
        "node_ip": node_ip,
        "subnet": str(net),
        "service_cidr": service_cidr,
    }
    try:
        _run(["ip", "addr", "add", f"{node_ip}/24", "dev", bridge])
        _run(["ip", "link", "set", bridge, "up"])
        Path(f"/proc/sys/net/ipv4/conf/{bridge}/forwarding").write_text("1\n")
        _drop_void_rules(network)  # a crashed run's, on this slot
        _run(["ip", "rule", "add", *_void_rule(network)])
    except (NodeError, OSError):
        release_network(network)
        raise
    return network


def _void_rule(network: dict[str, Any]) -> list[str]:
    """The routing rule (`ip rule add|del` + this) for a packet from the bridge to a
    ClusterIP that kube-proxy did not translate: a connection whose first packet came before
    kube-proxy had written a new Service's rules (its name already resolves) keeps going
    untranslated, retransmits and all (NAT is decided on a connection's first packet). Left to
    the main table it would leave this machine by its default route; "unreachable" answers
    at once, so the client's next connection is a new one, translated. Packets kube-proxy
    translated carry a pod's address by then (routing comes after its DNAT) and pass."""
    return ["iif", network["bridge"], "to", network["service_cidr"], "unreachable"]


def _drop_void_rules(network: dict[str, Any]) -> None:
    for _ in range(10):  # one, unless a crashed run left its own
        rule = ["ip", "rule", "del", *_void_rule(network)]
        if subprocess.run(rule, capture_output=True, check=False).returncode != 0:
            return


def release_network(network: dict[str, Any]) -> list[str]:
    """Remove the bridge `claim_network` made (its address and sysctl go with it) and its
    routing rule."""
    subprocess.run(["ip", "link", "del", network["bridge"]], capture_output=True, check=False)
    if network.get("service_cidr"):
        _drop_void_rules(network)
    return [f"bridge {network['bridge']} and its routing rule removed"]


def second_network(slot: int) -> dict[str, Any]:
    """The addresses of slot N's second node (pure): its network namespace `tfkube<N>b`,
    its pod /24 (198.19.(16+N).0/24; the bridge address is its node IP) and the /30 of the
    veth pair joining it to the machine (`tfkube<N>b` on the machine's side)."""
    subnet = list(SUBNET_BASE.subnets(new_prefix=24))[SECOND_OFFSET + slot]
    link = list(SUBNET_BASE.subnets(new_prefix=24))[LINK_OFFSET + slot]
    return {
        "slot": slot,
        "netns": f"tfkube{slot}b",
        "uplink": f"tfkube{slot}b",
        "bridge": SECOND_BRIDGE,
        "node_ip": str(subnet.network_address + 1),
        "subnet": str(subnet),
        "link_host": str(link.network_address + 1),
        "link_node": str(link.network_address + 2),
    }


def _in_netns(netns: str, argv: list[str]) -> list[str]:
    """`argv` run in a network namespace made by `ip netns add`. nsenter, not `ip netns
    exec`: the mount namespace stays the machine's, so the kubelet's volume mounts and
    containerd's pod network namespaces are seen by both (and by the test)."""
    return ["nsenter", f"--net=/run/netns/{netns}", *argv]


def claim_second_network(first: dict[str, Any]) -> dict[str, Any]:
    """The second node's own network: a network namespace with loopback, its CNI bridge
    holding the node IP, a veth pair to the machine; routes both ways between the two
    nodes' pod /24s through the machine (IPv4 forwarding on the new veth only; inside the
    namespace, which is its own, forwarding is on). The first node's subnet (its pods, the
    API server and CoreDNS on its bridge address) is the only destination the second node
    routes to the machine. Undone by `release_second_network` (also after a crash)."""
    net = second_network(first["slot"])
    ns, uplink = net["netns"], net["uplink"]
    proc = subprocess.run(["ip", "netns", "add", ns], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise NodeError(
            f"cannot create the network namespace {ns}: {proc.stderr.strip()} (a stale one "
            f"from a crashed run: `ip netns del {ns}`)"
        )
    inside = ["nsenter", f"--net=/run/netns/{ns}"]
    try:
        _run(["ip", "link", "add", uplink, "type", "veth", "peer", "name", f"{uplink}n"])
        _run(["ip", "link", "set", f"{uplink}n", "netns", ns])
        _run(["ip", "addr", "add", f"{net['link_host']}/30", "dev", uplink])
        _run(["ip", "link", "set", uplink, "up"])
        Path(f"/proc/sys/net/ipv4/conf/{uplink}/forwarding").write_text("1\n")
        # From the first node's address (the API server's): the service proxy's connections
        # to this node's pods come from the address NetworkPolicies allow it by.
        _run(["ip", "route", "add", net["subnet"], "via", net["link_node"], "dev", uplink,
              "src", first["node_ip"]])  # fmt: skip
        for argv in (
            ["ip", "link", "set", "lo", "up"],
            ["ip", "link", "set", f"{uplink}n", "name", "eth0"],
            ["ip", "addr", "add", f"{net['link_node']}/30", "dev", "eth0"],
            ["ip", "link", "set", "eth0", "up"],
            ["ip", "link", "add", SECOND_BRIDGE, "type", "bridge"],
            ["ip", "addr", "add", f"{net['node_ip']}/24", "dev", SECOND_BRIDGE],
            ["ip", "link", "set", SECOND_BRIDGE, "up"],
            ["ip", "route", "add", first["subnet"], "via", net["link_host"], "dev", "eth0"],
            # /proc/sys/net is the namespace's own for a process inside it
            ["sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"],
        ):
            _run([*inside, *argv])
    except (NodeError, OSError):
        release_second_network(net)
        raise
    return net


def release_second_network(network: dict[str, Any]) -> list[str]:
    """Remove the second node's network namespace (its bridge, iptables rules and the veth's
    inner end go with it) and the veth's outer end (its route goes with it)."""
    subprocess.run(["ip", "netns", "del", network["netns"]], capture_output=True, check=False)
    subprocess.run(["ip", "link", "del", network["uplink"]], capture_output=True, check=False)
    return [f"network namespace {network['netns']} and veth {network['uplink']} removed"]


def _cgroup_dirs(cgroup: str) -> list[Path]:
    """Our cgroup in every v1 hierarchy (and the v2 one, if mounted), deepest path last."""
    dirs = []
    for hierarchy in sorted(CGROUP_ROOT.iterdir()) if CGROUP_ROOT.is_dir() else []:
        if hierarchy.is_dir() and not hierarchy.is_symlink():
            dirs.append(hierarchy / cgroup.strip("/"))
    return dirs


def _make_cgroups(cgroup: str) -> None:
    for path in _cgroup_dirs(cgroup):
        path.mkdir(exist_ok=True)
        if path.parent.name == "cpuset":  # a v1 cpuset starts empty: copy the parent's
            for key in ("cpuset.cpus", "cpuset.mems"):
                (path / key).write_text((path.parent / key).read_text())


def _cgroup_pids(cgroup: str) -> set[int]:
    pids: set[int] = set()
    for top in _cgroup_dirs(cgroup):
        for procs in top.rglob("cgroup.procs") if top.is_dir() else []:
            with contextlib.suppress(OSError, ValueError):
                pids |= {int(p) for p in procs.read_text().split()}
    return pids


def _remove_cgroups(cgroup: str) -> list[str]:
    """Kill what is left in our cgroups (only pods of this node live there), then rmdir."""
    report = []
    for _ in range(50):
        pids = _cgroup_pids(cgroup)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    else:
        report.append(f"processes left in cgroup {cgroup}: {sorted(_cgroup_pids(cgroup))}")
    for top in _cgroup_dirs(cgroup):
        if not top.is_dir():
            continue
        for path in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                path.rmdir()
        try:
            top.rmdir()
        except OSError as exc:
            report.append(f"could not remove {top}: {exc}")
    return report


def _mounts_under(root: str) -> list[str]:
    out = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point == root or point.startswith(root.rstrip("/") + "/"):
                out.append(point)
    return sorted(set(out), key=lambda p: -len(p))


def _unmount_under(root: str) -> list[str]:
    report = []
    for _ in range(3):
        points = _mounts_under(root)
        if not points:
            return report
        for point in points:
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    left = _mounts_under(root)
    if left:
        report.append(f"mounts left under {root}: {left}")
    return report


def _shim_pids(socket: str) -> list[int]:
    """containerd-shim processes of *our* containerd: they name its socket in argv."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and b"containerd-shim" in argv[0] and socket.encode() in argv:
            pids.append(int(entry.name))
    return pids


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return resp.status == 200
    except urllib.error.HTTPError as exc:
        exc.close()
        return False
    except OSError:
        return False


class RealNode:
    """Starts and stops the real node of one cluster (see the module docstring)."""

    def __init__(
        self,
        cluster: Any,
        name_prefix: str = "tfkube-real",
        verbose: bool = False,
        second: bool = False,
    ) -> None:
        self.cluster = cluster  # cluster.Cluster: api(), _spawn(), _wait(), state, bin_dir
        self.kube = sys.modules[type(cluster).__module__]  # cluster.py's PKI helpers
        self.name_prefix = name_prefix
        self.verbose = verbose
        self.second = second  # the second node: own network namespace (see the docstring)
        self.state: NodeState | None = None

    def _save(self) -> None:
        """This node's state into the cluster's (its own key), and the state file."""
        key = "second_node" if self.second else "real_node"
        setattr(self.cluster.state, key, asdict(self.state) if self.state else None)
        self.cluster.save_state()

    def _log(self, msg: str) -> None:
        if self.verbose:
            print(f"kube: real node: {msg}", file=sys.stderr, flush=True)

    def _timed(self, what: str, fn: Callable[[], Any]) -> Any:
        t0 = time.monotonic()
        result = fn()
        assert self.state is not None
        self.state.timings[what] = round(time.monotonic() - t0, 2)
        self._log(f"{what}: {self.state.timings[what]:.1f}s")
        return result

    # ------------------------------------------------------------------ start
    def start(self, timeout: float = 300.0) -> NodeState:
        bin_dir = Path(self.cluster.bin_dir)
        missing = missing_parts(bin_dir)
        if missing:
            raise NodeError("the real node cannot start; missing: " + "; ".join(missing))
        if self.second:
            return self._start_second(bin_dir, timeout)
        other = _other_kube_proxy()
        if other:
            raise NodeError(
                f"another kube-proxy runs on this machine (pid {other}: another real-node "
                "cluster); its iptables chains are global: stop that cluster first "
                "(`make kube-down`)"
            )
        t0 = time.monotonic()
        owned = self.cluster.state.network is None
        network = claim_network(self.kube.SERVICE_CIDR) if owned else self.cluster.state.network
        slot, node_ip = network["slot"], network["node_ip"]
        workdir = Path(self.cluster.state.workdir) / "real-node"
        workdir.mkdir(parents=True, exist_ok=True)
        self.state = NodeState(
            name=f"{self.name_prefix}-{slot}",
            slot=slot,
            bridge=network["bridge"],
            node_ip=node_ip,
            subnet=network["subnet"],
            owns_bridge=owned,
            service_cidr=self.kube.SERVICE_CIDR,
            dir=str(workdir),
            cgroup=f"/tfkube-{slot}",
            containerd_socket=str(workdir / "containerd" / "containerd.sock"),
            volumes_dir=str(workdir / "volumes"),
            created_dirs=[d for d in FIXED_DIRS if not os.path.lexists(d)],
        )
        self.cluster.state.real_node = asdict(self.state)
        self.cluster.save_state()
        try:
            self._start(bin_dir, workdir, timeout)
        except BaseException:
            self.cluster.state.real_node = asdict(self.state)
            raise
        self.state.timings["total"] = round(time.monotonic() - t0, 2)
        self.cluster.state.real_node = asdict(self.state)
        self._log(f"{self.state.name} Ready at {node_ip} in {self.state.timings['total']:.1f}s")
        return self.state

    def _start_second(self, bin_dir: Path, timeout: float) -> NodeState:
        """The second node of the cluster's slot, beside the first (which must run): its
        containerd, kubelet and kube-proxy in a network namespace of their own, its pods on
        their own /24; CoreDNS, metrics-server and the API server are the first node's."""
        first_raw = self.cluster.state.real_node
        if not first_raw:
            raise NodeError("the second real node joins a running first one: start that first")
        first = NodeState(**first_raw)
        t0 = time.monotonic()
        workdir = Path(self.cluster.state.workdir) / "real-node-b"
        workdir.mkdir(parents=True, exist_ok=True)
        net = second_network(first.slot)
        self.state = NodeState(
            name=f"{self.name_prefix}-{first.slot}b",
            slot=first.slot,
            bridge=net["bridge"],
            node_ip=net["node_ip"],
            subnet=net["subnet"],
            owns_bridge=False,  # it lives in the namespace: gone with it
            service_cidr=self.kube.SERVICE_CIDR,
            dir=str(workdir),
            cgroup=f"/tfkube-{first.slot}b",
            containerd_socket=str(workdir / "containerd" / "containerd.sock"),
            volumes_dir=str(workdir / "volumes"),
            created_dirs=[d for d in FIXED_DIRS if not os.path.lexists(d)],
            netns=net["netns"],
            uplink=net["uplink"],
            dns_ip=first.node_ip,
            routes=[first.subnet],
        )
        self._save()  # before the namespace exists: stop() removes a half-made one too
        try:
            self._timed("network namespace", lambda: claim_second_network(asdict(first)))
            # The first node's pods reach this node's through the machine from now on
            # (containerd reloads the CNI configuration when its file changes).
            set_routes(self.cluster.state.real_node, [self.state.subnet])
            self.cluster.save_state()
            self._start(bin_dir, workdir, timeout)
        except BaseException:
            self._save()
            raise
        self.state.timings["total"] = round(time.monotonic() - t0, 2)
        self._save()
        self._log(f"{self.state.name} Ready at {self.state.node_ip} in "
                  f"{self.state.timings['total']:.1f}s")  # fmt: skip
        return self.state

    def _spawn(self, name: str, argv: list[str]) -> Any:
        assert self.state is not None
        if self.state.netns:  # the second node: its own log names, in its namespace
            name, argv = f"{name}-b", _in_netns(self.state.netns, argv)
        proc = self.cluster._spawn(name, argv, track=False)  # stopped by stop(), in order
        self.state.procs.append(asdict(proc))
        self._save()
        return proc

    def _start(self, bin_dir: Path, workdir: Path, timeout: float) -> None:
        st = self.state
        assert st is not None
        kube_state = self.cluster.state
        pki = Path(kube_state.workdir) / "pki"
        _make_cgroups(st.cgroup)
        images = _sibling("images")
        pause, tensorflow, own, postgres = images.images(bin_dir)
        if not own.present():  # tfkube's source changed: its own layer, in seconds
            self._timed("build tfkube image", lambda: images.build_tfkube(own, tensorflow))

        # containerd
        cd = workdir / "containerd"
        cd.mkdir(parents=True, exist_ok=True)
        cni_conf = workdir / "cni" / "net.d"
        cni_conf.mkdir(parents=True, exist_ok=True)
        (cni_conf / "10-tfkube.conflist").write_text(json.dumps(cni_config(st, workdir), indent=2))
        config = cd / "config.toml"
        config.write_text(containerd_config(cd, cni_conf, pause.name))
        containerd = self._spawn("containerd", [CONTAINERD, "--config", str(config)])
        ctr = [CTR, "--address", st.containerd_socket, "--namespace", "k8s.io"]
        self.cluster._wait(
            "containerd",
            lambda: (
                subprocess.run([*ctr, "version"], capture_output=True, check=False).returncode == 0
            ),
            containerd,
            60,
        )

        # CoreDNS (its own copy of the admin kubeconfig; the kubernetes plugin watches the API);
        # one for the cluster: the second node's pods use the first's
        coredns = None
        if not self.second:
            corefile = workdir / "Corefile"
            corefile.write_text(corefile_text(st, kube_state.kubeconfig))
            coredns = self._spawn("coredns", [str(bin_dir / "coredns"), "-conf", str(corefile)])

        # images: the pause image first (every sandbox needs it), then TensorFlow and
        # tfkube's in one stream (they share the TensorFlow layer: it is sent once), and
        # PostgreSQL's (the server's database in a pod: `install --database postgres`)
        self._timed("import pause image", lambda: images.import_image(ctr, pause))
        self._timed(
            "import tensorflow, tfkube and postgres images",
            lambda: images.import_images(ctr, [tensorflow, own, postgres]),
        )
        if coredns is not None:
            self.cluster._wait(
                "CoreDNS ready",
                lambda: _http_ok(f"http://{st.node_ip}:{READY_PORT}/ready"),
                coredns,
                60,
            )

        # kubelet: a client certificate as system:node:<name> (Node authorizer + RBAC)
        kdir = workdir / "kubelet"
        kdir.mkdir(parents=True, exist_ok=True)
        self.kube.make_client_cert(pki, kdir / "client", f"system:node:{st.name}", "system:nodes")
        kubeconfig = kdir / "kubeconfig"
        self.kube.write_cert_kubeconfig(
            kubeconfig,
            kube_state.server,
            kube_state.ca_file,
            kdir / "client.crt",
            kdir / "client.key",
            f"system:node:{st.name}",
        )
        (kdir / "resolv.conf").write_text(f"nameserver {st.dns_ip or st.node_ip}\n")
        # Its serving certificate from the cluster CA (not self-signed): metrics-server
        # verifies it (--kubelet-certificate-authority).
        self.kube.make_serving_cert(pki, kdir / "serving", st.name, (st.node_ip,), (st.name,))
        kcfg = kdir / "config.yaml"
        kcfg.write_text(json.dumps(kubelet_config(st, kdir, pki / "ca.crt"), indent=2))
        kubelet = self._spawn(
            "kubelet",
            [
                str(bin_dir / "kubelet"),
                f"--config={kcfg}",
                f"--kubeconfig={kubeconfig}",
                f"--hostname-override={st.name}",
                f"--node-ip={st.node_ip}",
                f"--root-dir={kdir / 'root'}",
                f"--cert-dir={kdir / 'pki'}",
                f"--node-labels={NODE_LABEL}=true",
                "--v=1",
            ],
        )
        self._timed(
            "kubelet Ready",
            lambda: self.cluster._wait(
                f"node {st.name} Ready", lambda: self._ready(st.name), kubelet, timeout
            ),
        )

        # kube-proxy (iptables mode) as system:kube-proxy (bootstrap RBAC: system:node-proxier)
        pdir = workdir / "kube-proxy"
        pkubeconfig = self._client(pki, pdir, "system:kube-proxy", "system:node-proxier")
        if not st.netns:  # the second node's namespace is new: nothing stale in it
            stale = _run(["iptables", "-t", "nat", "-S", "KUBE-SERVICES"], check=False)
            if stale:  # a crashed run's rules (no other kube-proxy runs: checked above)
                _run([str(bin_dir / "kube-proxy"), "--cleanup"], check=False)
        pcfg = pdir / "config.yaml"
        pcfg.write_text(json.dumps(kube_proxy_config(st, pkubeconfig), indent=2))
        proxy = self._spawn(
            "kube-proxy",
            [str(bin_dir / "kube-proxy"), f"--config={pcfg}", "--v=1"],
        )
        self._timed(
            "kube-proxy synced",
            lambda: self.cluster._wait(
                "kube-proxy /healthz",
                lambda: _http_ok(f"http://{st.node_ip}:{KUBE_PROXY_HEALTHZ_PORT}/healthz"),
                proxy,
                60,
            ),
        )

        self._timed("kube-router synced", lambda: self._kube_router(bin_dir, workdir, pki))

        if not self.second:  # one for the cluster: it scrapes every real node's kubelet
            self._timed(
                "metrics-server", lambda: self._metrics_server(bin_dir, workdir, pki, timeout)
            )

    def _kube_router(self, bin_dir: Path, workdir: Path, pki: Path) -> None:
        """kube-router's network policy controller for this node (its own iptables chains
        KUBE-ROUTER-* and ipsets in the node's network namespace): a pod selected by a
        NetworkPolicy accepts only what one allows; traffic from the node itself always
        (the kubelet's probes). Its identity: a test cluster's component (system:masters,
        as metrics-server's)."""
        st = self.state
        assert st is not None
        rdir = workdir / "kube-router"
        kubeconfig = self._client(pki, rdir, "tfkube-kube-router", "system:masters")
        if not st.netns:  # a crashed run's chains and sets (one real-node cluster at a time)
            remove_kube_router_rules()
        port = self.kube.free_port()
        proc = self._spawn(
            "kube-router",
            [
                str(bin_dir / "kube-router"),
                f"--kubeconfig={kubeconfig}",
                "--run-firewall=true",
                "--run-router=false",
                "--run-service-proxy=false",
                f"--hostname-override={st.name}",
                f"--service-cluster-ip-range={st.service_cidr}",
                f"--health-port={port}",
                "--v=1",
            ],
        )
        self.cluster._wait(
            "kube-router /healthz",
            lambda: _http_ok(f"http://{st.node_ip}:{port}/healthz") and _has_chain(st.netns),
            proc,
            60,
        )

    def _metrics_server(self, bin_dir: Path, workdir: Path, pki: Path, timeout: float) -> None:
        """metrics-server v0.8.0 (built from its Go module) as a host process on the bridge
        address, registered as the aggregated API metrics.k8s.io/v1beta1 (`metrics_objects`):
        `kubectl top pods` and tfkube's server read the kubelet's resource metrics there.
        It scrapes only nodes labelled NODE_LABEL (KWOK's fake nodes' addresses are never
        dialled) and verifies the kubelet's serving certificate with the cluster CA."""
        st = self.state
        assert st is not None
        kube_state = self.cluster.state
        mdir = workdir / "metrics-server"
        # Its client identity towards the API server and the kubelet (a test cluster's
        # component: system:masters, like the admin token).
        kubeconfig = self._client(pki, mdir, "tfkube-metrics-server", "system:masters")
        self.kube.make_serving_cert(
            pki, mdir / "serving", METRICS_SERVICE, (st.node_ip,), (METRICS_SERVICE_DNS,)
        )
        port = self.kube.free_port()
        proc = self._spawn(
            "metrics-server",
            [
                str(bin_dir / "metrics-server"),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--bind-address={st.node_ip}",
                f"--secure-port={port}",
                f"--tls-cert-file={mdir / 'serving.crt'}",
                f"--tls-private-key-file={mdir / 'serving.key'}",
                f"--kubelet-certificate-authority={pki / 'ca.crt'}",
                "--kubelet-preferred-address-types=InternalIP",
                "--kubelet-use-node-status-port",
                f"--node-selector={NODE_LABEL}=true",
                f"--metric-resolution={METRIC_RESOLUTION}",
                "--kubelet-request-timeout=5s",  # below the resolution (its own check)
                "--v=1",
            ],
        )
        ca = Path(kube_state.ca_file).read_bytes()
        for path, obj in metrics_objects(st.node_ip, port, ca):
            self.cluster.api("POST", path, obj)
        self.cluster._wait(
            "metrics.k8s.io available",
            lambda: self._api_available(METRICS_APISERVICE),
            proc,
            timeout,
        )

    def _client(self, pki: Path, folder: Path, user: str, group: str) -> Path:
        """`<folder>/kubeconfig` with a client certificate for `user` in `group`."""
        folder.mkdir(parents=True, exist_ok=True)
        self.kube.make_client_cert(pki, folder / "client", user, group)
        kubeconfig = folder / "kubeconfig"
        state = self.cluster.state
        self.kube.write_cert_kubeconfig(
            kubeconfig, state.server, state.ca_file, folder / "client.crt",
            folder / "client.key", user,
        )  # fmt: skip
        return kubeconfig

    def _api_available(self, name: str) -> bool:
        try:
            found = self.cluster.api("GET", f"/apis/apiregistration.k8s.io/v1/apiservices/{name}")
        except OSError:
            return False
        conds = {c["type"]: c["status"] for c in found.get("status", {}).get("conditions", [])}
        return conds.get("Available") == "True"

    def _ready(self, name: str) -> bool:
        try:
            node = self.cluster.api("GET", f"/api/v1/nodes/{name}")
        except OSError:
            return False
        conds = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
        return conds.get("Ready") == "True"

    # ------------------------------------------------------------------ volumes
    def bind_claims(self, namespace: str, claims: list[str], size: str = "10Gi") -> list[str]:
        """Pre-bound hostPath PersistentVolumes on this node for `claims` in `namespace`
        (there is no provisioner): the data and logs claims `render` creates bind to them,
        and what a pod writes there outlives the pod. Returns the PV names."""
        assert self.state is not None
        return bind_claims(self.cluster.api, self.state, namespace, claims, size)


def bind_claims(
    api: Callable[..., dict[str, Any]],
    st: NodeState,
    namespace: str,
    claims: list[str],
    size: str = "10Gi",
    nodes: list[str] | None = None,
) -> list[str]:
    """`nodes`: the nodes whose pods may mount them (default: `st`'s alone). Every real node
    of a cluster runs on this machine, so one folder serves them all: a checkpoint written
    on one node is read on the other."""
    names = []
    for claim in claims:
        name = f"{st.name}-{namespace}-{claim}"[:253]
        path = Path(st.volumes_dir) / namespace / claim
        # Writable by the pods' user (65532: tfkube renders restricted pods), as a share
        # an administrator sets up: a hostPath volume gets no fsGroup from the kubelet,
        # which would otherwise make it root's alone (0755).
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o777)
        api(
            "POST",
            "/api/v1/persistentvolumes",
            hostpath_volume(name, path, nodes or [st.name], namespace, claim, size),
        )
        names.append(name)
    return names


def hostpath_volume(
    name: str, path: Path, nodes: list[str], namespace: str, claim: str, size: str
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {NODE_LABEL: "true"}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteMany", "ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": str(path), "type": "DirectoryOrCreate"},
            "claimRef": {"namespace": namespace, "name": claim},
            # The files live on these nodes: the scheduler sends the claim's pods there.
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "kubernetes.io/hostname",
                                    "operator": "In",
                                    "values": list(nodes),
                                }
                            ]
                        }
                    ]
                }
            },
        },
    }


# ---------------------------------------------------------------------- configuration (pure)


def metrics_objects(node_ip: str, port: int, ca: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(API path, object) to create: the Service without a selector, its EndpointSlice (the
    host process on the bridge address) and the APIService that sends metrics.k8s.io
    there, trusting its certificate through the cluster CA."""
    ns = METRICS_NAMESPACE
    port_spec = {"name": "https", "port": 443, "targetPort": port, "protocol": "TCP"}
    return [
        (
            f"/api/v1/namespaces/{ns}/services",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": METRICS_SERVICE, "namespace": ns},
                "spec": {"ports": [port_spec]},
            },
        ),
        (
            f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": METRICS_SERVICE,
                    "namespace": ns,
                    "labels": {"kubernetes.io/service-name": METRICS_SERVICE},
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": [node_ip], "conditions": {"ready": True}}],
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            },
        ),
        (
            "/apis/apiregistration.k8s.io/v1/apiservices",
            {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": METRICS_APISERVICE},
                "spec": {
                    "group": "metrics.k8s.io",
                    "version": "v1beta1",
                    "service": {"namespace": ns, "name": METRICS_SERVICE, "port": 443},
                    "caBundle": base64.b64encode(ca).decode(),
                    "groupPriorityMinimum": 100,
                    "versionPriority": 100,
                },
            },
        ),
    ]


def cni_config(st: NodeState, workdir: Path) -> dict[str, Any]:
    """Bridge + host-local on the slot's /24. No default route, no masquerade: pods reach
    each other and the node address on the bridge, and the service range (ClusterIPs) through
    the node address, where kube-proxy's rules translate them; nothing else."""
    net = ipaddress.ip_network(st.subnet)
    routes = [{"dst": st.service_cidr, "gw": st.node_ip}] if st.service_cidr else []
    routes += [{"dst": dst, "gw": st.node_ip} for dst in st.routes]  # the other node's pods
    return {
        "cniVersion": "1.0.0",
        "name": "tfkube",
        "plugins": [
            {
                "type": "bridge",
                "bridge": st.bridge,
                "isGateway": False,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [
                        [
                            {
                                "subnet": str(net),
                                "rangeStart": str(net.network_address + 10),
                                "rangeEnd": str(net.broadcast_address - 1),
                            }
                        ]
                    ],
                    "routes": routes,
                    "dataDir": str(workdir / "cni" / "ipam"),
                },
            }
        ],
    }


def containerd_config(root: Path, cni_conf: Path, sandbox_image: str) -> str:
    """containerd 1.6 (config version 2): everything under `root`; CRI with runc (cgroupfs),
    `restrict_oom_score_adj` (runc cannot set -998 without CAP_SYS_RESOURCE here), CNI from
    Debian's plugins, network namespaces under the state dir, our pause image."""
    return f"""version = 2
root = "{root / "root"}"
state = "{root / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{root / "containerd.sock"}"

[ttrpc]
  address = "{root / "containerd.sock.ttrpc"}"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{root / "opt"}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{RUNC}"
        Root = "{root / "state" / "runc"}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{cni_conf}"
    max_conf_num = 1
"""


def corefile_text(st: NodeState, kubeconfig: str) -> str:
    """Zone cluster.local only, served on the node address: `<pod>.<service>.<ns>.svc` and
    Service names resolve; anything else is NXDOMAIN (no upstream: pods have no route out).
    `ready` tells start() when the kubernetes plugin has synced with the API. The CoreDNS
    built here links only the plugins used here (tools/kube/coredns/main.go): one more
    here needs its import there."""
    return f"""{CLUSTER_DOMAIN}:53 in-addr.arpa:53 {{
    bind {st.node_ip}
    errors
    ready {st.node_ip}:{READY_PORT}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        ttl 5
    }}
    cache 5
}}
.:53 {{
    bind {st.node_ip}
    errors
    template ANY ANY {{
        rcode NXDOMAIN
    }}
}}
"""


def kubelet_config(st: NodeState, kdir: Path, client_ca: Path) -> dict[str, Any]:
    """The kubelet's configuration. The API server authenticates to it with its kubelet client
    certificate (signed by the cluster CA) and is authorized by a SubjectAccessReview;
    anonymous requests are refused, so pods on the bridge cannot use the kubelet API."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": st.node_ip,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": st.node_ip,
        "healthzPort": HEALTHZ_PORT,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "tlsCertFile": str(kdir / "serving.crt"),
        "tlsPrivateKeyFile": str(kdir / "serving.key"),
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{st.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": st.cgroup,
        "failCgroupV1": False,
        "failSwapOn": False,
        "clusterDNS": [st.dns_ip or st.node_ip],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": str(kdir / "resolv.conf"),
        "podLogsDir": str(kdir / "pod-logs"),
        "volumePluginDir": str(kdir / "volume-plugins"),
        "registerWithTaints": [NODE_TAINT, *([SECOND_NODE_TAINT] if st.netns else [])],
        "serializeImagePulls": False,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        # The machine's disk is shared; evict only when it is really full.
        "evictionHard": {
            "memory.available": "200Mi",
            "nodefs.available": "2%",
            "imagefs.available": "2%",
        },
        "nodeStatusUpdateFrequency": "5s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
        "makeIPTablesUtilChains": False,  # kube-proxy makes its own chains
        "shutdownGracePeriod": "0s",
        "maxPods": 60,
        "logging": {"format": "text"},
    }


def kube_proxy_config(st: NodeState, kubeconfig: Path) -> dict[str, Any]:
    """kube-proxy in iptables mode for this node only: it listens on the node address; pods
    of the node's /24 are local (masqueraded only when a pod reaches itself); NodePorts on
    the node address only, never on loopback (no `route_localnet`); the machine's conntrack
    settings are left as they are (zero values: do not touch)."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": st.name,
        "mode": "iptables",
        "bindAddress": st.node_ip,
        "healthzBindAddress": f"{st.node_ip}:{KUBE_PROXY_HEALTHZ_PORT}",
        "metricsBindAddress": f"{st.node_ip}:{KUBE_PROXY_METRICS_PORT}",
        "clusterCIDR": st.subnet,
        "detectLocalMode": "ClusterCIDR",
        "nodePortAddresses": [st.subnet],
        "iptables": {
            "localhostNodePorts": False,
            "masqueradeAll": False,
            "syncPeriod": "30s",
            "minSyncPeriod": "0s",
        },
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        "logging": {"format": "text"},
    }


def _has_chain(netns: str, chain: str = "KUBE-ROUTER-FORWARD") -> bool:
    """Whether kube-router's filter chain exists in the node's network namespace (its
    first sync is done)."""
    argv = _in_netns(netns, ["iptables", "-S", chain]) if netns else ["iptables", "-S", chain]
    return subprocess.run(argv, capture_output=True, check=False).returncode == 0


def _other_kube_proxy() -> int | None:
    """The PID of a kube-proxy already running in this machine's network namespace, if any
    (a second node's runs in a namespace of its own, with iptables of its own)."""
    own = os.readlink("/proc/self/ns/net")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv0 = (entry / "cmdline").read_bytes().split(b"\0")[0]
            proxy = argv0.endswith(b"/kube-proxy") or argv0 == b"kube-proxy"
            if proxy and os.readlink(entry / "ns" / "net") == own:
                return int(entry.name)
    return None


def set_routes(raw: dict[str, Any], routes: list[str]) -> None:
    """Route `routes` (the other node's pod /24) via this node's address in its pods:
    updates the saved state `raw` in place and rewrites the node's CNI configuration
    (containerd reloads it when the file changes; pods made before keep their routes)."""
    raw["routes"] = list(routes)
    st = NodeState(**raw)
    conf = Path(st.dir) / "cni" / "net.d" / "10-tfkube.conflist"
    if not conf.parent.is_dir():
        return
    tmp = conf.with_name("10-tfkube.tmp")  # not a CNI file name: never read half-written
    tmp.write_text(json.dumps(cni_config(st, Path(st.dir)), indent=2))
    tmp.replace(conf)


# ---------------------------------------------------------------------- stop


def _drain(api: Callable[..., dict[str, Any]], name: str) -> None:
    """Cordon the node and delete its pods, so the kubelet tears their sandboxes down (CNI
    DEL, unmounts) itself; what it does not finish in time, stop() removes by force."""
    with contextlib.suppress(OSError):
        api(
            "PATCH",
            f"/api/v1/nodes/{name}",
            {"spec": {"unschedulable": True}},
            content_type="application/merge-patch+json",
        )
    with contextlib.suppress(OSError):
        pods = api("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{name}").get("items", [])
        for pod in pods:
            meta = pod["metadata"]
            with contextlib.suppress(OSError):
                api(
                    "DELETE",
                    f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                    {"gracePeriodSeconds": 0},
                )


KUBELET_CHAINS = ("KUBE-FIREWALL",)
"""The chains the kubelet makes in the filter table (jumped to from INPUT and OUTPUT)."""


def _remove_kubelet_chains() -> list[str]:
    """The kubelet's own iptables chains, once it has stopped: each is removed with the
    jumps to it when it holds no rule (one with rules is not ours to judge: left, said)."""
    report = []
    for chain in KUBELET_CHAINS:
        listed = subprocess.run(["iptables", "-S", chain], capture_output=True, text=True,
                                check=False)  # fmt: skip
        if listed.returncode != 0:
            continue
        if [line for line in listed.stdout.splitlines() if not line.startswith("-N ")]:
            report.append(f"iptables chain {chain} has rules: left")
            continue
        for hook in ("INPUT", "OUTPUT"):
            while subprocess.run(["iptables", "-D", hook, "-j", chain], capture_output=True,
                                 check=False).returncode == 0:  # fmt: skip
                pass
        subprocess.run(["iptables", "-X", chain], capture_output=True, check=False)
        report.append(f"the kubelet's iptables chain {chain} removed")
    return report


KUBE_ROUTER_CHAINS = ("KUBE-ROUTER-", "KUBE-NWPLCY-", "KUBE-POD-FW-")
"""Prefixes of the filter chains kube-router's network policy controller makes (kube-proxy's
are KUBE-* too, never these)."""
KUBE_ROUTER_SETS = ("KUBE-SRC-", "KUBE-DST-")
"""Prefixes of its ipsets (a policy's sources and destinations)."""
KUBE_ROUTER_JUMP = "kube-router netpol"
"""The comment on its jumps from INPUT, FORWARD and OUTPUT."""


def remove_kube_router_rules() -> list[str]:
    """kube-router's chains, the jumps to them and its ipsets in this network namespace,
    once it has stopped (ours: its own `--cleanup-config` panics in v2.1.0 after a partial
    cleanup). Idempotent: nothing of it, nothing done."""

    def ours() -> tuple[list[str], list[str], list[str]]:
        rules = _run(["iptables", "-S"], check=False).splitlines()
        jumps = [r for r in rules if r.startswith("-A ") and KUBE_ROUTER_JUMP in r]
        made = [r.split()[1] for r in rules if r.startswith("-N ")]
        sets = _run([IPSET, "list", "-n"], check=False).split()
        return (
            jumps,
            [c for c in made if c.startswith(KUBE_ROUTER_CHAINS)],
            [n for n in sets if n.startswith(KUBE_ROUTER_SETS)],
        )

    jumps, chains, sets = ours()
    if not (jumps or chains or sets):
        return []
    for rule in jumps:  # shlex: the comment is quoted
        _run(["iptables", "-D", *shlex.split(rule)[1:]], check=False)
    for flag in ("-F", "-X"):  # every chain emptied first: they jump to each other
        for chain in chains:
            _run(["iptables", flag, chain], check=False)
    for name in sets:
        _run([IPSET, "destroy", name], check=False)
    if any(ours()):
        return ["kube-router's iptables chains or ipsets could not all be removed: left"]
    return [f"kube-router's {len(chains)} iptables chains and {len(sets)} ipsets removed"]


def power_off(raw: dict[str, Any], is_ours: Callable[[Any], bool], proc_type: type) -> list[str]:
    """A node as a machine that lost its power: SIGKILL its kubelet, kube-proxy,
    kube-router and containerd (the PIDs it started, if still theirs), every process in its
    cgroups (its pods' containers) and its containerd's shims. Nothing tells the API
    server: the node stops renewing its Lease and the node lifecycle controller finds it
    NotReady. Its state is kept, so `stop` removes the rest afterwards."""
    st = NodeState(**raw)
    report = []
    for proc in (proc_type(**p) for p in st.procs):
        if proc.name.removesuffix("-b") in ("kubelet", "kube-proxy", "kube-router") and is_ours(
            proc
        ):
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            report.append(f"{proc.name} (pid {proc.pid}) killed")
    for pid in _cgroup_pids(st.cgroup) | set(_shim_pids(st.containerd_socket)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for proc in (proc_type(**p) for p in st.procs):
        if proc.name.removesuffix("-b") == "containerd" and is_ours(proc):
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            report.append(f"{proc.name} (pid {proc.pid}) killed")
    return report


def _alive(pid: int, start_ticks: int) -> bool:
    """Whether `pid` still runs the process started at `start_ticks` (not a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[0] != "Z" and int(fields[19]) == start_ticks


def _tasks(ctr: list[str]) -> list[str]:
    proc = subprocess.run(
        [*ctr, "tasks", "ls", "-q"], capture_output=True, text=True, check=False, timeout=30
    )
    return proc.stdout.split() if proc.returncode == 0 else []


def stop(
    raw: dict[str, Any],
    stop_procs: Callable[[list[Any]], list[str]],
    proc_type: type,
    api: Callable[..., dict[str, Any]] | None,
    drain_timeout: float = 30.0,
) -> list[str]:
    """Undo everything `RealNode.start` did, from its saved state (also after a crash):
    drain through the API if it still answers, stop kubelet and CoreDNS by PID, remove the
    containers containerd still has, stop its shims and containerd by PID, kill anything
    left in the node's cgroups, unmount, remove the cgroups, the bridge and the log links."""
    st = NodeState(**raw)
    report: list[str] = []
    procs = [proc_type(**p) for p in st.procs]
    by_name = {p.name.removesuffix("-b"): p for p in procs}  # the second node's: <name>-b
    ctr = [CTR, "--address", st.containerd_socket, "--namespace", "k8s.io"]
    containerd_up = (  # not after power_off: ctr would wait on a dead socket
        Path(st.containerd_socket).exists()
        and "containerd" in by_name
        and _alive(by_name["containerd"].pid, by_name["containerd"].start_ticks)
    )
    if api is not None:
        # An aggregated API that no longer answers fails discovery, and with it namespace
        # deletion: its APIService, Service and EndpointSlice go before metrics-server.
        for path in (
            f"/apis/apiregistration.k8s.io/v1/apiservices/{METRICS_APISERVICE}",
            f"/apis/discovery.k8s.io/v1/namespaces/{METRICS_NAMESPACE}/endpointslices/"
            f"{METRICS_SERVICE}",
            f"/api/v1/namespaces/{METRICS_NAMESPACE}/services/{METRICS_SERVICE}",
        ):
            with contextlib.suppress(OSError):
                api("DELETE", path)
    if api is not None and "kubelet" in by_name:
        _drain(api, st.name)
        deadline = time.monotonic() + drain_timeout
        while containerd_up and _tasks(ctr) and time.monotonic() < deadline:
            time.sleep(0.5)
    report += stop_procs([p for p in procs if p is not by_name.get("containerd")])
    if "kube-proxy" in by_name and not st.netns:  # its iptables chains and rules (KUBE-*)
        cleanup = subprocess.run(
            [by_name["kube-proxy"].exe, "--cleanup"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        left = subprocess.run(
            ["iptables", "-t", "nat", "-S", "KUBE-SERVICES"], capture_output=True, check=False
        )
        if left.returncode == 0:
            report.append(f"kube-proxy --cleanup left KUBE-SERVICES: {cleanup.stderr[-500:]}")
        else:
            report.append("kube-proxy's iptables rules removed")
    if "kube-router" in by_name and not st.netns:  # the namespace's go with it
        report += remove_kube_router_rules()
    if "kubelet" in by_name and not st.netns:  # the namespace's go with it
        report += _remove_kubelet_chains()
    if containerd_up:
        for task in _tasks(ctr):
            subprocess.run(
                [*ctr, "tasks", "kill", "--signal", "SIGKILL", task],
                capture_output=True,
                check=False,
                timeout=30,
            )
        deadline = time.monotonic() + 10
        while _tasks(ctr) and time.monotonic() < deadline:
            for task in _tasks(ctr):
                subprocess.run(
                    [*ctr, "tasks", "delete", "--force", task],
                    capture_output=True,
                    check=False,
                    timeout=30,
                )
            time.sleep(0.2)
        listed = subprocess.run(
            [*ctr, "containers", "ls", "-q"],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        for cid in listed.stdout.split():
            subprocess.run(
                [*ctr, "containers", "delete", cid], capture_output=True, check=False, timeout=30
            )
    for pid in _shim_pids(st.containerd_socket):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        report.append(f"containerd-shim (pid {pid}) killed")
    report += _remove_cgroups(st.cgroup)
    report += stop_procs([p for p in procs if p is by_name.get("containerd")])
    report += _unmount_under(st.dir)
    if st.netns:  # the second node: its namespace (bridge, rules, routes) and veth
        report += release_second_network({"netns": st.netns, "uplink": st.uplink})
    elif st.owns_bridge:  # else the cluster removes it after the API server (release_network)
        subprocess.run(["ip", "link", "del", st.bridge], capture_output=True, check=False)
        report.append(f"bridge {st.bridge} removed")
    pod_logs = str(Path(st.dir) / "kubelet" / "pod-logs")
    if CONTAINER_LOGS.is_dir():
        for link in CONTAINER_LOGS.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and os.readlink(link).startswith(pod_logs):
                    link.unlink()
    if api is not None:
        with contextlib.suppress(OSError):
            api("DELETE", f"/api/v1/nodes/{st.name}")
        with contextlib.suppress(OSError):
            for pv in api("GET", f"/api/v1/persistentvolumes?labelSelector={NODE_LABEL}%3Dtrue")[
                "items"
            ]:
                if pv["spec"].get("hostPath", {}).get("path", "").startswith(st.volumes_dir):
                    api("DELETE", f"/api/v1/persistentvolumes/{pv['metadata']['name']}")
    shutil.rmtree(st.dir, ignore_errors=True)
    for path in st.created_dirs:  # deepest first (FIXED_DIRS order); only if empty
        with contextlib.suppress(OSError):
            os.rmdir(path)
    return report
