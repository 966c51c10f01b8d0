"""A gang above capacity, with a real gang scheduler on the test control plane.

The scheduler-plugins scheduler (kube-scheduler plus the Coscheduling plugin, built by
tools/gang/build.sh from the Go module proxy) runs beside the cluster's own scheduler under
the name tfkube's `gang: SchedulerPlugins` gives its pods, with the real PodGroup CRD from
the same module. A job whose gang (PS + 2 workers, one CPU each) cannot all be placed on the
two one-CPU fake nodes it may use stays Pending with no replica running, and `tfkube
status` says the gang cannot be placed and why; once a third node is added, every replica
runs and the job succeeds.

The scheduler is started and stopped by PID (the harness's `_spawn` / `stop_procs`), its log
in the cluster's logs/. Without its binary the test is skipped with a hint; under CI=true
the binary is built (or reused) and a failure is a test failure.

`.venv/bin/pytest tests/cluster/test_gang.py -s -q` prints the figures of docs/reliability.md.
"""

from __future__ import annotations

import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tfkube.engines.kubernetes import KubernetesBackend

from ._support import (
    IN_CI,
    REPO,
    KubeCluster,
    Operator,
    load_cluster_module,
    unavailable,
    wait_for,
)
from .test_operator import cli, job_dict, phase_is, pods, submit

GANG_TOOLS = REPO / "tools" / "gang"
SCHEDULER_NAME = "scheduler-plugins-scheduler"  # what render gives `gang: SchedulerPlugins`
POOL_LABEL = "tfkube.io/gang-pool"
RETRY_SECONDS = 30
"""The scheduler's flush of its unschedulable pods (`--pod-max-in-unschedulable-pods-duration`,
default 5 minutes): how long a rejected gang may wait to see capacity that was added."""
PERMIT_SECONDS = RETRY_SECONDS
"""How long a placed pod waits at Permit for its siblings. Once capacity is added, each
rejected pod is retried at the first flush after it has been unschedulable RETRY_SECONDS:
its siblings may come up to one flush period (30 s) apart. With a shorter wait (10 s, as
before) the first sibling could give up before the last was retried, again and again on a
loaded machine (a CI run where the gang never ran in 150 s)."""
SEEN_WITHIN = 90.0
"""Seconds for the scheduler's verdict, or for the pods to run (loaded CI)."""


def _binary() -> Path:
    build = ["bash", str(GANG_TOOLS / "build.sh")]
    proc = subprocess.run(build if IN_CI else [*build, "--check"], capture_output=True, text=True)
    if proc.returncode != 0:
        hint = "run `make kube-bins` (or tools/gang/build.sh) once: ~7 min cold on 2 cores"
        unavailable("the gang scheduler", f"tools/gang/build.sh: {proc.stderr[-4000:]}", hint)
    return Path(_run(*build, "--print-bin"))


def _run(*argv: str) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr}"
    return proc.stdout.strip()


def _install_crd(kube: KubeCluster) -> None:
    """The real PodGroup CRD (it replaces the stand-in some tests install: a superset)."""
    crd = _run("bash", str(GANG_TOOLS / "build.sh"), "--print-crd")
    kubectl = (str(kube.kubectl), f"--kubeconfig={kube.kubeconfig}")
    _run(*kubectl, "apply", "--server-side", "--force-conflicts", "-f", crd)
    extensions = client.ApiextensionsV1Api(kube.api_client)

    def established() -> bool:
        found = extensions.read_custom_resource_definition("podgroups.scheduling.x-k8s.io")
        conditions = found.status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    # Polled through the API with a generous deadline: `kubectl wait --timeout=60s` exited 1
    # once in CI, right after the 1,000-replica test, and its stderr was not kept.
    wait_for("the PodGroup CRD to be established", established, 180)


def _healthy(port: int) -> bool:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # its self-signed serving cert, on loopback
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=context) as r:
            return bool(r.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="module")
def gang_scheduler(kube_cluster: KubeCluster) -> Iterator[str]:
    """The scheduler-plugins scheduler with Coscheduling, as `scheduler-plugins-scheduler`;
    yields its log's path. Stopped by PID at the end of the module."""
    binary = _binary()
    _install_crd(kube_cluster)
    harness, kube = kube_cluster.harness, load_cluster_module()
    workdir = kube_cluster.logs_dir.parent
    config = workdir / "gang-scheduler.yaml"
    config.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "clientConnection:\n"
        f"  kubeconfig: {kube_cluster.kubeconfig}\n"
        "leaderElection:\n"
        "  leaderElect: false\n"
        "profiles:\n"
        f"- schedulerName: {SCHEDULER_NAME}\n"
        "  plugins:\n"
        "    multiPoint:\n"
        "      enabled:\n"
        "      - name: Coscheduling\n"
        "    queueSort:\n"
        "      enabled:\n"
        "      - name: Coscheduling\n"
        "      disabled:\n"
        "      - name: '*'\n"
        "  pluginConfig:\n"
        "  - name: Coscheduling\n"
        "    args:\n"
        f"      permitWaitingTimeSeconds: {PERMIT_SECONDS}\n"
    )
    port = kube.free_port()
    proc = harness._spawn(
        "scheduler-plugins",
        [
            str(binary),
            f"--config={config}",
            f"--authentication-kubeconfig={kube_cluster.kubeconfig}",
            f"--authorization-kubeconfig={kube_cluster.kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={workdir / 'gang-scheduler-certs'}",
            # Pods that Coscheduling rejected (the siblings of the one that did not fit) go
            # back to the queue only on a Pod or PodGroup event, never on a new Node: without
            # this they would wait out the default 5 minutes after capacity is added.
            f"--pod-max-in-unschedulable-pods-duration={RETRY_SECONDS}s",
            "--v=2",
        ],
        track=False,
    )
    log = Path(proc.log)
    try:
        try:
            wait_for("the gang scheduler to be healthy", lambda: _healthy(port), 60, 0.5)
        except AssertionError as exc:
            pytest.fail(f"{exc}\n{log.read_text(errors='replace')[-3000:]}", pytrace=False)
        yield str(log)
    finally:
        kube.stop_procs([proc])


