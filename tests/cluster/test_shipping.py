"""Kept logs, charts and the result without a shared folder: replicas ship them to the
server (issue 18 point 2), against the real control plane.

The platform as test_server_kubernetes.py runs it, but with no outputs claim: each pod's
log folder is its own. The server gives the job's TFJob a shipping URL and a job-scoped
token (in the job's Secret, never in a spec); the operator renders them into the pods.
KWOK's pods run no container, so the test is the kubelet: it reads the worker's pod
template as the operator made it, resolves its Secret references from the cluster, and
runs the real launcher here with exactly that environment (the pod's emptyDir a folder of
its own). What the launcher ships, the server serves: every start's log (a second pod of
the same replica is its next attempt), the job's charts from the event files, its result;
and it stays after the pod is gone. The shipping door's attacks:
tests/security/test_ship_door.py.
The same in real pods: tests/cluster/test_real_node_shipping.py.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tfkube import contract
from tfkube.kube.names import SHIP_URL_ANNOTATION

from ._support import KubeCluster, wait_for
from .test_operator import tfjob
from .test_server_kubernetes import (
    Team,
    manifest,
    operated_team,
    running_platform,
    submit_manifest,
)

RUN_SH = """#!/bin/sh
set -e
echo "hello from $TFKUBE_ROLE-$TFKUBE_INDEX"
echo "tfkube-steps: 3"
"$TFKUBE_PYTHON" - <<'EOF'
import json, os, time
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
log_dir = os.environ["TFKUBE_LOG_DIR"]
writer = EventFileWriter(os.path.join(log_dir, "train"))
for step in range(1, 4):
    value = summary_pb2.Summary.Value(tag="loss", simple_value=1.0 / step)
    writer.add_event(event_pb2.Event(wall_time=time.time(), step=step,
                                     summary=summary_pb2.Summary(value=[value])))
writer.close()
with open(os.path.join(log_dir, "result.json.tmp"), "w") as f:
    json.dump({"test_accuracy": 0.5, "global_step": 3}, f)
os.rename(os.path.join(log_dir, "result.json.tmp"), os.path.join(log_dir, "result.json"))
EOF
echo "the last line of $ATTEMPT_NAME"
"""


@pytest.fixture(scope="module")
def shipping(
    kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory, operator_kubeconfig: Path
) -> Iterator[Team]:
    tmp = tmp_path_factory.mktemp("k8s-shipping")
    with (
        running_platform(kube_cluster, tmp, outputs_claim=None, code_url=None) as platform,
        operated_team(platform, operator_kubeconfig, {"run.sh": RUN_SH}, outputs=False) as team,
    ):
        yield team


def pod_env(kube: KubeCluster, namespace: str, job: str, role: str) -> dict[str, str]:
    """The role's pod environment as a kubelet would give it: the operator's template,
    its Secret and ConfigMap references resolved."""
    found = wait_for(
        f"the {role} Job",
        lambda: (
            kube.batch.list_namespaced_job(
                namespace, label_selector=f"tfkube.io/job-name={job},tfkube.io/replica-type={role}"
            ).items
        ),
        60,
    )
    container = found[0].spec.template.spec.containers[0]
    env: dict[str, str] = {}
    for var in container.env or []:
        if var.value is not None:
            env[var.name] = var.value
        elif var.value_from is not None and var.value_from.secret_key_ref is not None:
            ref = var.value_from.secret_key_ref
            secret = kube.core.read_namespaced_secret(ref.name, namespace)
            env[var.name] = base64.b64decode(secret.data[ref.key]).decode()
        elif var.value_from is not None and var.value_from.config_map_key_ref is not None:
            ref = var.value_from.config_map_key_ref  # the job's size (`tfkube scale`)
            env[var.name] = kube.core.read_namespaced_config_map(ref.name, namespace).data[ref.key]
    return env


def launcher_env(env: dict[str, str], pod: Path, name: str) -> dict[str, str]:
    """The pod's environment with its emptyDir folders under `pod` (index 0)."""
    return {
        **env,
        contract.LOG_DIR: str(pod / "logs"),
        contract.WORK_DIR: str(pod / "work"),
        contract.VENV_CACHE: str(pod / "venvs"),
        contract.TERMINATION_LOG: str(pod / "termination-log"),
        contract.K8S_INDEX: "0",
        "HOME": str(pod / "home"),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "TFKUBE_PYTHON": sys.executable,
        "ATTEMPT_NAME": name,
    }


