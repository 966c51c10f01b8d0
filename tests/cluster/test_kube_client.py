"""`tfkube.kube`'s client against the real API server: every declared resource is where the
API server's discovery says (group, version, plural, scope, subresources) and lists at its
URL; real refusals arrive as their typed errors, with the Status details kept."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tfkube.engines.kubernetes import apply_objects
from tfkube.kube.errors import (
    AlreadyExists,
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    QuotaRefused,
)
from tfkube.kube.resources import (
    CONFIG_MAP,
    NAMESPACE,
    RESOURCE_QUOTA,
    RESOURCES,
    TFJOB,
    Resource,
)
from tfkube.kube.rest import Kube, api_client_from

from ._support import POD_GROUP_CRDS, KubeCluster, wait_for


def _discovery_path(resource: Resource) -> str:
    """The API server's list of a group version's resources (the test's oracle)."""
    return f"/apis/{resource.group}/{resource.version}" if resource.group else "/api/v1"


@pytest.fixture(scope="module")
def kube(crd: KubeCluster) -> Kube:
    """The TFJob CRD (installed by `crd`) and the stand-in PodGroup CRDs, discovered."""
    apply_objects(crd.api_client, list(POD_GROUP_CRDS))
    kube = Kube(crd.api_client)

    def discovered() -> bool:
        try:
            for resource in RESOURCES:
                kube.request("GET", _discovery_path(resource))
        except NotFound:
            return False
        return True

    wait_for("every declared group version in discovery", discovered, 60)
    return kube


def _configmap(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": CONFIG_MAP.api_version,
        "kind": CONFIG_MAP.kind,
        "metadata": {"name": name, "namespace": namespace},
        "data": {"a": "1"},
    }


@pytest.mark.parametrize(
    "resource", [pytest.param(r, id=f"{r.kind}.{r.group or 'core'}") for r in RESOURCES]
)
def test_every_declared_resource_is_where_discovery_says(
    kube: Kube, kube_namespace: str, resource: Resource
) -> None:
    listed = kube.request("GET", _discovery_path(resource))
    found = {r["name"]: r for r in listed["resources"]}
    assert resource.plural in found, sorted(found)
    assert found[resource.plural]["kind"] == resource.kind
    assert found[resource.plural]["namespaced"] is resource.namespaced
    for sub in resource.subresources:
        assert f"{resource.plural}/{sub}" in found
    kube.list(resource, kube_namespace if resource.namespaced else None, page=1)
    if resource.namespaced:
        kube.list(resource, None, page=1)  # every namespace


def test_missing_and_existing_objects(kube: Kube, kube_namespace: str) -> None:
    ns = kube_namespace
    assert kube.get(CONFIG_MAP, ns, "missing") is None
    with pytest.raises(NotFound) as missing:
        kube.request("DELETE", CONFIG_MAP.url(ns, "missing"))
    assert missing.value.details["name"] == "missing"
    made = kube.request("POST", CONFIG_MAP.url(ns), body=_configmap("cm", ns))
    assert made["metadata"]["name"] == "cm"
    with pytest.raises(AlreadyExists) as taken:
        kube.request("POST", CONFIG_MAP.url(ns), body=_configmap("cm", ns))
    assert taken.value.reason == "AlreadyExists"
    again = kube.request("POST", CONFIG_MAP.url(ns), body=_configmap("cm", ns), allow=(Conflict,))
    assert again is None  # AlreadyExists is a Conflict

    stale = dict(made, data={"a": "2"})
    kube.request("PUT", CONFIG_MAP.url(ns, "cm"), body=stale)
    with pytest.raises(Conflict) as raced:  # the same resourceVersion twice
        kube.request("PUT", CONFIG_MAP.url(ns, "cm"), body=dict(made, data={"a": "3"}))
    assert type(raced.value) is Conflict


def test_an_invalid_object_names_its_fields(kube: Kube, kube_namespace: str) -> None:
    ns = kube_namespace
    with pytest.raises(Invalid) as bad_name:
        kube.request("POST", CONFIG_MAP.url(ns), body=_configmap("Not_A_Name", ns))
    assert "metadata.name" in {c.field for c in bad_name.value.causes}
    tfjob = {
        "apiVersion": TFJOB.api_version,
        "kind": TFJOB.kind,
        "metadata": {"name": "bad", "namespace": ns},
        "spec": {"replicas": {"worker": {"replicas": "many"}}},
    }
    with pytest.raises(Invalid) as bad_spec:
        kube.request("POST", TFJOB.url(ns), body=tfjob)
    fields = {c.field for c in bad_spec.value.causes}
    assert "spec.replicas.worker.replicas" in fields, bad_spec.value.causes


def test_a_quota_refusal_is_told_from_an_rbac_refusal(
    kube: Kube, kube_namespace: str, operator_kubeconfig: Path
) -> None:
    ns = kube_namespace
    quota = {
        "apiVersion": RESOURCE_QUOTA.api_version,
        "kind": RESOURCE_QUOTA.kind,
        "metadata": {"name": "none", "namespace": ns},
        "spec": {"hard": {"configmaps": "0"}},
    }
    kube.request("POST", RESOURCE_QUOTA.url(ns), body=quota)

    def refused() -> QuotaRefused | None:
        # The quota admission plugin works from a cache of the namespace's quotas: on a
        # busy control plane a quota made a moment ago may not be in it yet, and a
        # ConfigMap then gets through (CI saw it). Try until the quota holds.
        name = f"cm-{time.monotonic_ns()}"
        try:
            kube.request("POST", CONFIG_MAP.url(ns), body=_configmap(name, ns))
        except QuotaRefused as exc:
            return exc
        kube.request("DELETE", CONFIG_MAP.url(ns, name))
        return None

    full = wait_for("the quota to refuse a ConfigMap", refused, 60)
    assert "quota" in full.message

    operator_api = api_client_from(operator_kubeconfig)  # may read namespaces, not make them
    try:
        as_operator = Kube(operator_api)
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"{ns}-x"}}
        with pytest.raises(Forbidden) as refused:
            as_operator.request("POST", NAMESPACE.url(), body=namespace)
    finally:
        operator_api.close()
    assert type(refused.value) is Forbidden
    assert refused.value.status == 403


def test_a_bad_continue_token_is_a_bad_request(kube: Kube, kube_namespace: str) -> None:
    with pytest.raises(BadRequest) as bad:
        kube.request(
            "GET", CONFIG_MAP.url(kube_namespace), query={"limit": 1, "continue": "not-a-token"}
        )
    assert isinstance(bad.value, ApiError)
    assert bad.value.status == 400
