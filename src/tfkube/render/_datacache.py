"""The node data cache's objects (`tfkube install --server`, unless `--no-data-cache`): a
DaemonSet of `python -m tfkube.datacache` in tfkube's system namespace and a Service with
`internalTrafficPolicy: Local`, so a replica pod reaching it is answered by the cache on
its own node only. It is the one tfkube pod with a hostPath (its cache folder): team
namespaces enforce Pod Security `restricted` and could not have one; this pod runs as a
non-root user with a read-only root filesystem, no capability, no ServiceAccount token and
bounded resources, its folder the only thing it writes (docs/security.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tfkube.kube.names import LABEL_MANAGED_BY, MANAGED_BY

DATACACHE_NAME = "tfkube-datacache"
DATACACHE_PORT = 8470
DATACACHE_USER = 65532
DEFAULT_DATACACHE_PATH = "/var/lib/tfkube-datacache"
DEFAULT_DATACACHE_LIMIT = "20GiB"
_MOUNT = "/cache"


@dataclass(frozen=True)
class DataCacheInstall:
    """Where and how large the cache is on every node."""

    host_path: str = DEFAULT_DATACACHE_PATH
    """The folder on each node (made if missing; only the cache's user may read it)."""
    limit: str = DEFAULT_DATACACHE_LIMIT
    """At most this much on each node's disk (least recently used tars evicted first)."""


def datacache_url(namespace: str) -> str:
    """How replica pods reach their node's cache (cluster DNS; the Service answers from
    the pod's own node only)."""
    return f"http://{DATACACHE_NAME}.{namespace}.svc:{DATACACHE_PORT}"


def _labels() -> dict[str, str]:
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        "app.kubernetes.io/name": "tfkube",
        "app.kubernetes.io/component": "datacache",
    }


def _selector() -> dict[str, str]:
    return {"app.kubernetes.io/name": "tfkube", "app.kubernetes.io/component": "datacache"}


_LOCKED_DOWN = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


def datacache_manifests(
    namespace: str, image: str, server_url: str, options: DataCacheInstall
) -> list[dict[str, Any]]:
    """The DaemonSet and its node-local Service, in the order to apply them."""
    volume = {"name": "cache", "hostPath": {"path": options.host_path, "type": "DirectoryOrCreate"}}
    # hostPath's DirectoryOrCreate makes the folder root's: this init container (root, with
    # CHOWN and FOWNER only, no network use) gives it to the cache's user, mode 0700.
    owner = {
        "name": "own-cache-folder",
        "image": image,
        "command": ["sh", "-c",
                    f"chown {DATACACHE_USER}:{DATACACHE_USER} {_MOUNT} && chmod 0700 {_MOUNT}"],
        "securityContext": {
            "runAsUser": 0,
            "runAsNonRoot": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"], "add": ["CHOWN", "FOWNER"]},
        },
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
        "volumeMounts": [{"name": "cache", "mountPath": _MOUNT}],
    }  # fmt: skip
    cache = {
        "name": "datacache",
        "image": image,
        "command": ["python3", "-m", "tfkube.datacache", "--server", server_url,
                    "--dir", _MOUNT, "--limit", options.limit, "--port", str(DATACACHE_PORT)],
        "ports": [{"name": "http", "containerPort": DATACACHE_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 5},
        "securityContext": _LOCKED_DOWN,
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                      "limits": {"cpu": "1", "memory": "256Mi"}},
        "volumeMounts": [{"name": "cache", "mountPath": _MOUNT}],
    }  # fmt: skip
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": DATACACHE_NAME, "namespace": namespace, "labels": _labels()},
            "spec": {
                "selector": {"matchLabels": _selector()},
                "template": {
                    "metadata": {"labels": _labels()},
                    "spec": {
                        "automountServiceAccountToken": False,  # it never calls the API
                        "enableServiceLinks": False,
                        # On every node replicas may run on, tainted ones included.
                        "tolerations": [{"operator": "Exists"}],
                        "securityContext": {
                            "runAsNonRoot": True,
                            "runAsUser": DATACACHE_USER,
                            "runAsGroup": DATACACHE_USER,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "initContainers": [owner],
                        "containers": [cache],
                        "volumes": [volume],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": DATACACHE_NAME, "namespace": namespace, "labels": _labels()},
            "spec": {
                "type": "ClusterIP",
                "selector": _selector(),
                # Only the cache on the caller's own node answers (no other node's disk).
                "internalTrafficPolicy": "Local",
                "ports": [
                    {
                        "name": "http",
                        "port": DATACACHE_PORT,
                        "targetPort": "http",
                        "protocol": "TCP",
                    }
                ],
            },
        },
    ]
