"""Helpers shared by the tests in tests/cluster (not a test module)."""

from __future__ import annotations

import importlib.util
import io
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar, NoReturn, TypeVar

import pytest
import yaml
from kubernetes import client

REPO = Path(__file__).resolve().parents[2]
KUBE_TOOLS = REPO / "tools" / "kube"

T = TypeVar("T")
IN_CI = os.environ.get("CI", "").lower() == "true"


def unavailable(part: str, reason: str, hint: str) -> NoReturn:
    """A real part the tests need is missing: under CI=true a test failure, else a skip
    saying how to enable it (never a silent skip in CI)."""
    if IN_CI:
        pytest.fail(f"CI=true and {part} is unavailable: {reason}", pytrace=False)
    pytest.skip(f"{reason}; {hint}")


@dataclass
class KubeCluster:
    """What the `kube_cluster` fixture yields."""

    kubeconfig: Path  # admin kubeconfig (token auth, CA file): also for kubectl/subprocesses
    server: str  # https://127.0.0.1:<port>; https://198.19.N.1:<port> with a real node
    api_client: client.ApiClient  # official `kubernetes` client, verifying the apiserver CA
    core: client.CoreV1Api
    batch: client.BatchV1Api
    discovery: client.DiscoveryV1Api
    kubectl: Path  # kubectl v1.34 from the cache
    cpu_nodes: list[str]  # fake node names without GPUs
    gpu_nodes: list[str]  # fake node names with nvidia.com/gpu capacity
    logs_dir: Path  # one log file per component
    harness: Any = None  # tools/kube/cluster.py's Cluster: add_real_node(), stop_real_node()


@dataclass
class RealNode:
    """What the `real_node` fixture yields: one real kubelet node in the session's cluster.
    Pods land there only with `SELECTOR` and `TOLERATIONS` (its label and taint)."""

    name: str  # the Node's name, e.g. tfkube-real-0
    node_ip: str  # its bridge address (198.19.N.1): node IP, DNS server
    volumes_dir: Path  # where its hostPath PersistentVolumes keep their files
    bind: Callable[[str, list[str]], list[str]]  # (namespace, claims) -> pre-bound PV names
    timings: dict[str, float]  # start-up steps in seconds (image import, kubelet Ready, total)
    ctr: tuple[str, ...] = ()  # `ctr` on its containerd (k8s.io namespace): import an image

    SELECTOR: ClassVar[dict[str, str]] = {"tfkube.io/real-node": "true"}
    TOLERATIONS: ClassVar[list[dict[str, str]]] = [
        {"key": "tfkube.io/real-node", "operator": "Exists", "effect": "NoSchedule"}
    ]
    SECOND_TOLERATION: ClassVar[dict[str, str]] = {
        "key": "tfkube.io/second-node",
        "operator": "Exists",
        "effect": "NoSchedule",
    }
    """The second real node's own taint (`second_real_node`): tolerate it too to land there."""

    def volume(self, namespace: str, claim: str) -> Path:
        """The host folder behind a claim bound with `bind`."""
        return self.volumes_dir / namespace / claim


def load_cluster_module() -> ModuleType:
    """Import tools/kube/cluster.py (a stdlib-only script, not part of the package)."""
    name = "tfkube_tools_kube_cluster"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, KUBE_TOOLS / "cluster.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def wait_for(
    what: str, check: Callable[[], T | None], timeout: float = 60.0, interval: float = 0.25
) -> T:
    """Call `check` until it returns something truthy; fail with `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def bind_claim(kube: KubeCluster, namespace: str, claim: str) -> str:
    """A PersistentVolume pre-bound to `claim` in `namespace` (there is no volume
    provisioner here); returns its name (unique: namespace and claim, a PV name may be 253
    characters). `Retain`: the caller deletes it."""
    name = f"{namespace}-{claim}"
    kube.core.create_persistent_volume(
        client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": "100Gi"},
                access_modes=["ReadWriteMany", "ReadWriteOnce", "ReadOnlyMany"],
                persistent_volume_reclaim_policy="Retain",
                host_path=client.V1HostPathVolumeSource(path=f"/tmp/tfkube-fake/{name}"),
                claim_ref=client.V1ObjectReference(namespace=namespace, name=claim),
            ),
        )
    )
    return name


def still_there(namespace: str, name: str, reads: dict[str, Callable[..., Any]]) -> list[str]:
    """Which of the kinds (kind -> the client's `read_namespaced_*`) still have an object
    `name` in `namespace` (a 404 is gone)."""
    found = []
    for kind, read in reads.items():
        try:
            read(name, namespace)
        except client.exceptions.ApiException as exc:
            if exc.status != 404:
                raise
        else:
            found.append(kind)
    return found


def delete_volumes(kube: KubeCluster, names: list[str]) -> None:
    for name in names:
        try:
            kube.core.delete_persistent_volume(name)
        except client.exceptions.ApiException as exc:
            if exc.status != 404:
                raise


class Operator:
    """`tfkube operator` as a subprocess watching one namespace."""

    def __init__(
        self,
        kube: KubeCluster,
        namespace: str,
        log: Path,
        kubeconfig: Path,
        env: dict[str, str] | None = None,
    ) -> None:
        self.kube, self.namespace, self.log = kube, namespace, log
        self.kubeconfig = kubeconfig
        self.env = env
        """Added to the operator's environment (what its Deployment would set)."""
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tfkube",
                    "operator",
                    "--kubeconfig",
                    str(self.kubeconfig),
                    "--namespace",
                    self.namespace,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=REPO,
                env={**os.environ, **(self.env or {})},
            )
        wait_for("the operator to start", lambda: "watching" in self.log.read_text(), 30)

    def kill(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, sig)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)

    def errors(self) -> list[str]:
        return [line for line in self.log.read_text().splitlines() if "Traceback" in line]


