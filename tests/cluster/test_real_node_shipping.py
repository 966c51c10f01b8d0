"""Kept logs, charts and the result of a job in real pods with no shared folder at all
(issue 18 point 2): the replicas ship them to the server.

The platform of test_real_node_serving.py (the server on the real node's bridge, where pods
reach it), but the team has no outputs claim: each pod's folder is its own. The
between-graph example trains in real pods; a worker's pod is deleted mid-run. Once the job
has ended and its pods are gone, the server still has every replica's log (the deleted
worker's two starts, each whole), the training curves from the chief's event files and
the job's result.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ._support import KubeCluster, RealNode, wait_for
from .test_real_node_serving import EXAMPLE, JOB_TIMEOUT, Team, node_platform

JOB = "shipped"


@pytest.fixture(scope="module")
def team(
    kube_cluster: KubeCluster,
    real_node: RealNode,
    operator_kubeconfig: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Team]:
    tmp = tmp_path_factory.mktemp("node-shipping")
    with node_platform(kube_cluster, real_node, operator_kubeconfig, tmp, outputs=False) as made:
        yield made


def job_manifest(node: RealNode) -> str:
    raw = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    raw["metadata"]["name"] = JOB
    spec = raw["spec"]
    spec["code"]["source"] = "artifact:mnist"
    spec["runPolicy"] = {**spec.get("runPolicy", {}), "backoffLimit": 6}
    for role in spec["replicas"].values():
        role["nodeSelector"] = dict(node.SELECTOR)
        role["tolerations"] = list(node.TOLERATIONS)
        role.get("resources", {}).pop("cpu", None)
    # Long enough to delete a worker mid-run (two workers share 2,000 global steps).
    spec["replicas"]["worker"]["args"] = ["--train_steps=2000", "--step_sleep=0.05"]
    return str(yaml.safe_dump(raw))


def test_a_job_without_shared_storage_keeps_its_logs_curves_and_result(team: Team) -> None:
    api, kube, ns = team.member, team.kube, team.namespace
    job = api.ok(
        api.post(f"/api/v1/teams/{team.name}/jobs", json={"manifest": job_manifest(team.node)}),
        201,
    )
    jid = job["id"]

    def worker_1_log() -> str:
        r = api.get(f"/api/v1/jobs/{jid}/logs/worker-1", params={"attempt": 0})
        return r.text if r.status_code == 200 else ""

    # worker-1's first start is shipped as it trains.
    wait_for("worker-1 training, shipped", lambda: re.search(r"global_step=\d+ loss",
             worker_1_log()), JOB_TIMEOUT, 1.0)  # fmt: skip
    pods = kube.core.list_namespaced_pod(
        ns, label_selector=f"tfkube.io/job-name={JOB},tfkube.io/replica-type=worker"
    ).items
    victim = next(
        p
        for p in pods
        if p.metadata.annotations.get("batch.kubernetes.io/job-completion-index") == "1"
    )
    kube.core.delete_namespaced_pod(victim.metadata.name, ns)
    done = wait_for(
        "the job to end",
        lambda: (
            (j := api.ok(api.get(f"/api/v1/jobs/{jid}")))["phase"] in ("Succeeded", "Failed") and j
        ),
        JOB_TIMEOUT,
        2.0,
    )
    assert done["phase"] == "Succeeded", done
    # Every pod of the job gone (as after a node loss or a TTL): the server still has it all.
    for pod in kube.core.list_namespaced_pod(ns, label_selector=f"tfkube.io/job-name={JOB}").items:
        kube.core.delete_namespaced_pod(pod.metadata.name, ns, grace_period_seconds=0)
    wait_for(
        "the pods gone",
        lambda: (
            not kube.core.list_namespaced_pod(ns, label_selector=f"tfkube.io/job-name={JOB}").items
        ),
        120,
    )
    logs = api.ok(api.get(f"/api/v1/jobs/{jid}/logs"))
    starts = {(f["replica"], f["attempt"]) for f in logs}
    assert {("ps-0", 0), ("worker-0", 0), ("worker-1", 0), ("worker-1", 1)} <= starts, logs
    chief = api.get(f"/api/v1/jobs/{jid}/logs/worker-0", params={"attempt": 0}).text
    assert "tfkube-example: result" in chief, chief[-2000:]
    assert "entrypoint exited with 0" in chief, chief[-2000:]  # the launcher's last line
    deleted = api.get(f"/api/v1/jobs/{jid}/logs/worker-1", params={"attempt": 0}).text
    assert re.search(r"global_step=\d+ loss", deleted), deleted[-2000:]
    again = api.get(f"/api/v1/jobs/{jid}/logs/worker-1", params={"attempt": 1}).text
    assert re.search(r"global_step=\d+ loss", again), again[-2000:]
    scalars = api.ok(api.get(f"/api/v1/jobs/{jid}/scalars"))
    assert any(s["points"] for s in scalars["series"]), scalars
    result = api.ok(api.get(f"/api/v1/jobs/{jid}"))["result"]
    assert result["test_accuracy"] >= 0.9, result
    print(f"\nshipped: {sorted(starts)}; {len(scalars['series'])} curves; result {result}")
