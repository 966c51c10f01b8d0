"""The cluster-wide objects `tfkube install` applies (and deploy/ holds): the CRD, the
operator's namespace, ServiceAccount, RBAC and Deployment. Pure; generated here so the
installed package (which has no deploy/ folder) and the repository never differ - a test
compares deploy/*.yaml with this output.

RBAC is the operator's least privilege: it reads and patches TFJobs (not create/delete:
users do that), writes their status, and creates/deletes exactly the kinds `render_job`
emits, in any namespace. Two extra ClusterRoles aggregate into the built-in `edit` and
`view` roles so namespace users can work with TFJobs without a custom binding.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from tfkube import __version__
from tfkube.kube.names import (
    DATA_CACHE_ENV,
    GROUP,
    LABEL_MANAGED_BY,
    LOGS_CLAIM_ENV,
    LOGS_SIZE_ENV,
    LOGS_STORAGE_CLASS_ENV,
    MANAGED_BY,
    OPERATOR_NAMESPACE_ENV,
    PLURAL,
    REGISTRY_SECRET_ENV,
)
from tfkube.render._crd import crd
from tfkube.render._storage import DEFAULT_CLAIM_SIZE, StorageDefaults

OPERATOR_NAMESPACE = "tfkube-system"
OPERATOR_NAME = "tfkube-operator"
OPERATOR_IMAGE = f"ghcr.io/tfkube/operator:{__version__}"
REGISTRY_SECRET = "tfkube-registry"
"""The platform's image-pull Secret, in the operator's namespace; copied into every job's
namespace (optional: without it jobs pull anonymously)."""

_CREATE_DELETE = ["get", "list", "watch", "create", "update", "patch", "delete"]

TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
API_ACCESS_VOLUME = "kube-api-access"
API_ACCESS_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True)
class Placement:
    """Where tfkube's own pods (the operator, the platform server) run: a node selector
    and tolerations, e.g. a pool of nodes kept for the platform by a taint
    (`tfkube install --node-selector K=V --toleration K[=V][:EFFECT]`)."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, str], ...] = ()

    def pod_fields(self) -> dict[str, Any]:
        """The pod spec's `nodeSelector` and `tolerations` (none when not given)."""
        out: dict[str, Any] = {}
        if self.node_selector:
            out["nodeSelector"] = dict(self.node_selector)
        if self.tolerations:
            out["tolerations"] = [dict(t) for t in self.tolerations]
        return out

    def flags(self, node_selector: str, toleration: str) -> list[str]:
        """The placement as command-line flags of those names (what `parse_node_selector`
        and `parse_toleration` read back)."""
        out: list[str] = []
        for key, value in self.node_selector.items():
            out += [node_selector, f"{key}={value}"]
        for t in self.tolerations:
            text = t["key"] + (f"={t['value']}" if t.get("operator") == "Equal" else "")
            out += [toleration, text + (f":{t['effect']}" if t.get("effect") else "")]
        return out


def parse_node_selector(values: list[str], flag: str = "--node-selector") -> dict[str, str]:
    """`--node-selector KEY=VALUE` (repeatable; or another `flag` of that form) as a node
    selector; ValueError naming the flag and the form for anything else."""
    out: dict[str, str] = {}
    for value in values:
        key, sep, label = value.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{flag} {value!r}: give KEY=VALUE, e.g. {flag} pool=platform")
        out[key.strip()] = label.strip()
    return out


def parse_toleration(value: str, flag: str = "--toleration") -> dict[str, str]:
    """`--toleration KEY[=VALUE][:EFFECT]` (or another `flag` of that form) as a
    toleration (`Equal` with a value, else `Exists`; every effect when none is given);
    ValueError naming the flag otherwise."""
    head, colon, effect = value.partition(":")
    key, eq, tolerated = head.partition("=")
    if not key.strip() or (colon and effect not in TOLERATION_EFFECTS):
        raise ValueError(
            f"{flag} {value!r}: give KEY[=VALUE][:EFFECT] with EFFECT one of "
            f"{', '.join(TOLERATION_EFFECTS)}, e.g. {flag} pool=platform:NoSchedule"
        )
    out = {"key": key.strip(), "operator": "Equal" if eq else "Exists"}
    if eq:
        out["value"] = tolerated.strip()
    if colon:
        out["effect"] = effect
    return out


