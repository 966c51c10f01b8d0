"""tfkube inside the test cluster, on its real kubelet node (issue 18, point 1).

First the foundation: pods reach the API server and each other through ClusterIPs
(kube-proxy, iptables mode). ClusterIPs come from 198.19.224.0/20 and the API server listens
on the real node's bridge address (198.19.N.1): both inside the benchmarking range the
project creates its networks in (tools/kube/cluster.py, realnode.py). The host dials no
ClusterIP: the pods do, and the test reads what they printed.

Then the platform as a platform team installs it: `tfkube install --server` (the CLI) puts
the operator and the server in pods of tfkube's own image (built here without Docker,
tools/kube/images.py) on the real node (`--node-selector`, `--toleration`), with the shipped
RBAC, SQLite on an administrator's claim (`--data-claim`: a hostPath PV pre-bound to it; no
StorageClass here) and kept logs on an outputs share (`--outputs-claim`). The administrator
reaches the server with `kubectl port-forward` to its Service (through the real kubelet) on
a loopback port; a member uploads the between-graph example and submits it through that
port; it trains in real pods (fetching its code from the server's Service by cluster DNS
and ClusterIP) to the example's accuracy; its logs are read through the server while it
runs and after its pods are gone.

Then the rest of the member's flow against the same in-cluster server (issue 18, points 1
and 4), every workload in a real pod on the node: a notebook started through the API (as
the dashboard's New notebook does), placed by the server's `--notebook-node-selector` and
`--notebook-toleration` (install passes them), its home claim bound to a node folder by
the administrator (no StorageClass here), JupyterLab's API answered through the server's
proxy to its owner only, a file saved there landing on the claim, and its objects gone
once stopped; and a job with TensorBoard: its charts' scalars through the API,
TensorBoard's own scalars through the proxy, tfkube's model server serving its export and
predicting held-out digits through the proxy (another team's member: 404).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from server._jupyter import run_cell
from server._server import PASSWORD, Api, api_for, free_port, through_grpc
from tfkube.render import OPERATOR_IMAGE, SERVER_GRPC_PORT, SERVER_NAME, SERVER_PORT
from web._browser import LAPTOP, chromium, sign_in

from ._support import (
    REPO,
    KubeCluster,
    RealNode,
    create_shared_claim,
    load_cluster_module,
    placed_manifest,
    still_there,
    targz,
    upload_code,
    wait_for,
)
from .test_real_node_serving import assert_tf_serving_predictions, held_out_digits

SERVICE_NET = ipaddress.ip_network("198.19.224.0/20")
CA_ITEM = {"key": "ca.crt", "path": "ca.crt"}


def token_volume() -> tuple[dict[str, Any], dict[str, Any]]:
    """The ServiceAccount token, the cluster CA and the namespace where in-cluster config
    reads them (what the ServiceAccount admission plugin mounts; the test cluster runs
    without it)."""
    volume = {
        "name": "kube-api-access",
        "projected": {
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [CA_ITEM]}},
                {
                    "downwardAPI": {
                        "items": [
                            {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}
                        ]
                    }
                },
            ]
        },
    }
    mount = {
        "name": "kube-api-access",
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
        "readOnly": True,
    }
    return volume, mount


def pod(name: str, image: str, command: list[str], labels: dict[str, str] | None = None,
        ports: list[int] = ()) -> dict[str, Any]:  # fmt: skip
    """A pod on the real node; with `ports`, ready once the first one accepts connections
    (without a probe a container is ready when started: before its server listens)."""
    volume, mount = token_volume()
    probe = {"tcpSocket": {"port": ports[0]}, "periodSeconds": 1} if ports else None
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": {
            "nodeSelector": dict(RealNode.SELECTOR),
            "tolerations": list(RealNode.TOLERATIONS),
            "restartPolicy": "Never",
            "serviceAccountName": "default",
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsUser": 65532, "runAsNonRoot": True},
            "volumes": [volume],
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": command,
                    "ports": [{"containerPort": p} for p in ports],
                    "volumeMounts": [mount],
                    "resources": {"requests": {"memory": "64Mi"}},
                    "readinessProbe": probe,
                }
            ],
        },
    }


def pod_done(kube: KubeCluster, ns: str, name: str) -> client.V1Pod | None:
    p = kube.core.read_namespaced_pod(name, ns)
    return p if p.status.phase in ("Succeeded", "Failed") else None


def dnat_to(destination: str) -> bool:
    """Whether kube-proxy's NAT rules translate some ClusterIP to `destination`."""
    out = subprocess.run(["iptables", "-t", "nat", "-S"], capture_output=True, text=True)
    return f"--to-destination {destination}" in out.stdout