def create_shared_claim(
    kube: KubeCluster, namespace: str, name: str, access_mode: str = "ReadWriteMany"
) -> None:
    """A ReadWriteMany claim (or `access_mode`) with no storage class (it binds to a PV
    made for it: no provisioner here), as an administrator makes a team's outputs claim."""
    kube.core.create_namespaced_persistent_volume_claim(
        namespace,
        client.V1PersistentVolumeClaim(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1PersistentVolumeClaimSpec(
                access_modes=[access_mode],
                storage_class_name="",
                resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
            ),
        ),
    )


def service_account_kubeconfig(kube: KubeCluster, account: str, namespace: str, dest: Path) -> Path:
    """The admin kubeconfig with a token of a ServiceAccount instead: a process run with it
    has exactly the RBAC `tfkube install` grants that account, not an administrator's."""
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    )
    token = kube.core.create_namespaced_service_account_token(
        account, namespace, request
    ).status.token
    config = yaml.safe_load(kube.kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    dest.write_text(yaml.safe_dump(config))
    return dest


def _podgroup_crd(group: str, version: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A minimal stand-in for Volcano's / scheduler-plugins' PodGroup CRD."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"podgroups.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": "PodGroup", "plural": "podgroups", "singular": "podgroup"},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {"type": "object", "properties": spec},
                            },
                        }
                    },
                }
            ],
        },
    }


POD_GROUP_CRDS = (
    _podgroup_crd(
        "scheduling.volcano.sh",
        "v1beta1",
        {
            "minMember": {"type": "integer"},
            "queue": {"type": "string"},
            "priorityClassName": {"type": "string"},
        },
    ),
    _podgroup_crd(
        "scheduling.x-k8s.io",
        "v1alpha1",
        {"minMember": {"type": "integer"}, "scheduleTimeoutSeconds": {"type": "integer"}},
    ),
)


def targz(folder: Path) -> bytes:
    """The files of `folder` (not its subfolders) as a .tar.gz, as a member uploads code."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(folder.iterdir()):
            if path.is_file():
                tar.add(path, arcname=path.name)
    return buffer.getvalue()


def upload_code(api: Any, team: str, name: str, folder: Path) -> None:
    """`folder` uploaded as the team's artifact `name` (a .tar.gz, as a member does), 201."""
    api.ok(
        api.post(
            f"/api/v1/teams/{team}/artifacts",
            params={"name": name, "filename": "code.tar.gz"},
            content=targz(folder),
            headers={"Content-Type": "application/octet-stream"},
        ),
        201,
    )


def placed_manifest(node: RealNode, example: Path, name: str, worker_args: list[str]) -> str:
    """`example`'s job.yaml as `name`, its code the uploaded artifact `mnist`, every role
    placed on the real node (its label and taint) without CPU requests (2 cores)."""
    raw = yaml.safe_load((example / "job.yaml").read_text())
    raw["metadata"]["name"] = name
    spec = raw["spec"]
    spec["code"]["source"] = "artifact:mnist"
    for role in spec["replicas"].values():
        role["nodeSelector"] = dict(node.SELECTOR)
        role["tolerations"] = list(node.TOLERATIONS)
        role.get("resources", {}).pop("cpu", None)
    spec["replicas"]["worker"]["args"] = worker_args
    return str(yaml.safe_dump(raw))


def one_worker_job(
    node: RealNode, name: str, worker: dict[str, Any], **spec: Any
) -> dict[str, Any]:
    """A TFJob manifest of one worker placed on the real node (its label and taint):
    `worker` adds to the worker's role (args, command, resources), `spec` to the job's."""
    role = {
        "replicas": 1,
        **worker,
        "nodeSelector": dict(node.SELECTOR),
        "tolerations": list(node.TOLERATIONS),
    }
    return {
        "apiVersion": "tfkube.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {"replicas": {"worker": role}, **spec},
    }


def remove_install(kube: KubeCluster, namespaces: list[str], pvs: list[str]) -> None:
    """Undo an in-cluster `tfkube install --server` of a test: delete its `namespaces`
    (the install's first), the cluster role bindings that still name the install's
    namespace (the session's other modules apply their own install again), wait until
    the namespaces are gone, then delete the PersistentVolumes `pvs`."""
    for name in namespaces:
        try:
            kube.core.delete_namespace(name, propagation_policy="Background")
        except client.exceptions.ApiException as exc:
            if exc.status != 404:
                raise
    rbac = client.RbacAuthorizationV1Api(kube.api_client)
    for binding in rbac.list_cluster_role_binding().items:
        if any(s.namespace == namespaces[0] for s in binding.subjects or []):
            rbac.delete_cluster_role_binding(binding.metadata.name)

    def gone(name: str) -> bool:
        try:
            kube.core.read_namespace(name)
        except client.exceptions.ApiException as exc:
            return bool(exc.status == 404)
        return False

    wait_for("the namespaces gone", lambda: all(gone(n) for n in namespaces), 180, 1.0)
    for pv in pvs:
        try:
            kube.core.delete_persistent_volume(pv)
        except client.exceptions.ApiException as exc:
            if exc.status != 404:
                raise
