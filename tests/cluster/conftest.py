"""A real Kubernetes control plane for the tests in tests/cluster.

Fixtures:
  kube_cluster    (session)  starts etcd, kube-apiserver, kube-controller-manager,
                             kube-scheduler and KWOK on 127.0.0.1 from the binaries that
                             `make kube-bins` builds, registers fake nodes and yields a
                             `KubeCluster` (kubeconfig path, API clients, node names). Teardown
                             stops exactly the processes it started, by PID.
  kube_namespace  (function) a fresh namespace for one test, deleted afterwards.

TFKUBE_KUBE_KEEP=1 keeps the control plane's temp dir (logs/, kubeconfig) after the session.
Without the binaries the tests are skipped with a hint (`make kube-bins`); under CI=true the
binaries are built if missing (or reused), and a failure to build or start is a test error.
Fake pods follow the KWOK stage contract in tools/kube/stages (see docs/testing.md).
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from ._support import KUBE_TOOLS, KubeCluster, load_cluster_module

HERE = Path(__file__).resolve().parent
IN_CI = os.environ.get("CI", "").lower() == "true"
ENABLE_HINT = (
    "run `make kube-bins` once (builds the control plane from Go modules into "
    "~/.cache/tfkube, ~15 min cold on 2 cores) to enable the tests in tests/cluster"
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.cluster)


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"CI=true and the test control plane is unavailable: {reason}", pytrace=False)
    pytest.skip(f"{reason}; {ENABLE_HINT}")


def _ensure_binaries() -> None:
    build = ["bash", str(KUBE_TOOLS / "build.sh")]
    if IN_CI:
        proc = subprocess.run(build, capture_output=True, text=True)
        if proc.returncode != 0:
            _unavailable(f"tools/kube/build.sh failed:\n{proc.stderr[-4000:]}")
        return
    proc = subprocess.run([*build, "--check"], capture_output=True, text=True)
    if proc.returncode != 0:
        _unavailable("the control plane binaries (etcd, kube-*, kwok) are not built or out of date")


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[KubeCluster]:
    _ensure_binaries()
    kube = load_cluster_module()
    cluster = kube.Cluster(die_with_parent=True)
    try:
        state = cluster.start()
    except kube.ClusterError as exc:
        _unavailable(f"the control plane did not start: {exc}")
    api_client = config.new_client_from_config(config_file=state.kubeconfig)
    try:
        yield KubeCluster(
            kubeconfig=Path(state.kubeconfig),
            server=state.server,
            api_client=api_client,
            core=client.CoreV1Api(api_client),
            batch=client.BatchV1Api(api_client),
            discovery=client.DiscoveryV1Api(api_client),
            kubectl=Path(state.bin_dir) / "kubectl",
            cpu_nodes=[n.name for n in cluster.nodes if not n.gpus],
            gpu_nodes=[n.name for n in cluster.nodes if n.gpus],
            logs_dir=Path(state.workdir) / "logs",
        )
    finally:
        api_client.close()
        keep = os.environ.get("TFKUBE_KUBE_KEEP") == "1"  # keep certs, kubeconfig and logs
        cluster.stop(remove_workdir=not keep)
        if keep:
            print(f"\nkube_cluster: kept {state.workdir} (TFKUBE_KUBE_KEEP=1)")


@pytest.fixture
def kube_namespace(kube_cluster: KubeCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:6]}"
    kube_cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    try:
        kube_cluster.core.delete_namespace(name, propagation_policy="Background")
    except ApiException as exc:
        if exc.status != 404:
            raise
