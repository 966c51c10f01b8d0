"""One team's pods cannot open a connection to another team's pods in a cluster, nor to
an address the site denies them (by default the clouds' metadata services).

The attack: a TensorFlow server (a PS, a worker) runs whatever graph a peer sends it, with
no authentication, so whoever reaches a job's port reads and overwrites its variables. On
Kubernetes every pod could reach every other pod: a member of team B submits a job whose
code connects to team A's replica by its pod IP. Now each team namespace holds tfkube's
NetworkPolicy `tfkube-tenant` (`tfkube.render.TenantNetwork`): its pods accept connections
only from the namespace's own pods, tfkube's namespace and the API server's addresses.

The platform of tests/cluster/test_real_node_serving.py (`tfkube server --engine
kubernetes` with the `tfkube-server` ServiceAccount's RBAC, the operator, jobs in real pods
on the real node), where kube-router's network policy controller enforces NetworkPolicy
(tools/kube/realnode.py). Team A runs a replica listening on a port; team B's job and then
another of team A's try to connect to it for PROBE_SECONDS. Team A's gets in, team B's never
does, and the listener never saw team B's pod. On the code before the policy, team B's
probe got in (the test fails there). The probes try for a while because a pod's address
joins the policy's sets a moment after the pod starts (kube-router syncs on pod events),
as with every policy plugin; a refused first attempt is retried.

The second attack: in a cloud, a pod that reaches the instance metadata service
(169.254.169.254) gets the node's cloud credentials, and with them what every team's jobs
can read. The team's policy allows every destination but the denied ones (`tfkube server
--kube-egress-deny`, by default the metadata services). Here the platform's server denies
the metadata address and `denied`, an address of this machine standing for it, with
`allowed` beside it (`outside`: the node's pod subnet's .2 and .3, which its pods reach on
the bridge and its address manager never hands out; the test network has no default
route): a team's job reaches `allowed`'s listener and never `denied`'s. On the code before
egress was limited, it reached `denied` (the test fails there).
"""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from cluster._support import (
    KubeCluster,
    Operator,
    RealNode,
    one_worker_job,
    upload_code,
    wait_for,
)
from cluster.test_real_node_serving import JOB_TIMEOUT, Team, delete_namespace, node_platform
from server._server import Api, api_for

DENIED, ALLOWED = 2, 3
"""The egress test's addresses, as offsets in the real node's pod subnet (its pods get .10
and up): the first stands for a metadata service the server denies, the second for any
other address outside the cluster."""
EGRESS_SECONDS = 20
"""How long the egress tries run (one every half second)."""
WINDOW_LIMIT = 10.0
"""The most seconds a new pod may go unfiltered before the plugin programs it."""
PORT = 7000
PROBE_SECONDS = 15
LISTEN_SECONDS = 300
LISTEN = f"""\
import socket, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", {PORT}))
s.listen()
s.settimeout(1.0)
print("listening", flush=True)
deadline = time.time() + {LISTEN_SECONDS}
while time.time() < deadline:
    try:
        conn, peer = s.accept()
    except socket.timeout:
        continue
    said = conn.recv(16)
    conn.close()
    print("accepted", peer[0], said.decode(errors="replace"), flush=True)
"""
PROBE = """\
import socket, sys, time
host, port, seconds, word = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
deadline, seen = time.time() + seconds, []
while time.time() < deadline:
    try:
        with socket.create_connection((host, port), timeout=2) as conn:
            conn.sendall(word.encode())
        print("REACHED", host, flush=True)
        sys.exit(0)
    except OSError as exc:
        if type(exc).__name__ not in seen:
            seen.append(type(exc).__name__)
        time.sleep(1)
print("NOT REACHED", host, " ".join(seen), flush=True)
"""

EGRESS = """\
import socket, sys, time
host, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
t0 = time.time()
while time.time() - t0 < seconds:
    try:
        with socket.create_connection((host, port), timeout=1) as conn:
            conn.sendall(b"egress")
        outcome = "REACHED"
    except OSError as exc:
        outcome = "REFUSED " + type(exc).__name__
    print(f"egress {time.time() - t0:.2f} {outcome}", flush=True)
    time.sleep(0.5)
"""
"""Tries `host:port` every half second for `seconds`: one line per try, its time and
outcome (a pod's first moments are the network plugin's to program: the test reads the
whole series)."""


def code_folder(base: Path) -> Path:
    folder = base / "net-code"
    folder.mkdir(exist_ok=True)
    # The launcher passes the classic flags (--ps_hosts=... --task_index=N) first.
    (folder / "run.sh").write_text(
        '#!/bin/sh\nwhile [ "${1#--}" != "$1" ]; do shift; done\nexec python3 "$@"\n'
    )
    (folder / "listen.py").write_text(LISTEN)
    (folder / "probe.py").write_text(PROBE)
    (folder / "egress.py").write_text(EGRESS)
    return folder


