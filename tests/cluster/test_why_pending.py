"""Why is it pending? On the real control plane, for each reason a replica cannot start,
`tfkube status` (the backend's view: `kube.observe` over the job's Jobs, pods and the Job
controller's `FailedCreate` Events) says it in the replica's message:

- the claim it asked for unbound (no provisioner here: the scheduler's "unbound immediate
  PersistentVolumeClaims"), also through the CLI, as a user sees it;
- not enough GPUs on any node (the scheduler's "Insufficient nvidia.com/gpu");
- a ResourceQuota that refuses its pod (no pod exists: only the Job's Event says it).

A scheduler that is not installed (a `schedulingPolicy`) and a job suspended for Kueue are
rows of the Kubeflow corpus (tests/cluster/test_kubeflow_corpus.py, 12 and 15); a node
selector no node matches is in tests/cluster/test_operator.py. Image pull errors need a
real kubelet (KWOK pods have no image): tests/unit/test_kube_observe.py has the row.
"""

from __future__ import annotations

from pathlib import Path

from kubernetes import client

from tfkube.engines.kubernetes import KubernetesBackend
from tfkube.spec import parse_job

from ._support import Operator, wait_for
from .test_operator import cli, job_dict, submit

SEEN_WITHIN = 90.0
"""Seconds for the scheduler's verdict or the Job controller's Event to show (loaded CI)."""


def _message(backend: KubernetesBackend, job: str, key: str, words: str) -> str | None:
    replica = {r.key: r for r in backend.get(job).replicas}.get(key)
    return replica.message if replica is not None and words in replica.message else None


def test_unbound_claims_are_named(operator: Operator, code: Path, kube_namespace: str) -> None:
    """The issue's first report: without a provisioner the job stayed Pending, and
    `tfkube status` gave no reason. A job gets a claim only when it asks for one (issue
    23): this one does, and it is never bound here."""
    kube, ns = operator.kube, kube_namespace
    backend = KubernetesBackend(api_client=kube.api_client, namespace=ns)
    data = job_dict("unbound", storage={"logs": {"size": "1Gi"}})
    backend.submit(parse_job(data), code)
    words = "waiting for its PersistentVolumeClaims to be bound"
    message = wait_for(
        "the unbound claims", lambda: _message(backend, "unbound", "worker-0", words), SEEN_WITHIN
    )
    assert "unbound immediate PersistentVolumeClaims" in message, message
    shown = cli(kube, ns, "status", "unbound")
    assert shown.returncode == 0, shown.stderr
    assert "PersistentVolumeClaims" in shown.stdout, shown.stdout


def test_not_enough_gpus_gives_the_schedulers_words(
    operator: Operator, code: Path, kube_namespace: str
) -> None:
    kube, ns = operator.kube, kube_namespace
    data = job_dict("gpus")
    data["spec"]["replicas"]["worker"]["replicas"] = 1
    data["spec"]["replicas"]["worker"]["resources"] = {"gpu": 16}  # no node has 16
    backend = submit(kube, ns, code, data)
    message = wait_for(
        "the scheduler's verdict",
        lambda: _message(backend, "gpus", "worker-0", "Insufficient nvidia.com/gpu"),
        SEEN_WITHIN,
    )
    assert message.startswith("unschedulable"), message


def test_a_quota_that_refuses_the_pod_is_named(
    operator: Operator, code: Path, kube_namespace: str
) -> None:
    """No pod exists to say it: the role Job's `FailedCreate` Event does."""
    kube, ns = operator.kube, kube_namespace
    kube.core.create_namespaced_resource_quota(
        ns,
        client.V1ResourceQuota(
            metadata=client.V1ObjectMeta(name="no-gpus"),
            spec=client.V1ResourceQuotaSpec(hard={"requests.nvidia.com/gpu": "0"}),
        ),
    )
    # Admission refuses every pod ("status unknown") until the quota controller has
    # counted the namespace's usage once.
    wait_for(
        "the quota counted",
        lambda: kube.core.read_namespaced_resource_quota("no-gpus", ns).status.hard or None,
        SEEN_WITHIN,
    )
    data = job_dict("quota")
    data["spec"]["replicas"]["worker"]["replicas"] = 1
    data["spec"]["replicas"]["worker"]["resources"] = {"gpu": 1}
    backend = submit(kube, ns, code, data)
    message = wait_for(
        "the quota's refusal",
        lambda: _message(backend, "quota", "worker-0", "exceeded quota"),
        SEEN_WITHIN,
    )
    assert message.startswith("cannot create its pod"), message
    assert "no-gpus" in message, message
    states = {r.key: r.state.value for r in backend.get("quota").replicas}
    assert states["worker-0"] == "Pending", states