IN_CLUSTER = textwrap.dedent(
    """
    import json, os, urllib.request
    from kubernetes import client, config
    config.load_incluster_config()
    api = client.ApiClient()
    review = client.AuthenticationV1Api(api).create_self_subject_review(
        client.V1SelfSubjectReview(metadata=client.V1ObjectMeta()))
    body = urllib.request.urlopen("http://echo:8080/", timeout=10).read().decode()
    print(json.dumps({
        "host": os.environ["KUBERNETES_SERVICE_HOST"],
        "port": os.environ["KUBERNETES_SERVICE_PORT"],
        "user": review.status.user_info.username,
        "echo": body.strip(),
    }))
    """
)


def test_pods_reach_the_api_server_and_services_through_cluster_ips(
    real_node: RealNode, kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    """In-cluster config from a pod (KUBERNETES_SERVICE_HOST, the `kubernetes` Service's
    ClusterIP, the serving certificate checked against the cluster CA) authenticates as the
    pod's ServiceAccount; a second pod's ClusterIP Service answers by its DNS name."""
    kube, ns, image = kube_cluster, kube_namespace, OPERATOR_IMAGE
    svc = kube.core.read_namespaced_service("kubernetes", "default")
    assert ipaddress.ip_address(svc.spec.cluster_ip) in SERVICE_NET
    slices = client.DiscoveryV1Api(kube.api_client).list_namespaced_endpoint_slice(
        "default", label_selector="kubernetes.io/service-name=kubernetes"
    )
    endpoints = {a for s in slices.items for e in s.endpoints for a in e.addresses}
    assert endpoints == {real_node.node_ip}, endpoints  # the API server's bridge address

    serve = ["sh", "-c", "mkdir -p /tmp/w && echo hello-from-echo > /tmp/w/index.html && "
             "cd /tmp/w && exec python3 -m http.server 8080 --bind 0.0.0.0"]  # fmt: skip
    kube.core.create_namespaced_pod(ns, pod("echo", image, serve, ports=[8080]))
    kube.core.create_namespaced_service(
        ns,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "echo"},
            "spec": {"selector": {"app": "echo"}, "ports": [{"port": 8080, "targetPort": 8080}]},
        },
    )
    echo_svc = kube.core.read_namespaced_service("echo", ns)
    assert ipaddress.ip_address(echo_svc.spec.cluster_ip) in SERVICE_NET

    def echo_ready() -> bool:
        p = kube.core.read_namespaced_pod("echo", ns)
        return bool(p.status.container_statuses and p.status.container_statuses[0].ready)

    wait_for("the echo pod ready", echo_ready, 120, 0.5)
    # kube-proxy routes the ClusterIP once it has synced the pod's endpoint: until then its
    # rules REJECT the Service (no endpoints) and the client would see "connection refused"
    pod_ip = kube.core.read_namespaced_pod("echo", ns).status.pod_ip
    wait_for("kube-proxy's rule for the echo pod", lambda: dnat_to(f"{pod_ip}:8080"), 60, 0.5)
    t0 = time.monotonic()
    kube.core.create_namespaced_pod(ns, pod("client", image, ["python3", "-c", IN_CLUSTER]))
    done = wait_for("the client pod done", lambda: pod_done(kube, ns, "client"), 180, 0.5)
    log = kube.core.read_namespaced_pod_log("client", ns)
    assert done.status.phase == "Succeeded", log
    out = json.loads(log.strip().splitlines()[-1])
    print(f"\nin-cluster client done in {time.monotonic() - t0:.1f}s: {out}")
    assert out["host"] == svc.spec.cluster_ip
    assert out["port"] == "443"
    assert out["user"] == f"system:serviceaccount:{ns}:default"
    assert out["echo"] == "hello-from-echo"


def test_kube_proxy_rules_are_the_real_nodes(real_node: RealNode) -> None:
    """kube-proxy's chains exist while the real node runs, with the `kubernetes` Service's
    ClusterIP (its stop runs `kube-proxy --cleanup`; the teardown prints what was left)."""
    out = subprocess.run(
        ["iptables", "-t", "nat", "-S", "KUBE-SERVICES"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "198.19.224.1/32" in out.stdout


# -- the platform in pods ------------------------------------------------------------------

EXAMPLE = REPO / "examples" / "mnist-between-graph"
JOB = "digits"
DATA_CLAIM = "tfkube-data"
OUTPUTS = "team-outputs"
MIN_ACCURACY = 0.90  # what tests/tf/test_examples.py asks of the same example locally
JOB_TIMEOUT = 480.0


@dataclass
class Platform:
    kube: KubeCluster
    node: RealNode
    namespace: str
    url: str  # the port-forward's loopback address
    grpc: str  # `host:port` of the server's gRPC door through the same port-forward
    admin: Api
    member: Api
    team: str
    env: dict[str, str]  # the member's CLI environment (TFKUBE_URL, TOKEN, TEAM)
    share: Path  # the host folder behind the outputs share


def _pv(kube: KubeCluster, node: RealNode, name: str, path: Path, ns: str, claim: str) -> str:
    """A hostPath PV on the real node pre-bound to `ns/claim` (an administrator's volume:
    there is no provisioner); the folder is writable by the pods' user."""
    realnode = load_cluster_module()._sibling("realnode")
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o777)
    pv = realnode.hostpath_volume(name, path, [node.name], ns, claim, "1Gi")
    kube.harness.api("POST", "/api/v1/persistentvolumes", pv)
    return name


def _tfkube(env: dict[str, str], *args: str, timeout: float = 180) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "tfkube", *args],
        capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, f"tfkube {' '.join(args)}: {proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _ready_pod(kube: KubeCluster, ns: str, component: str) -> client.V1Pod | None:
    selector = f"app.kubernetes.io/name=tfkube,app.kubernetes.io/component={component}"
    for p in kube.core.list_namespaced_pod(ns, label_selector=selector).items:
        statuses = p.status.container_statuses or []
        if statuses and all(c.ready for c in statuses):
            return p
    return None


