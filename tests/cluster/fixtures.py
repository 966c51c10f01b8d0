"""A real Kubernetes control plane: the fixtures of tests/cluster, as a pytest plugin.

Registered once for the whole suite by tests/conftest.py (`pytest_plugins`), so a test
outside tests/cluster (tests/security) requests the same session's control plane and real
node instead of starting its own. Every test that uses `kube_cluster` (directly or through
another fixture) gets the `cluster` marker, every test under tests/cluster too; one that
uses `real_node` gets `realnode`, and `nodesession` with it (make test's real-node session,
tools/test/suite.sh; also the KWOK-only files in `BESIDE_THE_REAL_NODE`).

Fixtures:
  kube_cluster    (session)  starts etcd, kube-apiserver, kube-controller-manager,
                             kube-scheduler and KWOK on 127.0.0.1 from the binaries that
                             `make kube-bins` builds, registers fake nodes and yields a
                             `KubeCluster` (kubeconfig path, API clients, node names). Teardown
                             stops exactly the processes it started, by PID.
  kube_namespace  (function) a fresh namespace for one test, deleted afterwards.
  real_node       (session)  adds one real kubelet node (tools/kube/realnode.py) to that
                             cluster and yields a `RealNode`; teardown removes all it made.
                             Tests using it get the `realnode` marker.
  second_real_node (module) a second real node beside it (own network namespace, runtime
                             and pod /24), only for the modules that ask; stopped after them.
  crd, operator_kubeconfig (module) the CRD installed; a kubeconfig with the operator's
                             ServiceAccount token.
  operator        (function) `tfkube operator` (a subprocess with that token) watching the
                             test's namespace; stopped by PID afterwards.
  operator_at     (function) the same, started by the test with a maximum of pods per
                             Indexed Job (`operator_at(3)`: TFKUBE_MAX_PODS_PER_JOB=3).
  code            (function) a folder holding `code/` (run.sh, train.py) to submit from.

TFKUBE_KUBE_KEEP=1 keeps the control plane's temp dir (logs/, kubeconfig) after the session.
Without the binaries the tests are skipped with a hint (`make kube-bins`); under CI=true the
binaries are built if missing (or reused), and a failure to build or start is a test error.
Fake pods follow the KWOK stage contract in tools/kube/stages (see docs/testing.md).
The real node needs root and what `make kube-node` installs and builds: without them its tests
are skipped with that hint, and under CI=true that is an error instead.
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tfkube.engines.kubernetes import install
from tfkube.render import OPERATOR_NAME, OPERATOR_NAMESPACE

from ._support import (
    KUBE_TOOLS,
    KubeCluster,
    Operator,
    RealNode,
    load_cluster_module,
    service_account_kubeconfig,
    unavailable,
)

HERE = Path(__file__).resolve().parent
IN_CI = os.environ.get("CI", "").lower() == "true"
ENABLE_HINT = (
    "run `make kube-bins` once (builds the control plane from Go modules into "
    "~/.cache/tfkube, ~15 min cold on 2 cores) to enable the tests in tests/cluster"
)


_WANTS_REAL_NODE = pytest.StashKey[bool]()

BESIDE_THE_REAL_NODE: frozenset[str] = frozenset()
"""Files of KWOK-only tests that `make test` runs in the real-node session rather than in
the KWOK session (tools/test/suite.sh), to even the sessions out. Empty since the KWOK
session runs beside the others rather than after the rest (2026-12-06): test_kube_faults.py
and test_operator.py (~300 s) ran here while it came after the rest."""


@pytest.hookimpl(tryfirst=True)  # before `-m cluster` / `-m "not cluster"` select (make test)
def pytest_collection_modifyitems(session: pytest.Session, items: list[pytest.Item]) -> None:
    wants = False
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        in_cluster_dir = HERE in Path(str(item.path)).resolve().parents
        if in_cluster_dir or "kube_cluster" in fixtures:
            item.add_marker(pytest.mark.cluster)
        if "real_node" in fixtures:
            item.add_marker(pytest.mark.realnode)
            wants = True
        if "real_node" in fixtures or (in_cluster_dir and item.path.name in BESIDE_THE_REAL_NODE):
            item.add_marker(pytest.mark.nodesession)
    session.stash[_WANTS_REAL_NODE] = wants


def _unavailable(reason: str) -> None:
    unavailable("the test control plane", reason, ENABLE_HINT)


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
def kube_cluster(request: pytest.FixtureRequest) -> Iterator[KubeCluster]:
    _ensure_binaries()
    kube = load_cluster_module()
    # A session with real-node tests claims the real node's bridge first, so the API server
    # listens on its address and pods reach it (in-cluster config); else loopback only.
    wants = request.session.stash.get(_WANTS_REAL_NODE, False)
    can = wants and not kube._sibling("realnode").missing_parts(kube.default_bin_dir())
    cluster = kube.Cluster(die_with_parent=True, real_node_network=can)
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
            harness=cluster,
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


@pytest.fixture(scope="session")
def real_node(kube_cluster: KubeCluster) -> Iterator[RealNode]:
    """One real kubelet node beside the fake ones, for the session (docs/testing.md)."""
    kube = load_cluster_module()
    realnode = kube._sibling("realnode")
    missing = realnode.missing_parts(Path(kube_cluster.harness.bin_dir))
    if missing:
        reason = "the real node cannot run here; missing: " + "; ".join(missing)
        if IN_CI:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(f"{reason} (`make kube-node` as root prepares all of it)")
    try:
        state = kube_cluster.harness.add_real_node()
    except kube.ClusterError as exc:
        if IN_CI:
            pytest.fail(f"CI=true and the real node did not start: {exc}", pytrace=False)
        pytest.skip(f"the real node did not start: {exc}")
    node = realnode.NodeState(**state)
    try:
        yield RealNode(
            name=node.name,
            node_ip=node.node_ip,
            volumes_dir=Path(node.volumes_dir),
            bind=lambda ns, claims: realnode.bind_claims(
                kube_cluster.harness.api, node, ns, claims
            ),
            timings=dict(node.timings),
            ctr=(realnode.CTR, "--address", node.containerd_socket, "--namespace", "k8s.io"),
        )
    finally:
        for line in kube_cluster.harness.stop_real_node():
            if "left" in line or "could not" in line:
                print(f"real_node teardown: {line}")


@pytest.fixture(scope="module")
def second_real_node(kube_cluster: KubeCluster, real_node: RealNode) -> Iterator[RealNode]:
    """A second real kubelet node beside `real_node` (its own network namespace, container
    runtime, kubelet, kube-proxy and pod /24; the first node's CoreDNS), for one module: it
    is started only for the tests that ask for it (~1 min, mostly the image import) and
    stopped after them, so the rest of the session does not pay its CPU. Its claims (`bind`)
    are folders under the first node's volumes, mountable on both nodes."""
    kube = load_cluster_module()
    realnode = kube._sibling("realnode")
    harness = kube_cluster.harness
    try:
        state = harness.add_second_real_node()
    except kube.ClusterError as exc:
        if IN_CI:
            pytest.fail(f"CI=true and the second real node did not start: {exc}", pytrace=False)
        pytest.skip(f"the second real node did not start: {exc}")
    node = realnode.NodeState(**state)
    first = realnode.NodeState(**harness.state.real_node)
    nodes = [first.name, node.name]

    def bind(ns: str, claims: list[str]) -> list[str]:
        return list(realnode.bind_claims(harness.api, first, ns, claims, nodes=nodes))

    try:
        yield RealNode(
            name=node.name,
            node_ip=node.node_ip,
            volumes_dir=Path(first.volumes_dir),
            bind=bind,
            timings=dict(node.timings),
        )
    finally:
        for line in harness.stop_second_real_node():
            if "left" in line or "could not" in line:
                print(f"second_real_node teardown: {line}")


@pytest.fixture(scope="module")
def crd(kube_cluster: KubeCluster) -> KubeCluster:
    """The CRD (with RBAC and the operator Deployment, which only gets a fake pod here)."""
    install(kube_cluster.api_client)
    return kube_cluster


@pytest.fixture(scope="module")
def operator_kubeconfig(crd: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kubeconfig with a token of the operator's ServiceAccount: the operator runs with
    exactly the RBAC `tfkube install` grants it, not as an administrator."""
    dest = tmp_path_factory.mktemp("operator") / "kubeconfig"
    return service_account_kubeconfig(crd, OPERATOR_NAME, OPERATOR_NAMESPACE, dest)


@pytest.fixture
def operator(
    crd: KubeCluster, operator_kubeconfig: Path, kube_namespace: str, tmp_path: Path
) -> Iterator[Operator]:
    """`tfkube operator` watching the test's namespace, with the operator's own RBAC; its log
    must show no traceback and no Forbidden request."""
    op = Operator(crd, kube_namespace, tmp_path / "operator.log", operator_kubeconfig)
    op.start()
    yield op
    op.kill()
    assert not op.errors(), op.log.read_text()[-5000:]
    assert "Forbidden" not in op.log.read_text(), op.log.read_text()[-5000:]


@pytest.fixture
def operator_at(
    crd: KubeCluster, operator_kubeconfig: Path, kube_namespace: str, tmp_path: Path
) -> Iterator[Callable[[int], Operator]]:
    """Start `tfkube operator` with TFKUBE_MAX_PODS_PER_JOB set: call it with the number
    (roles with more replicas are several Indexed Jobs). Its log must show no traceback and
    no Forbidden request."""
    started: list[Operator] = []

    def start(per_job: int) -> Operator:
        env = {"TFKUBE_MAX_PODS_PER_JOB": str(per_job)}
        op = Operator(crd, kube_namespace, tmp_path / "operator.log", operator_kubeconfig, env)
        op.start()
        started.append(op)
        return op

    yield start
    for op in started:
        op.kill()
        assert not op.errors(), op.log.read_text()[-5000:]
        assert "Forbidden" not in op.log.read_text(), op.log.read_text()[-5000:]


def write_code(base: Path) -> Path:
    """`base/code/` with a run.sh and a train.py, to submit from `base`; returns `base`."""
    folder = base / "code"
    folder.mkdir()
    (folder / "run.sh").write_text("#!/bin/sh\necho training\n")
    (folder / "train.py").write_text("print('training')\n")
    return base


@pytest.fixture
def code(tmp_path: Path) -> Path:
    return write_code(tmp_path)