def submit(api: Api, team: str, node: RealNode, name: str, args: list[str]) -> str:
    manifest = one_worker_job(
        node,
        name,
        {"args": args},
        code={"source": "artifact:net", "entrypoint": "run.sh"},
        runPolicy={"backoffLimit": 0, "activeDeadlineSeconds": LISTEN_SECONDS + 60},
    )
    job = api.ok(
        api.post(f"/api/v1/teams/{team}/jobs", json={"manifest": yaml.safe_dump(manifest)}), 201
    )
    return str(job["id"])


def log_of(api: Api, jid: str) -> str:
    r = api.get(f"/api/v1/jobs/{jid}/logs/worker-0", params={"attempt": 0})
    return r.text if r.status_code == 200 else ""


def ended(api: Api, jid: str) -> dict[str, Any] | None:
    job = api.ok(api.get(f"/api/v1/jobs/{jid}"))
    return job if job["phase"] in ("Succeeded", "Failed") else None


@pytest.fixture(scope="module")
def platform(
    kube_cluster: KubeCluster,
    real_node: RealNode,
    operator_kubeconfig: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Team]:
    tmp = tmp_path_factory.mktemp("kube-network")
    denied = ("--kube-egress-deny", "169.254.169.254/32",
              "--kube-egress-deny", f"{subnet_address(real_node, DENIED)}/32")  # fmt: skip
    with node_platform(
        kube_cluster, real_node, operator_kubeconfig, tmp, outputs=False, server_args=denied
    ) as made:
        yield made