def run_launcher(env: dict[str, str], pod: Path, name: str) -> subprocess.CompletedProcess[str]:
    """The real launcher, as in a pod of its own: `pod` holds its emptyDir folders."""
    for sub in ("logs", "work", "venvs", "home"):
        (pod / sub).mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "tfkube.launcher"],
        env=launcher_env(env, pod, name),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_replicas_ship_logs_charts_and_result_that_outlive_their_pods(
    shipping: Team, tmp_path: Path
) -> None:
    team, api = shipping, shipping.member
    kube = team.platform.kube
    job = submit_manifest(team, manifest("shipped", code={"source": "artifact:hello"}))
    tf = wait_for("the TFJob", lambda: tfjob(kube, team.namespace, "shipped"), 30)
    ship_url = f"{team.platform.server.url}/api/v1/ship/{job['id']}"
    assert tf["metadata"]["annotations"][SHIP_URL_ANNOTATION] == ship_url
    assert "claimName" not in (tf["spec"]["storage"].get("logs") or {})
    env = pod_env(kube, team.namespace, "shipped", "worker")
    # The token reaches the pod from the job's Secret, never written in a spec.
    assert env[contract.SHIP_URL] == ship_url
    assert env[contract.SHIP_TOKEN]
    assert env[contract.SHIP_TOKEN] not in str(tf)

    first = run_launcher(env, tmp_path / "pod-1", "start 1")
    assert first.returncode == 0, first.stderr[-3000:]
    # The replica's own folder had it all; now the server has it too.
    logs = api.ok(api.get(f"/api/v1/jobs/{job['id']}/logs"))
    assert [(f["replica"], f["attempt"]) for f in logs] == [("worker-0", 0)], logs
    text = api.get(f"/api/v1/jobs/{job['id']}/logs/worker-0", params={"attempt": 0}).text
    assert "hello from worker-0" in text, text
    assert "the last line of start 1" in text, text

    # A second pod of the same replica (a new emptyDir, maybe another node): attempt 1.
    second = run_launcher(env, tmp_path / "pod-2", "start 2")
    assert second.returncode == 0, second.stderr[-3000:]
    logs = api.ok(api.get(f"/api/v1/jobs/{job['id']}/logs"))
    assert [(f["replica"], f["attempt"]) for f in logs] == [("worker-0", 0), ("worker-0", 1)]
    text = api.get(f"/api/v1/jobs/{job['id']}/logs/worker-0", params={"attempt": 1}).text
    assert "the last line of start 2" in text, text
    assert "start 1" not in text, text

    # The charts from the shipped event files, the result from the shipped result.json.
    scalars = api.ok(api.get(f"/api/v1/jobs/{job['id']}/scalars"))
    loss = [s for s in scalars["series"] if s["tag"] == "loss"]
    assert loss, scalars
    assert {s["run"] for s in loss} == {"train"}, scalars
    assert {p["step"] for s in loss for p in s["points"]} == {1, 2, 3}, loss
    found = wait_for(
        "the job's result",
        lambda: api.ok(api.get(f"/api/v1/jobs/{job['id']}")).get("result"),
        30,
    )
    assert found == {"test_accuracy": 0.5, "global_step": 3}

    # KWOK's fake pods have no resource metrics. Without a metrics API (metrics-server runs
    # only beside a real node) the job's usage says why, and what to install.
    aggregated = client.ApiregistrationV1Api(kube.api_client).list_api_service().items
    if not any(a.metadata.name == "v1beta1.metrics.k8s.io" for a in aggregated):
        usage = wait_for(
            "the reason there is no usage",
            lambda: (u := api.ok(api.get(f"/api/v1/jobs/{job['id']}/usage")))["reason"] and u,
            30,
        )
        assert usage["available"] is False, usage
        assert "no metrics API (metrics.k8s.io)" in usage["reason"], usage
        assert "metrics-server" in usage["reason"], usage

    # The pods go (KWOK's fakes here): what was shipped stays, and search finds it.
    for pod in kube.core.list_namespaced_pod(
        team.namespace, label_selector="tfkube.io/job-name=shipped"
    ).items:
        kube.core.delete_namespaced_pod(pod.metadata.name, team.namespace)
    hits = api.ok(
        api.get(f"/api/v1/jobs/{job['id']}/logs/search", params={"q": "the last line of"})
    )["hits"]
    assert sorted(h["attempt"] for h in hits) == [0, 1]


STEPS_SH = """#!/bin/sh
# worker-1 takes a step a second, the others ten: worker-1 is the straggler.
if [ "$TFKUBE_ROLE-$TFKUBE_INDEX" = worker-1 ]; then pause=1; else pause=0.1; fi
i=0
end=$(( $(date +%s) + 40 ))
while [ "$(date +%s)" -lt "$end" ]; do
  i=$((i + 1))
  echo "tfkube-steps: $i"
  sleep $pause
done
"""


def test_stragglers_from_shipped_logs(shipping: Team, tmp_path: Path) -> None:
    """The server reads each running worker's steps from its kept log (shipped here) and
    flags the one below half the median, as the local supervisor does (issue 21 point 4)."""
    team, api = shipping, shipping.member
    kube = team.platform.kube
    team.upload_code("steps", {"run.sh": STEPS_SH})
    spec = manifest("steps", code={"source": "artifact:steps"}, runPolicy={"stragglerSeconds": 6})
    spec["spec"]["replicas"]["worker"]["replicas"] = 2
    job = submit_manifest(team, spec)
    env = pod_env(kube, team.namespace, "steps", "worker")
    procs = []
    for index in (0, 1):
        pod = tmp_path / f"worker-{index}"
        for sub in ("logs", "work", "venvs", "home"):
            (pod / sub).mkdir(parents=True)
        here = {**launcher_env(env, pod, "steps"), contract.K8S_INDEX: str(index)}
        procs.append(subprocess.Popen([sys.executable, "-m", "tfkube.launcher"], env=here))
    try:

        def flagged() -> dict[str, Any] | None:
            replicas = api.ok(api.get(f"/api/v1/jobs/{job['id']}"))["replicas"]
            by_key = {r["key"]: r for r in replicas}
            slow = by_key.get("worker-1", {})
            return by_key if slow.get("straggler") else None

        replicas = wait_for("worker-1 flagged a straggler", flagged, 35, 1.0)
        assert replicas["worker-0"]["straggler"] is False, replicas
        assert replicas["worker-0"]["step_rate"] > 5 > replicas["worker-1"]["step_rate"] > 0.5
        events = api.ok(api.get(f"/api/v1/jobs/{job['id']}/events"))
        said = [e["message"] for e in events if "straggler" in e["message"]]
        assert any(m.startswith("worker-1 is a straggler: ") for m in said), said
        assert not any(m.startswith("worker-0 is a straggler") for m in said), said
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)