def _node(name: str, ip: str, pool: str) -> dict[str, Any]:
    """A one-CPU KWOK fake node in `pool` (the cluster's own nodes have 16)."""
    manifest: dict[str, Any] = load_cluster_module().NodeSpec(name, ip, cpu="1").manifest()
    manifest["metadata"]["labels"][POOL_LABEL] = pool
    return manifest


def _ready(kube: KubeCluster, name: str) -> bool:
    conditions = kube.core.read_node(name).status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


@pytest.fixture
def small_nodes(kube_cluster: KubeCluster, kube_namespace: str) -> Iterator[list[str]]:
    """Two one-CPU fake nodes labelled for this test (more are added by the test); every
    node named in the list is deleted afterwards."""
    made: list[str] = []
    for i in range(2):
        name = f"tfkube-gang-{i}"
        kube_cluster.core.create_node(_node(name, f"127.0.3.{i + 1}", kube_namespace))
        made.append(name)
    for name in made:
        wait_for(f"node {name} Ready", lambda n=name: _ready(kube_cluster, n), 60)
    yield made
    for name in made:
        try:
            kube_cluster.core.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def _messages(backend: KubernetesBackend, job: str) -> dict[str, str]:
    return {r.key: r.message for r in backend.get(job).replicas}


def test_a_gang_above_capacity_waits_then_runs_once_capacity_is_added(
    gang_scheduler: str,
    operator: Operator,
    code: Path,
    kube_namespace: str,
    small_nodes: list[str],
) -> None:
    kube, ns = operator.kube, kube_namespace
    data = job_dict("gang", scheduling={"gang": "SchedulerPlugins"})
    for role, duration in (("ps", None), ("worker", "3s")):
        spec = data["spec"]["replicas"][role]
        spec["nodeSelector"] = {POOL_LABEL: ns}
        spec["resources"] = {"cpu": "1"}
        if duration:
            spec["annotations"] = {"tfkube.io/fake-duration": duration}
    backend = submit(kube, ns, code, data)
    selector = "tfkube.io/job-name=gang"
    submitted = time.monotonic()

    def gang_verdict() -> dict[str, str] | None:
        """Every replica names the gang and what its pods lack (once some pod's verdict says
        so: the gang's pods take turns at being the one that does not fit)."""
        messages = _messages(backend, "gang")
        said = all("the gang" in m and "Insufficient cpu" in m for m in messages.values())
        return messages if said else None

    messages = wait_for("the gang's verdict on every replica", gang_verdict, SEEN_WITHIN)
    verdict = time.monotonic() - submitted
    # Held for a while: the scheduler retries, and never lets part of the gang run.
    held_until = time.monotonic() + 15
    while time.monotonic() < held_until:
        placed = [p.metadata.name for p in pods(kube, ns, selector) if p.spec.node_name]
        assert not placed, f"part of the gang was placed: {placed}"
        states = {r.key: r.state.value for r in backend.get("gang").replicas}
        assert set(states.values()) == {"Pending"}, states
        time.sleep(1)

    def shown() -> str | None:
        """`tfkube status` as a user runs it (its table wraps long messages)."""
        out = cli(kube, ns, "status", "gang")
        assert out.returncode == 0, out.stderr
        text = " ".join(out.stdout.split())
        return text if "minMember 3" in text and "Insufficient cpu" in text else None

    status_text = wait_for("`tfkube status` to name the gang and the cpu", shown, SEEN_WITHIN, 1)
    assert "Pending" in status_text, status_text

    kube.core.create_node(_node("tfkube-gang-2", "127.0.3.3", ns))
    small_nodes.append("tfkube-gang-2")
    added = time.monotonic()

    def all_placed() -> list[Any] | None:
        found = pods(kube, ns, selector)
        return found if len(found) == 3 and all(p.spec.node_name for p in found) else None

    # The flush runs every 30 s and takes pods unschedulable for RETRY_SECONDS.
    try:
        placed_pods = wait_for("every replica placed", all_placed, 3 * RETRY_SECONDS + SEEN_WITHIN)
    except AssertionError as exc:
        log = Path(gang_scheduler).read_text(errors="replace")
        lines = [ln for ln in log.splitlines() if "gang" in ln or "Permit" in ln]
        raise AssertionError(
            f"{exc}\nthe scheduler's log on the gang:\n" + "\n".join(lines[-60:])
        ) from None
    placed_after = time.monotonic() - added
    assert {p.spec.node_name for p in placed_pods} == set(small_nodes)
    status = wait_for(
        "success", lambda: phase_is(kube, ns, "gang", "Succeeded", "Failed"), SEEN_WITHIN
    )
    assert status["phase"] == "Succeeded", status
    print(
        f"\ngang above capacity: verdict on every replica after {verdict:.1f}s; nothing placed "
        f"for 15s; all 3 placed {placed_after:.1f}s after a node was added; succeeded; "
        f"status said: {messages['worker-0']!r}"
    )
