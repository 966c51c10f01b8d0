"""The Kubeflow corpus (tests/data/kubeflow, shapes found in the wild) on the test control
plane: every accepted manifest is converted, submitted and run by the operator to the
phase `expected.yaml` gives; refusals are checked purely in tests/unit/test_kubeflow.py.

All the accepted manifests run at once in one namespace with one operator (about 50 KWOK
fake pods): a module fixture submits them and the tests look at the outcome of one each.
Fake pods need `tfkube.io/fake-duration` to complete, which the fixture adds to every
role but the PS (the manifests stay as users write them). What the manifests name and a
real cluster would hold already (a dataset claim, a ConfigMap, a Secret, a PriorityClass)
is created first. There is no StorageClass and no provisioner here, and nothing is bound
for the jobs: a manifest that names no claim gets none (issue 23), so it runs as it would
under Kubeflow; the one dataset claim a manifest names (08) is the only one bound.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tfkube.engines.kubernetes import KubernetesBackend
from tfkube.spec import SpecError, parse_job

from ._support import POD_GROUP_CRDS, KubeCluster, Operator, bind_claim, delete_volumes, wait_for

CORPUS = Path(__file__).resolve().parents[1] / "data" / "kubeflow"
EXPECTED: dict[str, dict[str, Any]] = yaml.safe_load((CORPUS / "expected.yaml").read_text())
ACCEPTED = sorted(name for name, what in EXPECTED.items() if "phase" in what)
FAKE_DURATION = "3s"
OUTCOME_TIMEOUT = 240.0
PENDING_SETTLE = 20.0
"""A job expected to stay Pending is looked at once it has been created this long."""


def manifest(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((CORPUS / name).read_text())
    return data


def with_fake_durations(data: dict[str, Any]) -> dict[str, Any]:
    """Every replica type but the PS completes after FAKE_DURATION on a KWOK node."""
    data = copy.deepcopy(data)
    for kind, spec in data["spec"]["tfReplicaSpecs"].items():
        if kind == "PS":
            continue
        meta = spec.setdefault("template", {}).setdefault("metadata", {})
        meta.setdefault("annotations", {})["tfkube.io/fake-duration"] = FAKE_DURATION
    return data


def _create(call: Any, *args: Any) -> None:
    try:
        call(*args)
    except ApiException as exc:
        if exc.status != 409:
            raise


def _prerequisites(kube: KubeCluster, ns: str, made: list[str]) -> None:
    """What the manifests name that a real cluster would already hold."""
    _create(
        kube.core.create_namespaced_persistent_volume_claim,
        ns,
        client.V1PersistentVolumeClaim(
            metadata=client.V1ObjectMeta(name="imagenet-ro"),
            spec=client.V1PersistentVolumeClaimSpec(
                access_modes=["ReadOnlyMany"],
                resources=client.V1VolumeResourceRequirements(requests={"storage": "10Gi"}),
            ),
        ),
    )
    made.append(bind_claim(kube, ns, "imagenet-ro"))
    _create(
        kube.core.create_namespaced_config_map,
        ns,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="train-settings"),
            data={"s3-endpoint": "http://s3.example"},
        ),
    )
    _create(
        kube.core.create_namespaced_secret,
        ns,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="s3-credentials"),
            string_data={"access-key": "a", "secret-key": "b"},
        ),
    )
    _create(
        client.SchedulingV1Api(kube.api_client).create_priority_class,
        client.V1PriorityClass(metadata=client.V1ObjectMeta(name="high-priority"), value=1000),
    )
    extensions = client.ApiextensionsV1Api(kube.api_client)
    for crd in POD_GROUP_CRDS:  # stand-ins: Volcano is not installed here
        _create(extensions.create_custom_resource_definition, crd)

    def established() -> bool:
        for crd in POD_GROUP_CRDS:
            found = extensions.read_custom_resource_definition(crd["metadata"]["name"])
            if not any(
                c.type == "Established" and c.status == "True"
                for c in (found.status.conditions or [])
            ):
                return False
        return True

    wait_for("the stand-in PodGroup CRDs", established, 30)


@dataclass
class Corpus:
    kube: KubeCluster
    namespace: str
    backend: KubernetesBackend
    jobs: dict[str, str]
    """manifest file -> job name."""


@pytest.fixture(scope="module")
def corpus(
    crd: KubeCluster, operator_kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Corpus]:
    kube = crd
    ns = f"kubeflow-corpus-{uuid.uuid4().hex[:6]}"
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    made: list[str] = []
    log = tmp_path_factory.mktemp("corpus") / "operator.log"
    operator = Operator(kube, ns, log, operator_kubeconfig)
    try:
        _prerequisites(kube, ns, made)
        operator.start()
        backend = KubernetesBackend(api_client=kube.api_client, namespace=ns)
        jobs = {}
        for name in ACCEPTED:
            job = parse_job(with_fake_durations(manifest(name)), name)
            backend.submit(job, CORPUS)  # a local code folder (18) is packed from here
            jobs[name] = job.name
        yield Corpus(kube, ns, backend, jobs)
    finally:
        operator.kill()
        kube.core.delete_namespace(ns, propagation_policy="Background")
        delete_volumes(kube, made)
    assert not operator.errors(), log.read_text()[-5000:]
    assert "Forbidden" not in log.read_text(), log.read_text()[-5000:]


def _pods(corpus: Corpus, job: str, role: str) -> list[client.V1Pod]:
    selector = f"tfkube.io/job-name={job},tfkube.io/replica-type={role}"
    return [
        p
        for p in corpus.kube.core.list_namespaced_pod(
            corpus.namespace, label_selector=selector
        ).items
        if p.metadata.deletion_timestamp is None
    ]


def _ended(corpus: Corpus, name: str) -> Any:
    """The job of manifest `name` once its phase is final (a timeout shows where it
    stands). Not `done`: with cleanPodPolicy None its PS keeps running, as asked."""
    job = corpus.jobs[name]
    try:
        return wait_for(
            f"{name} to end",
            lambda: (v := corpus.backend.get(job)).phase.terminal and v,
            OUTCOME_TIMEOUT,
            1,
        )
    except AssertionError as exc:
        view = corpus.backend.get(job)
        raise AssertionError(f"{exc}\n{view.phase} {view.reason} {view.replicas}") from None


def test_no_manifest_gets_a_claim_it_did_not_name(corpus: Corpus) -> None:
    """No volumes in, no claims out: once every job's objects exist, the namespace holds
    only the dataset claim manifest 08 names, and every replica pod mounts its logs and
    data as scratch space of its own (on main each job had two claims nobody could bind,
    and every replica waited for them)."""

    def rendered() -> list[client.V1Job] | None:
        found = corpus.kube.batch.list_namespaced_job(
            corpus.namespace, label_selector="tfkube.io/replica-type"
        ).items
        roles = sum(len(manifest(n)["spec"]["tfReplicaSpecs"]) for n in corpus.jobs)
        return found if len(found) >= roles else None

    role_jobs = wait_for("every job's role Jobs", rendered, OUTCOME_TIMEOUT, 1)
    claims = corpus.kube.core.list_namespaced_persistent_volume_claim(corpus.namespace).items
    assert sorted(c.metadata.name for c in claims) == ["imagenet-ro"]
    for job in role_jobs:
        volumes = {v.name: v for v in job.spec.template.spec.volumes}
        assert volumes["logs"].empty_dir is not None, job.metadata.name
        if "data" in volumes:  # a PS has none
            assert volumes["data"].empty_dir is not None, job.metadata.name


def test_every_manifest_has_an_expected_outcome() -> None:
    files = {p.name for p in CORPUS.glob("*.yaml")} - {"expected.yaml"}
    assert files == set(EXPECTED)
    assert len(files) >= 12


@pytest.mark.parametrize("name", ACCEPTED)
def test_accepted_manifest_reaches_its_phase(corpus: Corpus, name: str) -> None:
    expected = EXPECTED[name]
    job = corpus.jobs[name]
    if expected["phase"] == "Pending":

        def explained() -> Any:
            view = corpus.backend.get(job)
            messages = [r.message for r in view.replicas]
            return view if messages and all(expected["message"] in m for m in messages) else None

        view = wait_for(f"{name}: {expected['message']!r}", explained, 120, 1)
        # ... and it stays so (a job that waits for a scheduler or Kueue never starts).
        wait_for("a while", lambda: time.time() > view.created_at + PENDING_SETTLE, 120, 1)
        view = corpus.backend.get(job)
        assert view.phase.value == "Pending", view
        assert all(expected["message"] in r.message for r in view.replicas), view.replicas
        return
    view = _ended(corpus, name)
    assert view.phase.value == expected["phase"], (view.reason, view.message)
    if view.finished_at is not None:
        took = view.finished_at - view.created_at
        print(f"\n{name}: {view.phase.value} {took:.0f}s after it was created (API time)")
    if "message" in expected:
        assert view.message == expected["message"]
    for role, pool in (expected.get("nodes") or {}).items():
        # A replica still running when the job succeeded was ended with its pod (no node to
        # see now): the ones whose pods are kept show where the role landed.
        nodes = {r.node for r in view.replicas if r.role == role and r.node}
        assert nodes, view.replicas
        assert all(n and n.startswith(f"tfkube-{pool}-") for n in nodes), nodes


@pytest.mark.parametrize(
    "name", [n for n in ACCEPTED if "left" in EXPECTED[n]], ids=lambda n: n.removesuffix(".yaml")
)
def test_clean_pod_policy_leaves_what_it_says(corpus: Corpus, name: str) -> None:
    """Running: the PS goes, finished workers stay; All: nothing stays; None: the PS still
    runs (checked once the Running job's PS is gone, so the operator has acted)."""
    job = corpus.jobs[name]
    _ended(corpus, name)
    running = corpus.jobs["07-clean-pod-policy-running.yaml"]
    wait_for("the Running job's PS gone", lambda: not _pods(corpus, running, "ps"), 60, 0.5)
    left = EXPECTED[name]["left"]
    seen: dict[str, Any] = {}

    def as_expected() -> dict[str, int] | None:
        pods = {role: _pods(corpus, job, role) for role in left}
        counts = {role: len(found) for role, found in pods.items()}
        seen.update(counts=counts, phases=[p.status.phase for f in pods.values() for p in f])
        if "running" not in name:
            return counts if counts == left else None
        # Running: what still ran when the job ended goes (the PS, and a worker still busy
        # when worker-0's success ended the job: the two finish about together, in either
        # order); what had finished stays, worker-0 always.
        finished = all(p.status.phase in ("Succeeded", "Failed") for f in pods.values() for p in f)
        indexes = {
            (p.metadata.annotations or {}).get("batch.kubernetes.io/job-completion-index")
            for p in pods.get("worker", [])
        }
        kept = (
            counts.get("ps") == 0 and "0" in indexes and counts.get("worker", 0) <= left["worker"]
        )
        return counts if finished and kept else None

    try:
        wait_for(f"{name}: pods left {left}", as_expected, 60, 0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen {seen}") from None


def test_a_converted_manifest_keeps_what_users_wrote(corpus: Corpus) -> None:
    """Spot checks on the pods the operator made from the manifests."""
    helpers = corpus.jobs["11-init-and-sidecar.yaml"]
    try:
        pod = wait_for(
            "the helpers job's pods", lambda: _pods(corpus, helpers, "worker"), OUTCOME_TIMEOUT, 1
        )
    except AssertionError as exc:  # seen once in CI (no pods in 240 s): say where it stood
        view = corpus.backend.get(helpers)
        batch = corpus.kube.batch.list_namespaced_job(
            corpus.namespace, label_selector=f"tfkube.io/job-name={helpers}"
        ).items
        jobs = [(j.metadata.name, j.status.to_dict()) for j in batch]
        raise AssertionError(f"{exc}\n{view.phase} {view.reason} {view.replicas}\n{jobs}") from None
    spec = pod[0].spec
    assert [c.name for c in spec.init_containers] == ["fetch-data", "log-shipper"]
    assert spec.init_containers[1].restart_policy == "Always"  # a native sidecar
    assert pod[0].metadata.labels["team"] == "vision"
    refs = wait_for(
        "the env job's pods",
        lambda: _pods(corpus, corpus.jobs["10-env-valuefrom.yaml"], "worker"),
        OUTCOME_TIMEOUT,
        1,
    )
    env = {e.name: e for e in refs[0].spec.containers[0].env}
    assert env["AWS_ACCESS_KEY_ID"].value_from.secret_key_ref.name == "s3-credentials"
    assert env["POD_IP"].value_from.field_ref.field_path == "status.podIP"
    assert "TFKUBE_COMMAND" in env


def test_refusals_are_checked_without_a_cluster() -> None:
    """(Here for the record: the refused manifests never reach the API server.)"""
    for name, what in EXPECTED.items():
        if "refused" in what:
            with pytest.raises(SpecError):
                parse_job(manifest(name), name)
