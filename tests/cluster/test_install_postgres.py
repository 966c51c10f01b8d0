"""`tfkube install --server --database postgres` against the real API server (KWOK cluster,
no pod runs): the password Secret is created once and never replaced, sent before the
StatefulSet that mounts it, and validated by a dry run without being stored. PostgreSQL
running in a pod: tests/cluster/test_real_node_postgres.py."""

from __future__ import annotations

import base64

import pytest
from kubernetes.client.exceptions import ApiException

from tfkube.engines.kubernetes import install
from tfkube.engines.kubernetes._install import _ensure_postgres_secret  # the engine's own step
from tfkube.kube.rest import Kube
from tfkube.render import POSTGRES_SECRET, ServerInstall

from ._support import KubeCluster


def _password(kube: KubeCluster, ns: str) -> str:
    secret = kube.core.read_namespaced_secret(POSTGRES_SECRET, ns)
    return base64.b64decode(secret.data["password"]).decode()


def test_the_password_secret_is_made_once(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    kube, ns = kube_cluster, kube_namespace
    first = _ensure_postgres_secret(Kube(kube.api_client), ns, dry_run=False)
    assert first.outcome == "created with a generated password"
    password = _password(kube, ns)
    assert len(password) >= 40  # 32 random bytes, URL-safe base64
    again = _ensure_postgres_secret(Kube(kube.api_client), ns, dry_run=False)
    assert again.outcome.startswith("kept")
    assert _password(kube, ns) == password
    labels = kube.core.read_namespaced_secret(POSTGRES_SECRET, ns).metadata.labels
    assert labels["app.kubernetes.io/component"] == "database"


def test_a_dry_run_validates_the_secret_before_the_statefulset_and_stores_nothing(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    options = ServerInstall(database="postgres", data_claim="data", database_claim="pg")
    said: list[str] = []
    done = install(
        kube_cluster.api_client,
        namespace=kube_namespace,
        dry_run=True,
        server=options,
        say=said.append,
    )
    order = [(a.kind, a.name) for a in done]
    secret = order.index(("Secret", POSTGRES_SECRET))
    assert secret < order.index(("StatefulSet", "tfkube-postgres"))
    assert {a.outcome for a in done} == {"validated"}
    assert any("PostgreSQL" in line and "claim pg" in line for line in said), said
    with pytest.raises(ApiException) as refused:  # a dry run stored nothing
        kube_cluster.core.read_namespaced_secret(POSTGRES_SECRET, kube_namespace)
    assert refused.value.status == 404
