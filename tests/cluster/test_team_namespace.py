"""A team made where its namespace is still being deleted (a team removed and made again,
tfkube uninstalled and installed again, one test module's platform after another's): the
API server refuses anything new in a Terminating namespace, so the Kubernetes engine waits
until it is gone and makes it anew, or says after its bound what holds it. Seen in CI
(2026-12-06): a server's setup answered 502 "... forbidden: unable to create new content in
namespace tfkube-default because it is being terminated" while the module before it was
still being cleaned away."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tfkube.engines import Tenant
from tfkube.engines.kubernetes import KubernetesEngine, NamespaceTerminating

from ._support import KubeCluster

HOLD = "tfkube.test/hold"
"""A finalizer of the test's own: the namespace stays Terminating until the test lifts it."""


def _release(kube: KubeCluster, namespace: str) -> None:
    """Lift `HOLD` (a JSON patch: a strategic merge patch merges finalizer lists)."""
    try:
        kube.core.patch_namespace(
            namespace, [{"op": "replace", "path": "/metadata/finalizers", "value": []}]
        )
    except ApiException as exc:
        if exc.status != 404:  # gone already
            raise


@pytest.fixture
def terminating(kube_cluster: KubeCluster) -> Iterator[str]:
    """A namespace that held a team's objects, deleted and held Terminating by `HOLD`."""
    kube = kube_cluster
    name = f"tfkube-again-{uuid.uuid4().hex[:6]}"
    meta = client.V1ObjectMeta(name=name, finalizers=[HOLD])
    kube.core.create_namespace(client.V1Namespace(metadata=meta))
    cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="left"), data={"a": "b"})
    kube.core.create_namespaced_config_map(name, cm)
    kube.core.delete_namespace(name)
    assert kube.core.read_namespace(name).metadata.deletion_timestamp is not None
    try:
        yield name
    finally:
        _release(kube, name)
        with contextlib.suppress(ApiException):
            kube.core.delete_namespace(name)


def test_a_team_is_made_once_its_namespace_being_deleted_is_gone(
    kube_cluster: KubeCluster, terminating: str, tmp_path: Path
) -> None:
    kube = kube_cluster
    engine = KubernetesEngine(tmp_path, api_client=kube.api_client)
    tenant = Tenant("again", terminating, {"cpu": 4.0}, "restricted", 0)
    with ThreadPoolExecutor(1) as pool:
        made = pool.submit(engine.prepare_tenant, tenant)
        time.sleep(2.0)  # not a wait for a state: the engine must still be waiting
        assert not made.done(), made.exception()  # the old code: refused at once (forbidden)
        released = time.monotonic()
        _release(kube, terminating)
        made.result(timeout=120)
    took = time.monotonic() - released
    namespace = kube.core.read_namespace(terminating)
    assert namespace.metadata.deletion_timestamp is None
    assert HOLD not in (namespace.metadata.finalizers or [])  # a new namespace, not the old one
    assert not kube.core.list_namespaced_config_map(
        terminating, field_selector="metadata.name=left"
    ).items
    net = client.NetworkingV1Api(kube.api_client)
    assert [p.metadata.name for p in net.list_namespaced_network_policy(terminating).items] == [
        "tfkube-tenant"
    ]
    quota = kube.core.list_namespaced_resource_quota(terminating).items
    assert [q.spec.hard["requests.cpu"] for q in quota] == ["4"]
    print(f"\n[team namespace] made {took:.1f}s after the old namespace's finalizer was lifted")


def test_a_namespace_that_stays_terminating_is_named_with_what_holds_it(
    kube_cluster: KubeCluster, terminating: str, tmp_path: Path
) -> None:
    engine = KubernetesEngine(tmp_path, api_client=kube_cluster.api_client)
    engine.namespace_gone_seconds = 1.0
    tenant = Tenant("again", terminating, {}, "restricted", 0)
    with pytest.raises(NamespaceTerminating) as caught:
        engine.prepare_tenant(tenant)
    message = str(caught.value)
    assert f"namespace {terminating}" in message
    assert HOLD in message  # what holds it
    assert f"kubectl get namespace {terminating} -o yaml" in message  # where to look
    assert kube_cluster.core.read_namespace(terminating).metadata.deletion_timestamp
    net = client.NetworkingV1Api(kube_cluster.api_client)
    assert not net.list_namespaced_network_policy(terminating).items  # nothing half-made