class Listener:
    """A TCP listener of this machine's on `address`, in a thread: who connected, and what
    they said."""

    def __init__(self, address: str) -> None:
        self.sock = socket.create_server((address, 0))
        self.sock.settimeout(0.5)
        self.port = self.sock.getsockname()[1]
        self.heard: list[tuple[str, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    said = conn.recv(16).decode(errors="replace")
                except OSError:
                    said = ""
            self.heard.append((peer[0], said))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def subnet_address(node: RealNode, offset: int) -> str:
    """The address `offset` in the real node's pod subnet (its bridge's /24)."""
    return str(ipaddress.ip_network(f"{node.node_ip}/24", strict=False).network_address + offset)


@pytest.fixture
def outside(real_node: RealNode) -> Iterator[dict[int, Listener]]:
    """The DENIED and ALLOWED addresses on the node's bridge (the interface holding its
    address), a listener on each, by offset; removed after."""
    shown = subprocess.run(["ip", "-o", "addr", "show", "to", real_node.node_ip],
                           check=True, capture_output=True, text=True).stdout  # fmt: skip
    device = shown.split()[1]
    added: list[str] = []
    listeners: dict[int, Listener] = {}
    try:
        for offset in (DENIED, ALLOWED):
            address = subnet_address(real_node, offset)
            subprocess.run(["ip", "addr", "add", f"{address}/32", "dev", device], check=True)
            added.append(address)
            listeners[offset] = Listener(address)
        yield listeners
    finally:
        for listener in listeners.values():
            listener.close()
        for address in added:
            subprocess.run(["ip", "addr", "del", f"{address}/32", "dev", device], check=False)


def test_another_teams_job_cannot_reach_a_teams_replica(
    platform: Team, operator_kubeconfig: Path, tmp_path: Path
) -> None:
    a, node, kube = platform, platform.node, platform.kube
    assert a.admin is not None
    admin = a.admin
    folder = code_folder(tmp_path)
    upload_code(a.member, a.name, "net", folder)
    victim = submit(a.member, a.name, node, "listener", ["listen.py"])
    wait_for("team A's replica listening", lambda: "listening" in log_of(a.member, victim),
             JOB_TIMEOUT, 1.0)  # fmt: skip
    (pod,) = kube.core.list_namespaced_pod(
        a.namespace, label_selector="tfkube.io/job-name=listener"
    ).items
    address = pod.status.pod_ip

    # Team B: a team of its own on the same platform, with a member and its operator.
    b_name = admin.new_team()
    b_namespace = f"tfkube-{b_name}"
    taints = sorted({t["key"] for t in node.TOLERATIONS})
    admin.ok(admin.http.put(f"/api/v1/teams/{b_name}/allowances",
                            json={"toleration_keys": taints}))  # fmt: skip
    user = admin.new_user()
    admin.add_member(b_name, user, "member")
    b = api_for(a.server.url, user)
    operator = Operator(kube, b_namespace, tmp_path / "operator-b.log", operator_kubeconfig)
    try:
        operator.start()
        upload_code(b, b_name, "net", folder)
        # The listener outlives both probes (LISTEN_SECONDS): a refusal is never its absence.
        probe = ["probe.py", address, str(PORT), str(PROBE_SECONDS)]
        attacker = submit(b, b_name, node, "prober", [*probe, "attack"])
        friend = submit(a.member, a.name, node, "friend", [*probe, "friend"])
        b_done = wait_for("team B's probe to end", lambda: ended(b, attacker), JOB_TIMEOUT, 2.0)
        a_done = wait_for("team A's probe to end", lambda: ended(a.member, friend),
                          JOB_TIMEOUT, 2.0)  # fmt: skip
        b_log, a_log = log_of(b, attacker), log_of(a.member, friend)
        assert b_done["phase"] == a_done["phase"] == "Succeeded", (b_done, a_done)
        # Team A's own replica gets in (the listener is there and answers) ...
        assert "NOT REACHED" not in a_log, a_log[-2000:]
        assert f"REACHED {address}" in a_log, a_log[-2000:]
        # ... team B's never does, in PROBE_SECONDS of trying.
        assert f"NOT REACHED {address}" in b_log, b_log[-2000:]
        (b_pod,) = kube.core.list_namespaced_pod(
            b_namespace, label_selector="tfkube.io/job-name=prober"
        ).items
        assert ended(a.member, victim) is None  # still listening after both probes
        (a_pod,) = kube.core.list_namespaced_pod(
            a.namespace, label_selector="tfkube.io/job-name=friend"
        ).items
        heard = wait_for("the listener's log to show team A's probe",
                         lambda: (log := log_of(a.member, victim))
                         and f"accepted {a_pod.status.pod_ip} friend" in log and log,
                         60, 1.0)  # fmt: skip
        assert "attack" not in heard, heard[-2000:]
        assert f"accepted {b_pod.status.pod_ip}" not in heard, heard[-2000:]
        a.member.ok(a.member.post(f"/api/v1/jobs/{victim}/stop"))
        # Both namespaces hold the server's policy (the server made them, as for any team).
        for namespace in (a.namespace, b_namespace):
            policy = client.NetworkingV1Api(kube.api_client).read_namespaced_network_policy(
                "tfkube-tenant", namespace
            )
            assert policy.spec.policy_types == ["Ingress", "Egress"], policy
        print(f"\nteam A's probe: {a_log.strip().splitlines()[-3:]}")
        print(f"team B's probe: {b_log.strip().splitlines()[-3:]}")
    finally:
        for job in admin.get("/api/v1/jobs", params={"limit": 500}).json()["items"]:
            if job.get("team") == b_name:
                admin.delete(f"/api/v1/jobs/{job['id']}")
        b.close()
        operator.kill()
        delete_namespace(kube, b_namespace)
    assert not operator.errors(), operator.log.read_text()[-5000:]


def series(log: str) -> list[tuple[float, bool]]:
    """An `EGRESS` log as (seconds since its start, reached) per try."""
    out = []
    for line in log.splitlines():
        words = line.split()
        if len(words) >= 3 and words[0] == "egress":
            out.append((float(words[1]), words[2] == "REACHED"))
    return out


def test_a_teams_job_cannot_reach_an_address_the_site_denies(
    platform: Team, outside: dict[int, Listener], tmp_path: Path
) -> None:
    team, node = platform, platform.node
    allowed, denied = (subnet_address(node, o) for o in (ALLOWED, DENIED))
    folder = code_folder(tmp_path)
    upload_code(team.member, team.name, "net", folder)
    jobs = {
        offset: submit(
            team.member,
            team.name,
            node,
            f"egress-{offset}",
            [
                "egress.py",
                subnet_address(node, offset),
                str(outside[offset].port),
                str(EGRESS_SECONDS),
            ],
        )
        for offset in (ALLOWED, DENIED)
    }
    tries = {}
    for offset, jid in jobs.items():
        done = wait_for(f"the tries of .{offset} to end",
                        lambda jid=jid: ended(team.member, jid), JOB_TIMEOUT, 2.0)  # fmt: skip
        assert done["phase"] == "Succeeded", done
        log = log_of(team.member, jid)
        tries[offset] = series(log)
        assert len(tries[offset]) >= EGRESS_SECONDS, log[-3000:]
    # The control: an address outside the cluster that is not denied is reached, every try.
    assert all(reached for _, reached in tries[ALLOWED]), tries[ALLOWED]
    assert any(said == "egress" for _, said in outside[ALLOWED].heard), outside[ALLOWED].heard
    # The denied one is refused once the network plugin has programmed the pod, and from
    # then on at every try (kube-router programs a pod when its address reaches the API,
    # after its containers start: the tries before that get through; docs/security.md).
    first = next((i for i, (_, reached) in enumerate(tries[DENIED]) if not reached), None)
    assert first is not None, f"{denied} was reached at every try: {tries[DENIED]}"
    assert not any(reached for _, reached in tries[DENIED][first:]), tries[DENIED]
    window = tries[DENIED][first][0]
    assert window <= WINDOW_LIMIT, tries[DENIED]
    policy = client.NetworkingV1Api(team.kube.api_client).read_namespaced_network_policy(
        "tfkube-tenant", team.namespace
    )
    (out,) = policy.spec.egress
    blocks = {p.ip_block.cidr: p.ip_block._except for p in out.to if p.ip_block}
    assert blocks["0.0.0.0/0"] == ["169.254.169.254/32", f"{denied}/32"], blocks
    reached = sum(1 for _, r in tries[DENIED][:first])
    print(f"\n{allowed}: reached at all {len(tries[ALLOWED])} tries; {denied}: refused from "
          f"{window:.2f}s after the container started ({reached} tries before got through), "
          f"then at all {len(tries[DENIED]) - first}")  # fmt: skip