def api_access() -> tuple[dict[str, Any], dict[str, Any]]:
    """The pod's ServiceAccount token (bound, rotated by the kubelet), the cluster CA and
    the namespace, where in-cluster clients read them: a projected volume and its mount,
    what the ServiceAccount admission plugin would add, given explicitly (with
    `automountServiceAccountToken: false`) so tfkube's pods reach the API server the same
    way on a cluster that runs without that plugin."""
    volume = {
        "name": API_ACCESS_VOLUME,
        "projected": {
            "defaultMode": 0o444,
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                {
                    "configMap": {
                        "name": "kube-root-ca.crt",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
                {
                    "downwardAPI": {
                        "items": [
                            {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}
                        ]
                    }
                },
            ],
        },
    }
    mount = {"name": API_ACCESS_VOLUME, "mountPath": API_ACCESS_PATH, "readOnly": True}
    return volume, mount


OPERATOR_RULES: tuple[dict[str, Any], ...] = (
    # TFJobs: watched and patched (kopf's finalizer and progress annotations), never created.
    # ... and deleted by the operator when ttlSecondsAfterFinished has passed.
    {
        "apiGroups": [GROUP],
        "resources": [PLURAL],
        "verbs": ["get", "list", "watch", "patch", "delete"],
    },
    {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "verbs": ["get", "patch"]},
    # Owner references with blockOwnerDeletion need update on the owner's finalizers.
    {"apiGroups": [GROUP], "resources": [f"{PLURAL}/finalizers"], "verbs": ["update"]},
    # What render_job emits.
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": _CREATE_DELETE},
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": _CREATE_DELETE},
    {
        "apiGroups": [""],
        "resources": [
            "configmaps",
            "persistentvolumeclaims",
            "secrets",
            "services",
            "resourcequotas",
            "limitranges",
        ],
        "verbs": _CREATE_DELETE,
    },
    {
        "apiGroups": ["scheduling.volcano.sh", "scheduling.x-k8s.io"],
        "resources": ["podgroups"],
        "verbs": _CREATE_DELETE,
    },
    # Replica state is read from pods; a PS or a replica that must stop is deleted.
    # (a finished job's PS pods in one deletecollection call).
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["get", "list", "watch", "delete", "deletecollection"],
    },
    # A pod stranded on a lost node is marked Failed (tfkube.kube.observe.is_stranded).
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
    # Events: the operator's own; and read, for the scheduler's `Preempted` Events of
    # pods, which outlive the preempted pods (tfkube.kube.observe.preemptions).
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch", "list"]},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
    # kopf discovers resources and namespaces while it runs.
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
)


def _labels(component: str) -> dict[str, str]:
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        "app.kubernetes.io/name": "tfkube",
        "app.kubernetes.io/component": component,
    }


def rbac_manifests(namespace: str = OPERATOR_NAMESPACE) -> list[dict[str, Any]]:
    """ServiceAccount, the operator's ClusterRole and binding, and the user roles."""
    user_verbs = ["get", "list", "watch", "create", "update", "patch", "delete"]
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {
                "name": OPERATOR_NAME,
                "namespace": namespace,
                "labels": _labels("operator"),
            },
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": OPERATOR_NAME, "labels": _labels("operator")},
            "rules": [dict(r) for r in OPERATOR_RULES],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": OPERATOR_NAME, "labels": _labels("operator")},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": OPERATOR_NAME,
            },
            "subjects": [{"kind": "ServiceAccount", "name": OPERATOR_NAME, "namespace": namespace}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {
                "name": "tfkube-edit",
                "labels": {
                    **_labels("rbac"),
                    "rbac.authorization.k8s.io/aggregate-to-admin": "true",
                    "rbac.authorization.k8s.io/aggregate-to-edit": "true",
                },
            },
            "rules": [{"apiGroups": [GROUP], "resources": [PLURAL], "verbs": user_verbs}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {
                "name": "tfkube-view",
                "labels": {
                    **_labels("rbac"),
                    "rbac.authorization.k8s.io/aggregate-to-view": "true",
                },
            },
            "rules": [
                {
                    "apiGroups": [GROUP],
                    "resources": [PLURAL, f"{PLURAL}/status"],
                    "verbs": ["get", "list", "watch"],
                }
            ],
        },
    ]


def storage_env(storage: StorageDefaults | None) -> list[dict[str, Any]]:
    """The operator's environment for the administrator's logs storage (none: jobs that
    name no logs storage keep their logs in their pods)."""
    if storage is None:
        return []
    env = []
    if storage.logs_storage_class:
        env.append({"name": LOGS_STORAGE_CLASS_ENV, "value": storage.logs_storage_class})
        if storage.logs_size != DEFAULT_CLAIM_SIZE:
            env.append({"name": LOGS_SIZE_ENV, "value": storage.logs_size})
    if storage.logs_claim:
        env.append({"name": LOGS_CLAIM_ENV, "value": storage.logs_claim})
    return env


