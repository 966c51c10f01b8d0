"""The node data cache as `tfkube install --server --data-cache` runs it: a DaemonSet pod
of tfkube's image on the real node (its hostPath folder under the test's temp dir), its
node-local Service, and two jobs' worker pods reading their data set through it: the
second job's pods fetch 0 bytes from the server (the cache's `/metrics`, read from the
host at the cache pod's address).

The platform of test_real_node_serving.py (the server on the real node's bridge); the
DaemonSet is given the server's address there (in a real install it is the server's
Service)."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client

from server.test_team_secrets import digits_npz
from tfkube.engines.kubernetes import apply_objects
from tfkube.kube.names import DATA_CACHE_ENV
from tfkube.render import (
    DATACACHE_NAME,
    DATACACHE_PORT,
    OPERATOR_IMAGE,
    OPERATOR_NAMESPACE,
    DataCacheInstall,
    datacache_manifests,
    datacache_url,
)

from ._support import KubeCluster, RealNode, wait_for
from .test_real_node_serving import JOB_TIMEOUT, Team, node_platform
from .test_real_node_shipping import job_manifest


@pytest.fixture(scope="module")
def team(
    kube_cluster: KubeCluster,
    real_node: RealNode,
    operator_kubeconfig: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Team]:
    tmp = tmp_path_factory.mktemp("node-datacache")
    env = {DATA_CACHE_ENV: datacache_url(OPERATOR_NAMESPACE)}
    with node_platform(
        kube_cluster, real_node, operator_kubeconfig, tmp, outputs=False, operator_env=env
    ) as made:
        objects = datacache_manifests(
            OPERATOR_NAMESPACE,
            OPERATOR_IMAGE,
            made.server.url,
            DataCacheInstall(str(tmp / "node-cache"), "1GiB"),
        )
        apply_objects(kube_cluster.api_client, objects)
        apps = client.AppsV1Api(kube_cluster.api_client)
        try:
            yield made
        finally:
            apps.delete_namespaced_daemon_set(DATACACHE_NAME, OPERATOR_NAMESPACE)
            kube_cluster.core.delete_namespaced_service(DATACACHE_NAME, OPERATOR_NAMESPACE)


def cache_pod(team: Team) -> Any:
    """The cache's pod on the real node, once it is Ready."""

    def ready() -> Any:
        pods = team.kube.core.list_namespaced_pod(
            OPERATOR_NAMESPACE, label_selector="app.kubernetes.io/component=datacache",
            field_selector=f"spec.nodeName={team.node.name}",
        ).items  # fmt: skip
        for pod in pods:
            for cond in pod.status.conditions or []:
                if cond.type == "Ready" and cond.status == "True":
                    return pod
        return None

    return wait_for("the node's cache pod", ready, 120, 1.0)


def metrics(pod: Any) -> dict[str, int]:
    text = httpx.get(f"http://{pod.status.pod_ip}:{DATACACHE_PORT}/metrics", timeout=10).text
    return {
        n.removeprefix("tfkube_datacache_").removesuffix("_total"): int(v)
        for n, v in (ln.split() for ln in text.splitlines() if not ln.startswith("#"))
    }


def data_set() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, body in sorted(digits_npz().items()):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return buffer.getvalue()


def run_job(team: Team, name: str) -> None:
    """Run `name` to success, then wait until both its workers have read their data.

    The job succeeds when worker 0 ends; under load worker 1 may not have started by
    then, and the default cleanPodPolicy (Running) would delete it before it reads the
    data set. With None it goes on to read it, and the job is deleted after (its PS
    serves forever)."""
    raw = yaml.safe_load(job_manifest(team.node, name))
    raw["spec"]["replicas"]["worker"]["args"] = ["--train_steps=100"]
    raw["spec"]["runPolicy"]["cleanPodPolicy"] = "None"
    api = team.member
    body = {"manifest": yaml.safe_dump(raw), "data": "digits"}
    job = api.ok(api.post(f"/api/v1/teams/{team.name}/jobs", json=body), 201)
    done = wait_for(
        f"{name} to end",
        lambda: (
            (j := api.ok(api.get(f"/api/v1/jobs/{job['id']}")))["phase"] in ("Succeeded", "Failed")
            and j
        ),
        JOB_TIMEOUT,
        2.0,
    )
    assert done["phase"] == "Succeeded", done
    kube, ns = team.kube, team.namespace
    pods = kube.core.list_namespaced_pod(
        ns, label_selector=f"tfkube.io/job-name={name},tfkube.io/replica-type=worker"
    ).items
    assert len(pods) == 2, [p.metadata.name for p in pods]
    for pod in pods:

        def log(pod: Any = pod) -> str | None:
            try:
                text = str(kube.core.read_namespaced_pod_log(
                    pod.metadata.name, ns, container="tensorflow"))  # fmt: skip
            except client.ApiException:  # not started yet
                return None
            return text if "data ready (" in text else None

        text = wait_for(f"{pod.metadata.name} to read its data", log, JOB_TIMEOUT, 2.0)
        assert "cannot be used" not in text, text[-2000:]  # never fell back to the server
    assert api.delete(f"/api/v1/jobs/{job['id']}").status_code in {200, 204}


def test_two_jobs_read_their_data_through_the_nodes_cache(team: Team) -> None:
    archive = data_set()
    api = team.member
    api.ok(
        api.post(
            f"/api/v1/teams/{team.name}/artifacts",
            params={"name": "digits", "filename": "digits.tar.gz", "kind": "data"},
            content=archive,
            headers={"Content-Type": "application/octet-stream"},
        ),
        201,
    )
    pod = cache_pod(team)
    run_job(team, "cached-1")
    first = metrics(pod)
    # Two workers of one job on one node: one fetch from the server, one read of the disk.
    assert first["bytes_from_server"] == len(archive), first
    assert first["bytes_from_disk"] == len(archive), first
    run_job(team, "cached-2")
    second = metrics(pod)
    assert second["bytes_from_server"] == first["bytes_from_server"], second  # 0 more
    assert second["bytes_from_disk"] == 3 * len(archive), second
    print(f"\nnode cache: first job {first}, second job {second}")