def _delete_namespace(kube: KubeCluster, ns: str) -> None:
    try:
        kube.core.delete_namespace(ns, propagation_policy="Background")
    except ApiException as exc:
        if exc.status != 404:
            raise


def _gone(kube: KubeCluster, ns: str) -> bool:
    try:
        kube.core.read_namespace(ns)
    except ApiException as exc:
        return exc.status == 404
    return False


@pytest.fixture(scope="module")
def platform(
    kube_cluster: KubeCluster, real_node: RealNode, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    kube, node = kube_cluster, real_node
    tmp = tmp_path_factory.mktemp("incluster")
    ns = f"tfkube-platform-{uuid.uuid4().hex[:6]}"
    team = f"t{uuid.uuid4().hex[:8]}"
    team_ns = f"tfkube-{team}"
    share = node.volumes_dir / ns / "share"
    pvs: list[str] = []
    forward: subprocess.Popen[bytes] | None = None
    apis: list[Api] = []
    env = {**os.environ, "KUBECONFIG": str(kube.kubeconfig), "TFKUBE_HOME": str(tmp / "home")}
    try:
        # The administrator's part: the namespace, the server's data volume and the outputs
        # share (hostPath PVs pre-bound to the claims install is told to use).
        kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        pvs.append(_pv(kube, node, f"{ns}-data", node.volumes_dir / ns / "data", ns, DATA_CLAIM))
        pvs.append(_pv(kube, node, f"{ns}-outputs", share, ns, OUTPUTS))
        create_shared_claim(kube, ns, DATA_CLAIM, "ReadWriteOnce")
        create_shared_claim(kube, ns, OUTPUTS)
        (taint,) = node.TOLERATIONS
        t0 = time.monotonic()
        out = _tfkube(
            env, "install", "--server", "-n", ns, "--data-claim", DATA_CLAIM,
            "--outputs-claim", OUTPUTS, "--kubeconfig", str(kube.kubeconfig),
            *[a for k, v in node.SELECTOR.items() for a in ("--node-selector", f"{k}={v}")],
            "--toleration", f"{taint['key']}:{taint['effect']}",
            *[a for k, v in node.SELECTOR.items()
              for a in ("--notebook-node-selector", f"{k}={v}")],
            "--notebook-toleration", f"{taint['key']}:{taint['effect']}",
        )  # fmt: skip
        assert "installed" in out, out
        operator = wait_for("the operator's pod Ready", lambda: _ready_pod(kube, ns, "operator"),
                            300, 1.0)  # fmt: skip
        server = wait_for("the server's pod Ready", lambda: _ready_pod(kube, ns, "server"),
                          300, 1.0)  # fmt: skip
        ready = time.monotonic() - t0
        for p in (operator, server):
            assert p.spec.node_name == node.name
            assert p.spec.containers[0].image == OPERATOR_IMAGE
            assert p.spec.service_account_name in ("tfkube-operator", SERVER_NAME)
        # The administrator: kubectl port-forward to the server's Service, on loopback.
        port, grpc_port = free_port(), free_port()
        with (tmp / "forward.log").open("wb") as forward_log:
            forward = subprocess.Popen(
                [str(kube.kubectl), "--kubeconfig", str(kube.kubeconfig), "-n", ns,
                 "port-forward", f"svc/{SERVER_NAME}", f"{port}:{SERVER_PORT}",
                 f"{grpc_port}:{SERVER_GRPC_PORT}", "--address", "127.0.0.1"],
                stdout=subprocess.DEVNULL, stderr=forward_log, start_new_session=True,
            )  # fmt: skip
        url = f"http://127.0.0.1:{port}"

        def healthy() -> bool:
            assert forward is not None
            assert forward.poll() is None, (tmp / "forward.log").read_text()
            try:
                return httpx.get(f"{url}/healthz", timeout=3).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for("the server through kubectl port-forward", healthy, 60, 0.5)
        log = kube.core.read_namespaced_pod_log(server.metadata.name, ns)
        (token,) = set(re.findall(r"/setup\?token=([A-Za-z0-9_-]+)", log)) or {None}
        assert token, log[-3000:]
        r = httpx.post(
            f"{url}/api/v1/setup",
            json={"token": token, "name": "admin", "password": PASSWORD},
            timeout=60,  # the default team may wait for its namespace still being deleted
        )
        assert r.status_code == 201, r.text
        admin = api_for(url, "admin")
        apis.append(admin)
        admin.new_team(team, {})  # no quota: the pods ask no CPU (2 cores)
        admin.ok(admin.http.put(f"/api/v1/teams/{team}/allowances",
                                json={"toleration_keys": [taint["key"]]}))  # fmt: skip
        user = admin.new_user()
        admin.add_member(team, user, "member")
        member = api_for(url, user)
        apis.append(member)
        # The team's outputs claim on the same share: <share>/<team>/outputs.
        pvs.append(_pv(kube, node, f"{ns}-{team}", share / team / "outputs", team_ns, OUTPUTS))
        create_shared_claim(kube, team_ns, OUTPUTS)
        upload_code(member, team, "mnist", EXAMPLE)
        print(f"\nin-cluster platform: operator and server Ready {ready:.0f}s after install")
        member_env = {**env, "TFKUBE_URL": url, "TFKUBE_TOKEN": member.token,
                      "TFKUBE_TEAM": team, "TFKUBE_ENGINE": "server"}  # fmt: skip
        grpc = f"127.0.0.1:{grpc_port}"
        yield Platform(kube, node, ns, url, grpc, admin, member, team, member_env, share)
    finally:
        try:
            for api in apis[:1]:  # the server deletes each job's TFJob and outputs
                with_jobs = api.get("/api/v1/jobs", params={"limit": 500})
                if with_jobs.status_code == 200:
                    for job in with_jobs.json()["items"]:
                        api.delete(f"/api/v1/jobs/{job['id']}")
        finally:
            for api in apis:
                api.close()
            if forward is not None:
                os.killpg(forward.pid, signal.SIGTERM)
                forward.wait(10)
            for component in ("server", "operator"):  # kept for a failure's post-mortem
                for pod in kube.core.list_namespaced_pod(
                    ns, label_selector=f"app.kubernetes.io/component={component}"
                ).items:
                    text = kube.core.read_namespaced_pod_log(pod.metadata.name, ns)
                    (tmp / f"{component}.log").write_text(text)
                    if "Traceback" in text:
                        print(f"\n--- {component} pod log ---\n{text[-6000:]}")
            for name in (team_ns, ns):
                _delete_namespace(kube, name)
            # Nothing keeps pointing at the deleted namespace (the session's other modules
            # apply their own install again).
            rbac = client.RbacAuthorizationV1Api(kube.api_client)
            for binding in rbac.list_cluster_role_binding().items:
                if any(s.namespace == ns for s in binding.subjects or []):
                    rbac.delete_cluster_role_binding(binding.metadata.name)
            wait_for("the namespaces gone", lambda: _gone(kube, team_ns) and _gone(kube, ns),
                     180, 1.0)  # fmt: skip
            for pv in pvs:
                try:
                    kube.core.delete_persistent_volume(pv)
                except ApiException as exc:
                    if exc.status != 404:
                        raise


def test_a_member_trains_through_the_in_cluster_server(platform: Platform) -> None:
    """Submitted through the port-forward, the job's replicas fetch their code from the
    server's Service (cluster DNS, ClusterIP, kube-proxy), train in real pods to the
    example's accuracy; `tfkube logs` through the server shows every replica while it
    runs, and the PS's kept log after its pod is gone."""
    p, kube = platform, platform.kube
    team_ns = f"tfkube-{p.team}"
    manifest = placed_manifest(p.node, EXAMPLE, JOB, ["--train_steps=1000", "--step_sleep=0.02"])
    t0 = time.monotonic()
    job = p.member.ok(
        p.member.post(f"/api/v1/teams/{p.team}/jobs", json={"manifest": manifest}),
        201,
    )

    def every_replica_logged() -> str | None:
        out = _tfkube(p.env, "logs", JOB)
        wanted = ("[ps-0] ps 0 serving at", "[worker-0] worker 0: shard", "[worker-1] worker 1:")
        return out if all(w in out for w in wanted) else None

    live = wait_for("every replica's live output through the server", every_replica_logged,
                    JOB_TIMEOUT, 2.0)  # fmt: skip
    assert live

    def finished() -> dict[str, Any] | None:
        seen = p.member.ok(p.member.get(f"/api/v1/jobs/{job['id']}"))
        return seen if seen["phase"] in ("Succeeded", "Failed") else None

    final = wait_for(f"job {JOB} to finish", finished, JOB_TIMEOUT, 1.0)
    elapsed = time.monotonic() - t0
    assert final["phase"] == "Succeeded", final
    for pod in kube.core.list_namespaced_pod(
        team_ns, label_selector=f"tfkube.io/job-name={JOB}"
    ).items:
        assert pod.spec.node_name == p.node.name
    wait_for("the PS pod gone",
             lambda: not kube.core.list_namespaced_pod(
                 team_ns, label_selector="tfkube.io/replica-type=ps").items, 60, 0.5)  # fmt: skip
    # Kept logs: the PS's pod is gone, its log is read from the outputs share by the server.
    kept = _tfkube(p.env, "logs", JOB, "--replica", "ps-0")
    assert "ps 0 serving at" in kept, kept[-3000:]
    chief = _tfkube(p.env, "logs", JOB, "--replica", "worker-0")
    found = re.findall(r"tfkube-example: result (\{.*\})", chief)
    assert found, chief[-3000:]
    res = json.loads(found[-1])
    print(f"\nin-cluster: {JOB} Succeeded {elapsed:.0f}s after submit through the "
          f"port-forward; accuracy {res['test_accuracy']:.3f}")  # fmt: skip
    assert res["test_accuracy"] >= MIN_ACCURACY, res
    assert (p.share / p.team / "outputs" / JOB).is_dir()  # the share the server reads
    # The operator and the server ran the whole time in their pods, never restarted.
    for component in ("operator", "server"):
        pod = _ready_pod(kube, p.namespace, component)
        assert pod is not None, component
        assert pod.status.container_statuses[0].restart_count == 0, component


# -- the rest of the member's flow: notebook, charts, TensorBoard, serve, predict ----------


@pytest.fixture(scope="module")
def outsider(platform: Platform) -> Iterator[Api]:
    """A member of another team of the same server."""
    other = platform.admin.new_team(None, {})
    user = platform.admin.new_user()
    platform.admin.add_member(other, user, "member")
    api = api_for(platform.url, user)
    try:
        yield api
    finally:
        api.close()
        _delete_namespace(platform.kube, f"tfkube-{other}")


def _notebook_objects(kube: KubeCluster, ns: str, notebook_id: str) -> list[str]:
    return still_there(ns, f"notebook-{notebook_id}", {
        "Secret": kube.core.read_namespaced_secret,
        "Service": kube.core.read_namespaced_service,
        "StatefulSet": client.AppsV1Api(kube.api_client).read_namespaced_stateful_set,
        "Pod": lambda n, namespace: kube.core.read_namespaced_pod(f"{n}-0", namespace),
    })  # fmt: skip


KERNEL_CELL = """
import json, os, tfkube
c = tfkube.Client()
out = {"url": os.environ["TFKUBE_URL"], "me": c.me().name,
       "jobs": sorted(j.name for j in c.jobs())}
try:
    out["other"] = [j.name for j in c.jobs(team="OTHER")]
except tfkube.ServerError as exc:
    out["other"] = exc.status
import httpx
out["tokens"] = httpx.post(
    out["url"] + "/api/v1/tokens", json={"name": "wider"},
    headers={"Authorization": "Bearer " + os.environ["TFKUBE_TOKEN"]}).status_code
print("RESULT " + json.dumps(out), flush=True)
"""
"""What runs in the notebook's pod: its own team's jobs, another team's (OTHER), a wider
token; printed as one JSON line."""


def _suspended_jobs(p: Platform, outsider: Api) -> tuple[str, str, str]:
    """A suspended job (no pods) in the member's team and one in the outsider's; -> (the
    outsider's team, the member's job, the outsider's job)."""
    (theirs_team,) = [t["name"] for t in outsider.ok(outsider.get("/api/v1/teams"))]
    outsider.ok(
        outsider.post(f"/api/v1/teams/{theirs_team}/artifacts",
                      params={"name": "mnist", "filename": "code.tar.gz"},
                      content=targz(EXAMPLE),
                      headers={"Content-Type": "application/octet-stream"}),
        201,
    )  # fmt: skip
    names = []
    for api, team, manifest in (
        (p.member, p.team, placed_manifest(p.node, EXAMPLE, "nb-mine", [])),
        (outsider, theirs_team, (EXAMPLE / "job.yaml").read_text()),
    ):
        raw = yaml.safe_load(manifest)
        raw["metadata"]["name"] = f"nb-{uuid.uuid4().hex[:6]}"
        raw["spec"]["code"]["source"] = "artifact:mnist"
        raw["spec"].setdefault("runPolicy", {})["suspend"] = True
        api.ok(api.post(f"/api/v1/teams/{team}/jobs", json={"manifest": yaml.safe_dump(raw)}),
               201)  # fmt: skip
        names.append(raw["metadata"]["name"])
    return theirs_team, names[0], names[1]


def test_a_members_notebook_runs_in_a_real_pod(platform: Platform, outsider: Api) -> None:
    """`POST /api/v1/teams/<team>/notebook` (the dashboard's New notebook) on the in-cluster
    server: its StatefulSet's pod lands on the real node (the server's notebook placement),
    its home on the claim the administrator bound; JupyterLab answers its owner through
    the server's proxy (the API server's service proxy behind it, Jupyter's token added by
    the server) and saves to the claim; another team's member and no login are refused;
    stopped, its Secret, Service, StatefulSet and pod are gone and its home claim stays."""
    p, kube = platform, platform.kube
    team_ns = f"tfkube-{p.team}"
    t0 = time.monotonic()
    notebook = p.member.ok(p.member.post(f"/api/v1/teams/{p.team}/notebook"))
    nid = notebook["id"]
    base = f"/proxy/notebook/{nid}"
    assert urlsplit(notebook["url"]).path == f"{base}/lab"
    assert notebook["state"] == "running", notebook
    home = f"home-notebook-{nid}-0"  # the StatefulSet's claim; no StorageClass here
    pvs = p.node.bind(team_ns, [home])
    try:

        def jupyter_status() -> dict[str, Any] | None:
            r = p.member.get(f"{base}/api/status")
            return r.json() if r.status_code == 200 else None

        status = wait_for("JupyterLab through the server's proxy", jupyter_status, 300, 1.0)
        ready = time.monotonic() - t0
        assert "started" in status, status
        pod = kube.core.read_namespaced_pod(f"notebook-{nid}-0", team_ns)
        assert pod.spec.node_name == p.node.name
        (container,) = pod.spec.containers
        assert container.image == OPERATOR_IMAGE
        assert pod.spec.security_context.run_as_user == 65532
        assert container.security_context.allow_privilege_escalation is False
        claim = kube.core.read_namespaced_persistent_volume_claim(home, team_ns)
        assert claim.status.phase == "Bound"
        assert claim.spec.volume_name == pvs[0]
        specs = p.member.ok(p.member.get(f"{base}/api/kernelspecs"))
        assert "python3" in specs["kernelspecs"], specs
        # Saved through the proxy (Jupyter's contents API, token-authenticated): the file
        # is on the home claim, owned by the notebook's user.
        text = f"saved through {p.url}"
        saved = p.member.http.put(
            f"{base}/api/contents/hello.txt",
            json={"type": "file", "format": "text", "content": text},
        )
        assert saved.status_code in (200, 201), saved.text
        on_claim = p.node.volume(team_ns, home) / "hello.txt"
        assert on_claim.read_text() == text
        assert on_claim.stat().st_uid == 65532
        # Its owner only: another team's member 404, no login 401.
        assert outsider.get(f"{base}/api/status").status_code == 404
        assert httpx.get(f"{p.url}{base}/api/status", timeout=30).status_code == 401
        print(f"\nin-cluster: a notebook's JupyterLab answered through the server's proxy "
              f"{ready:.0f}s after POST /notebook, in a real pod on {p.node.name}")  # fmt: skip

        # Its kernel's `tfkube.Client()` (issue 18): signed in from the pod's environment,
        # the server's Service by cluster DNS, a token limited to the notebook's team from
        # the notebook's Secret (never a literal in the pod spec).
        env = {e.name: e for e in container.env}
        assert env["TFKUBE_URL"].value == f"http://{SERVER_NAME}.{p.namespace}.svc:8470"
        assert env["TFKUBE_TEAM"].value == p.team
        assert env["TFKUBE_TOKEN"].value is None
        ref = env["TFKUBE_TOKEN"].value_from.secret_key_ref
        assert (ref.name, ref.key) == (f"notebook-{nid}", "TFKUBE_TOKEN")
        secret = kube.core.read_namespaced_secret(ref.name, team_ns)
        nb_token = base64.b64decode(secret.data["TFKUBE_TOKEN"]).decode()
        assert nb_token != p.member.token
        theirs_team, mine_job, theirs_job = _suspended_jobs(p, outsider)
        # Run in the notebook's container as its kernel would be (its environment, its
        # user): `kubectl exec`; a kernel through the proxy is below.
        t1 = time.monotonic()
        cell = KERNEL_CELL.replace("OTHER", theirs_team)
        ran = subprocess.run(
            [str(kube.kubectl), "--kubeconfig", str(kube.kubeconfig), "-n", team_ns, "exec",
             f"notebook-{nid}-0", "-c", "notebook", "--", "python3", "-c", cell],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        printed = ran.stdout + ran.stderr
        assert ran.returncode == 0, printed[-3000:]
        found = re.findall(r"^RESULT (\{.*\})$", printed, re.MULTILINE)
        assert found, printed[-3000:]
        seen = json.loads(found[-1])
        assert seen["me"] == p.member.name, seen
        assert mine_job in seen["jobs"], seen  # its team's job, through the Service
        assert theirs_job not in seen["jobs"], seen  # not another team's
        assert seen["other"] in (404, []), seen
        assert seen["tokens"] == 403, seen  # no wider token made from it
        print(f"in-cluster: tfkube.Client() in the notebook's pod listed {len(seen['jobs'])} "
              f"job(s) of its team in {time.monotonic() - t1:.1f}s (exec included)")  # fmt: skip
        # A kernel through the server's proxy: its WebSocket channel reaches the notebook's
        # pod straight at its Service (through the API server's proxy the upgrade lost
        # Jupyter's token: 403, 2026-12-03), and a cell runs in the pod.
        t2 = time.monotonic()
        kernel = p.member.post(f"{base}/api/kernels", json={"name": "python3"})
        assert kernel.status_code == 201, kernel.text
        kid = kernel.json()["id"]
        ws = f"{p.url.replace('http', 'ws', 1)}{base}/api/kernels/{kid}/channels"
        said = run_cell(ws, p.member.token, "import os; print('kernel in', os.uname()[1])", 120)
        assert f"kernel in notebook-{nid}-0" in said, said
        print(f"in-cluster: a cell ran in the notebook's pod through the server's proxy "
              f"{time.monotonic() - t2:.1f}s after the kernel was asked for")  # fmt: skip
        as_notebook = {"Authorization": f"Bearer {nb_token}"}
        assert httpx.get(f"{p.url}/api/v1/jobs", headers=as_notebook, timeout=30).is_success

        stopped = p.member.ok(p.member.post(f"/api/v1/notebooks/{nid}/stop"))
        assert stopped["state"] == "stopped", stopped
        try:
            wait_for("the notebook's objects and pod gone",
                     lambda: not _notebook_objects(kube, team_ns, nid), 120, 1.0)  # fmt: skip
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {_notebook_objects(kube, team_ns, nid)}") from None
        # Its token died with it (its Secret is gone above).
        dead = httpx.get(f"{p.url}/api/v1/jobs", headers=as_notebook, timeout=30)
        assert dead.status_code == 401, dead.text
        # Its home stays (opening it again starts it on the same claim).
        kept = kube.core.read_namespaced_persistent_volume_claim(home, team_ns)
        assert kept.status.phase == "Bound"
        assert on_claim.read_text() == text
    finally:
        try:
            kube.core.delete_namespaced_persistent_volume_claim(home, team_ns)
        except ApiException as exc:
            if exc.status != 404:
                raise
        for pv in pvs:
            kube.core.delete_persistent_volume(pv)


BOARD = "board"


def test_a_member_charts_serves_and_predicts_through_the_in_cluster_server(
    platform: Platform, outsider: Api
) -> None:
    """A job with TensorBoard in real pods through the in-cluster server: its charts'
    scalars through the API while it trains (read by the server from the outputs share) and
    drawn on its page in Chromium; TensorBoard's own scalars through the server's proxy
    (its pod on the node, the API server's service proxy behind it; another team's member:
    404); stopped, its TensorBoard goes with it. Then tfkube's model server serves the
    export of the job this module trained (test_a_member_trains_through_the_in_cluster_server)
    in a real pod, held-out digits are predicted through the server's proxy (another team's
    member: 404, no token: 401) and, the same, with TensorFlow Serving's own gRPC client
    through the server pod's gRPC door (another team's member: NOT_FOUND, no token or a bad
    one: UNAUTHENTICATED), and once stopped its objects are gone."""
    p, kube, member = platform, platform.kube, platform.member
    team_ns = f"tfkube-{p.team}"
    # Trains until stopped: TensorBoard's pod starts beside it (its Deployment goes with
    # the job's end, so a short job can end before TensorBoard answers).
    endless = ["--train_steps=1000000", "--step_sleep=0.05", "--checkpoint_steps=100"]
    raw = yaml.safe_load(placed_manifest(p.node, EXAMPLE, BOARD, endless))
    raw["spec"]["tensorboard"] = {
        "nodeSelector": dict(p.node.SELECTOR),
        "tolerations": list(p.node.TOLERATIONS),
    }
    t0 = time.monotonic()
    job = member.ok(
        member.post(f"/api/v1/teams/{p.team}/jobs", json={"manifest": yaml.safe_dump(raw)}), 201
    )
    tb = f"/proxy/tensorboard/{job['id']}"

    def phase() -> str:
        return str(member.ok(member.get(f"/api/v1/jobs/{job['id']}"))["phase"])

    def board_tags() -> dict[str, Any] | None:
        assert phase() in ("Pending", "Running"), f"job {BOARD} ended: {phase()}"
        r = member.get(f"{tb}/data/plugin/scalars/tags")
        if r.status_code != 200:
            return None
        runs = r.json()
        return runs if any("accuracy" in tags for tags in runs.values()) else None

    def board_pods() -> list[client.V1Pod]:
        return list(
            kube.core.list_namespaced_pod(
                team_ns,
                label_selector=f"tfkube.io/job-name={BOARD},tfkube.io/component=tensorboard",
            ).items
        )

    try:
        runs = wait_for("TensorBoard's scalars through the proxy", board_tags, JOB_TIMEOUT, 1.0)
    except AssertionError as exc:
        seen = [(x.metadata.name, x.status.phase, x.spec.node_name) for x in board_pods()]
        last = member.get(f"{tb}/data/plugin/scalars/tags")
        raise AssertionError(
            f"{exc}; TensorBoard pods: {seen}; the proxy's last answer: "
            f"{last.status_code} {last.text[:300]}"
        ) from None
    boarded = time.monotonic() - t0
    (board,) = board_pods()
    assert board.spec.node_name == p.node.name
    page = member.get(f"{tb}/")
    assert page.status_code == 200, (dict(page.headers), page.text[:1000])
    assert "tensorboard" in page.text.lower()
    assert outsider.get(f"{tb}/data/plugin/scalars/tags").status_code == 404

    # The charts: the job page's scalars while it trains, and its page in Chromium (through
    # the port-forward) draws them.
    def charted() -> dict[str, Any] | None:
        scalars = member.ok(member.get(f"/api/v1/jobs/{job['id']}/scalars"))
        tags = {x["tag"] for x in scalars["series"]}
        points = all(x["points"] for x in scalars["series"])
        return scalars if {"loss", "accuracy"} <= tags and points else None

    scalars = wait_for("the job's scalars through the API", charted, 120, 1.0)
    assert scalars["progress"]["step"], scalars["progress"]
    with chromium() as browser:
        context = browser.new_context(viewport=LAPTOP, base_url=p.url)
        context.set_default_timeout(30_000)
        try:
            page_ = context.new_page()
            sign_in(page_, p.url, member.name, PASSWORD)
            page_.goto(f"/jobs/{job['id']}")
            loss = page_.locator('figure.chart[data-tag="loss"]')
            wait_for("loss points charted on the job page",
                     lambda: int(loss.get_attribute("data-points") or 0) > 0, 60, 0.5)  # fmt: skip
        finally:
            context.close()

    # Stopped: the job ends and its TensorBoard goes with it.
    member.ok(member.post(f"/api/v1/jobs/{job['id']}/stop"))
    wait_for(f"job {BOARD} stopped", lambda: phase() in ("Failed", "Stopped"), 120, 1.0)
    wait_for("its TensorBoard pod gone", lambda: not board_pods(), 120, 1.0)

    (trained,) = member.ok(
        member.get("/api/v1/jobs", params={"team": p.team, "name": JOB, "phase": "Succeeded"})
    )["items"]  # the module's first job (test_a_member_trains_through_the_in_cluster_server)
    # Serve the export with tfkube's model server (in tfkube's image), predict through
    # the proxy.
    t1 = time.monotonic()
    server = member.ok(
        member.post(
            f"/api/v1/jobs/{trained['id']}/model-servers", json={"runtime": "tfkube", "cpu": "500m"}
        ),
        201,
    )

    def ready() -> dict[str, Any] | None:
        seen = member.ok(member.get(f"/api/v1/model-servers/{server['id']}"))
        assert seen["status"] != "Failed", seen
        return seen if seen["status"] == "Ready" else None

    listed = wait_for("the model server Ready", ready, 300, 1.0)
    served = time.monotonic() - t1
    assert listed["runtime"] == "tfkube", listed
    (pod,) = kube.core.list_namespaced_pod(
        team_ns, label_selector="tfkube.io/component=model-server"
    ).items
    assert pod.spec.node_name == p.node.name
    assert pod.spec.containers[0].image == OPERATOR_IMAGE
    model = urlsplit(listed["url"]).path  # the API's URLs name the server's own address
    x, y = held_out_digits(32)
    body = {"instances": x.tolist()}
    answer = member.http.post(f"{model}:predict", json=body)
    assert answer.status_code == 200, answer.text
    classes = assert_tf_serving_predictions(answer.json(), 32)
    accuracy = sum(int(c == t) for c, t in zip(classes, y, strict=True)) / 32
    assert accuracy >= 0.75, (accuracy, classes, y.tolist())  # the job's ~0.95, on 32 digits
    assert outsider.http.post(f"{model}:predict", json=body).status_code == 404
    assert httpx.post(f"{p.url}{model}:predict", json=body, timeout=30).status_code == 401
    # TensorFlow Serving's own gRPC client through the server pod's gRPC door: the server
    # dials the model server's Service from inside the cluster (its ClusterIP).
    t2 = time.monotonic()
    by_grpc = through_grpc(p.grpc, server["id"], JOB, member.token, outsider.token, x)
    assert [int(c) for c in by_grpc] == classes
    grpc_s = time.monotonic() - t2
    print(f"\nin-cluster: TensorBoard's scalars ({sorted(runs)}) through the proxy "
          f"{boarded:.0f}s after {BOARD}'s submit; tfkube's model server of {JOB} Ready "
          f"{served:.0f}s after POST, accuracy on 32 held-out digits: {accuracy:.2f}; the "
          f"same through the server's gRPC door (and its refusals) in {grpc_s:.1f}s")  # fmt: skip

    member.ok(member.post(f"/api/v1/model-servers/{server['id']}/stop"))

    def model_server_left() -> list[str]:
        pods = kube.core.list_namespaced_pod(
            team_ns, label_selector="tfkube.io/component=model-server"
        ).items
        return [f"Pod {x.metadata.name}" for x in pods] + still_there(team_ns, f"{JOB}-serving", {
            "Deployment": client.AppsV1Api(kube.api_client).read_namespaced_deployment,
            "Service": kube.core.read_namespaced_service,
        })  # fmt: skip

    try:
        wait_for("the model server's objects and pod gone",
                 lambda: not model_server_left(), 120, 1.0)  # fmt: skip
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {model_server_left()}") from None