def operator_manifests(
    namespace: str = OPERATOR_NAMESPACE,
    image: str = OPERATOR_IMAGE,
    storage: StorageDefaults | None = None,
    placement: Placement | None = None,
    data_cache: str | None = None,
) -> list[dict[str, Any]]:
    """The operator's Deployment: one replica, `Recreate` so two never reconcile at once;
    with `storage`, what it gives jobs that name no logs storage; with `placement`, its
    node selector and tolerations; with `data_cache`, the node data cache's address it
    gives replicas that fetch data."""
    labels = _labels("operator")
    access_volume, access_mount = api_access()
    selector = {"app.kubernetes.io/name": "tfkube", "app.kubernetes.io/component": "operator"}
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": OPERATOR_NAME, "namespace": namespace, "labels": labels},
            "spec": {
                "replicas": 1,
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": OPERATOR_NAME,
                        "automountServiceAccountToken": False,  # api_access(), explicitly
                        **(placement or Placement()).pod_fields(),
                        "securityContext": {
                            "runAsNonRoot": True,
                            "runAsUser": 65532,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "containers": [
                            {
                                "name": "operator",
                                "image": image,
                                "command": ["tfkube", "operator"],
                                "env": [
                                    {
                                        "name": OPERATOR_NAMESPACE_ENV,
                                        "valueFrom": {
                                            "fieldRef": {"fieldPath": "metadata.namespace"}
                                        },
                                    },
                                    {"name": REGISTRY_SECRET_ENV, "value": REGISTRY_SECRET},
                                    *storage_env(storage),
                                    *(
                                        [{"name": DATA_CACHE_ENV, "value": data_cache}]
                                        if data_cache
                                        else []
                                    ),
                                ],
                                "resources": {
                                    "requests": {"cpu": "100m", "memory": "256Mi"},
                                    "limits": {"memory": "1Gi"},
                                },
                                "securityContext": {
                                    "allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]},
                                },
                                # The root filesystem is read-only; clients cache here.
                                "volumeMounts": [
                                    {"name": "tmp", "mountPath": "/tmp"},
                                    access_mount,
                                ],
                            }
                        ],
                        "volumes": [{"name": "tmp", "emptyDir": {}}, access_volume],
                    },
                },
            },
        }
    ]


def namespace_manifest(namespace: str = OPERATOR_NAMESPACE) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": namespace, "labels": _labels("operator")},
    }


def install_manifests(
    namespace: str = OPERATOR_NAMESPACE,
    image: str = OPERATOR_IMAGE,
    storage: StorageDefaults | None = None,
    placement: Placement | None = None,
    data_cache: str | None = None,
) -> list[dict[str, Any]]:
    """Everything `tfkube install` applies, in order: CRD, namespace, RBAC, operator."""
    return [
        crd(),
        namespace_manifest(namespace),
        *rbac_manifests(namespace),
        *operator_manifests(namespace, image, storage, placement, data_cache),
    ]


DEPLOY_FILES: dict[str, str] = {
    "crd.yaml": "The TFJob CustomResourceDefinition",
    "rbac.yaml": "The operator's namespace, ServiceAccount and ClusterRoles",
    "operator.yaml": "The operator's Deployment",
}


def deploy_documents() -> dict[str, list[dict[str, Any]]]:
    """deploy/<file> -> its objects (the default namespace and image)."""
    return {
        "crd.yaml": [crd()],
        "rbac.yaml": [namespace_manifest(), *rbac_manifests()],
        "operator.yaml": operator_manifests(),
    }


def dump_yaml(objects: list[dict[str, Any]], header: str = "") -> str:
    """Multi-document YAML that `kubectl apply -f -` accepts, in the given order."""
    body = yaml.safe_dump_all(objects, sort_keys=False, explicit_start=True, width=100)
    return header + body


def deploy_file_texts() -> dict[str, str]:
    """deploy/<file> -> its exact text (what the drift test compares)."""
    return {
        name: dump_yaml(
            objects,
            f"# {DEPLOY_FILES[name]}.\n# Generated by `tfkube install --write-manifests deploy`;"
            " do not edit.\n",
        )
        for name, objects in deploy_documents().items()
    }
