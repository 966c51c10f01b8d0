"""tfkube inside the test cluster: pods on the real kubelet node reach the API server and
each other through ClusterIPs (kube-proxy, iptables mode), as the operator and the platform
server need when they run as pods (issue 18).

ClusterIPs come from 198.19.224.0/20 and the API server listens on the real node's bridge
address (198.19.N.1): both inside the benchmarking range the project creates its networks in
(tools/kube/cluster.py, realnode.py). Nothing here is dialled from the host: the pods do the
dialling and the test reads what they printed.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import textwrap
import time
from typing import Any

from kubernetes import client

from tfkube.render import OPERATOR_IMAGE

from ._support import KubeCluster, RealNode, wait_for

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
    volume, mount = token_volume()
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
                }
            ],
        },
    }


def pod_done(kube: KubeCluster, ns: str, name: str) -> client.V1Pod | None:
    p = kube.core.read_namespaced_pod(name, ns)
    return p if p.status.phase in ("Succeeded", "Failed") else None


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

    wait_for("the echo pod running", echo_ready, 120, 0.5)
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
