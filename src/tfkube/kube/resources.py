"""Every kind of object tfkube talks to the API server about, declared once: its API group,
version, plural, whether it lives in a namespace and which subresources tfkube reaches.
Every URL is built here (`Resource.url`); no caller writes a path or guesses a plural.

    TFJOB.url("team-a", "mnist", "status")
        -> /apis/tfkube.io/v1alpha1/namespaces/team-a/tfjobs/mnist/status
    POD.url("team-a")         -> /api/v1/namespaces/team-a/pods
    POD.url()                 -> /api/v1/pods                (every namespace)
    NODE.url(name="node-1")   -> /api/v1/nodes/node-1        (cluster-scoped)
    resource_for("apps/v1", "Deployment") -> DEPLOYMENT      (the pair objects carry)

A kind missing here is a `LookupError`, not a guessed path: declare it (and the unit test
of URL shapes shows its real one). Pure: stands on `names` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfkube.kube.names import GROUP, PLURAL, VERSION


@dataclass(frozen=True)
class Resource:
    """One kind of API object, as the API server's discovery describes it."""

    group: str
    """The API group; empty for the core group (`/api/v1`)."""
    version: str
    kind: str
    plural: str
    """The resource name in paths and RBAC rules (not always `kind.lower() + "s"`)."""
    namespaced: bool
    subresources: frozenset[str] = frozenset()
    """The subresources tfkube reaches (`status`, `log`, `proxy`); others are refused, so
    a typo is an error, not a 404."""

    @property
    def api_version(self) -> str:
        """`group/version` as objects carry it (`v1` for the core group)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def describes(self, obj: Mapping[str, Any]) -> bool:
        """Whether an object (a dict as the API returns it) is of this kind."""
        return obj.get("apiVersion") == self.api_version and obj.get("kind") == self.kind

    def url(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The path of the objects of one namespace (every namespace when None), of one
        object (`name`), or of one object's subresource.

        Raises ValueError for what the API has no path for: a namespace given to a
        cluster-scoped kind, a namespaced object named without its namespace, a
        subresource without an object or one not declared, a name that is not one
        path segment."""
        if namespace is not None and not self.namespaced:
            raise ValueError(f"{self.kind} is cluster-scoped: no namespace {namespace!r}")
        if name is not None and self.namespaced and namespace is None:
            raise ValueError(f"{self.kind} {name!r}: a namespaced object needs its namespace")
        for part in (namespace, name):
            if part is not None and (not part or "/" in part or part in (".", "..")):
                raise ValueError(f"{self.kind}: {part!r} is not a name")
        if subresource is not None:
            if name is None:
                raise ValueError(f"{self.kind}/{subresource}: only of an object, by name")
            if subresource not in self.subresources:
                raise ValueError(f"{self.kind} has no subresource {subresource!r} declared")
        parts = ["/api" if not self.group else f"/apis/{self.group}", self.version]
        if namespace is not None:
            parts += ["namespaces", namespace]
        parts.append(self.plural)
        parts += [p for p in (name, subresource) if p is not None]
        return "/".join(parts)


def _core(kind: str, plural: str, namespaced: bool = True, *sub: str) -> Resource:
    return Resource("", "v1", kind, plural, namespaced, frozenset(sub))


TFJOB = Resource(GROUP, VERSION, "TFJob", PLURAL, True, frozenset({"status"}))
CRD = Resource(
    "apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False
)

NAMESPACE = _core("Namespace", "namespaces", False)
NODE = _core("Node", "nodes", False)
POD = _core("Pod", "pods", True, "status", "log")
SERVICE = _core("Service", "services", True, "proxy")
"""`proxy` with the name `<service>:<port>`: the API server's proxy to the Service's pods."""
CONFIG_MAP = _core("ConfigMap", "configmaps")
SECRET = _core("Secret", "secrets")
PERSISTENT_VOLUME_CLAIM = _core("PersistentVolumeClaim", "persistentvolumeclaims")
SERVICE_ACCOUNT = _core("ServiceAccount", "serviceaccounts")
EVENT = _core("Event", "events")
RESOURCE_QUOTA = _core("ResourceQuota", "resourcequotas")
LIMIT_RANGE = _core("LimitRange", "limitranges")

JOB = Resource("batch", "v1", "Job", "jobs", True)
DEPLOYMENT = Resource("apps", "v1", "Deployment", "deployments", True)
STATEFUL_SET = Resource("apps", "v1", "StatefulSet", "statefulsets", True)
DAEMON_SET = Resource("apps", "v1", "DaemonSet", "daemonsets", True)
"""The node data cache's (`tfkube install --server`)."""
HORIZONTAL_POD_AUTOSCALER = Resource(
    "autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", True
)
"""An autoscaled model server's (`tfkube.render.render_autoscaler`)."""

PRIORITY_CLASS = Resource("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False)
"""A team's priority as the scheduler sees it (`tfkube.kube.names.team_priority_class`)."""

STORAGE_CLASS = Resource("storage.k8s.io", "v1", "StorageClass", "storageclasses", False)
"""Read by `tfkube install`: is there a default class for the claims it would make?"""

CLUSTER_ROLE = Resource("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False)
CLUSTER_ROLE_BINDING = Resource(
    "rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False
)

NETWORK_POLICY = Resource("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", True)
"""A team namespace's and the server's own (`tfkube.render.TenantNetwork`)."""
ENDPOINT_SLICE = Resource("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", True)
"""Read: the `kubernetes` Service's, the API server's own addresses."""

VOLCANO_POD_GROUP = Resource("scheduling.volcano.sh", "v1beta1", "PodGroup", "podgroups", True)
"""A gang for Volcano."""
COSCHEDULING_POD_GROUP = Resource("scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups", True)
"""A gang for scheduler-plugins' Coscheduling."""

RESOURCES: tuple[Resource, ...] = (
    TFJOB,
    CRD,
    NAMESPACE,
    NODE,
    POD,
    SERVICE,
    CONFIG_MAP,
    SECRET,
    PERSISTENT_VOLUME_CLAIM,
    SERVICE_ACCOUNT,
    EVENT,
    RESOURCE_QUOTA,
    LIMIT_RANGE,
    JOB,
    DEPLOYMENT,
    STATEFUL_SET,
    DAEMON_SET,
    HORIZONTAL_POD_AUTOSCALER,
    PRIORITY_CLASS,
    STORAGE_CLASS,
    CLUSTER_ROLE,
    CLUSTER_ROLE_BINDING,
    NETWORK_POLICY,
    ENDPOINT_SLICE,
    VOLCANO_POD_GROUP,
    COSCHEDULING_POD_GROUP,
)
"""Every kind tfkube reads, creates, applies or deletes."""

_BY_TYPE = {(r.api_version, r.kind): r for r in RESOURCES}


def resource_for(api_version: str, kind: str) -> Resource:
    """The declared resource of an object's `apiVersion` and `kind`.

    Raises LookupError for a kind tfkube does not declare (rather than guess its path)."""
    try:
        return _BY_TYPE[(api_version, kind)]
    except KeyError:
        raise LookupError(
            f"{kind} ({api_version}) is not a resource tfkube declares: add it to "
            "tfkube.kube.resources"
        ) from None
