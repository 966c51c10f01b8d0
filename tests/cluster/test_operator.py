"""The operator against the real control plane: full TFJob lifecycles on KWOK fake nodes.

The operator runs as a subprocess (`python -m tfkube operator --namespace NS`), exactly as
users run it, and is stopped by PID. Jobs are submitted through `KubernetesBackend` (or the
CLI); the fake-pod behaviour comes from `tfkube.io/fake-*` annotations in the replica specs
(docs/testing.md). There is no volume provisioner here; the jobs ask for no claim, so
their replicas' logs and data are emptyDirs and nothing needs binding.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tfkube.engines.kubernetes import KubernetesBackend, LogsUnavailable, install
from tfkube.kube.names import GROUP, PLURAL, VERSION
from tfkube.planner import JobPhase
from tfkube.render import OPERATOR_NAME, REGISTRY_SECRET
from tfkube.spec import parse_job

from ._support import KubeCluster, Operator, service_account_kubeconfig, wait_for

PS_CLEANUP_LIMIT_SECONDS = 10.0
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


# -- helpers ---------------------------------------------------------------------------------


def job_dict(name: str, **spec: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "apiVersion": "tfkube.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {
            "replicas": {
                "ps": {"replicas": 1},
                "worker": {"replicas": 2, "annotations": {"tfkube.io/fake-duration": "2s"}},
            },
            "code": {"source": "./code"},
            "runPolicy": {"backoff": {"baseSeconds": 1, "capSeconds": 2}},
        },
    }
    for key, value in spec.items():
        data["spec"][key] = value
    return data


def submit(
    kube: KubeCluster, namespace: str, base: Path, data: dict[str, Any]
) -> KubernetesBackend:
    backend = KubernetesBackend(api_client=kube.api_client, namespace=namespace)
    job = parse_job(data)
    backend.submit(job, base)
    return backend


def cli(kube: KubeCluster, ns: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`tfkube ARGS --engine kubernetes` as a user runs it."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tfkube",
            *args,
            "--engine",
            "kubernetes",
            "--namespace",
            ns,
            "--kubeconfig",
            str(kube.kubeconfig),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def cli_submit(kube: KubeCluster, ns: str, path: Path) -> subprocess.CompletedProcess[str]:
    return cli(kube, ns, "submit", str(path))


def tfjob(kube: KubeCluster, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        result: dict[str, Any] = client.CustomObjectsApi(
            kube.api_client
        ).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return result


def phase_is(kube: KubeCluster, ns: str, name: str, *phases: str) -> dict[str, Any] | None:
    obj = tfjob(kube, ns, name)
    status = (obj or {}).get("status") or {}
    return status if status.get("phase") in phases else None


def pods(kube: KubeCluster, ns: str, selector: str) -> list[client.V1Pod]:
    return kube.core.list_namespaced_pod(ns, label_selector=selector).items


def events(kube: KubeCluster, ns: str, name: str) -> list[client.CoreV1Event]:
    return [
        e
        for e in kube.core.list_namespaced_event(ns).items
        if e.involved_object.kind == "TFJob" and e.involved_object.name == name
    ]


def nothing_left(kube: KubeCluster, ns: str, job: str) -> bool:
    selector = f"tfkube.io/job-name={job}"
    return not (
        kube.batch.list_namespaced_job(ns, label_selector=selector).items
        or kube.core.list_namespaced_pod(ns, label_selector=selector).items
        or kube.core.list_namespaced_service(ns, label_selector=selector).items
        or kube.core.list_namespaced_config_map(ns, label_selector=selector).items
        or kube.core.list_namespaced_persistent_volume_claim(ns, label_selector=selector).items
    )


# -- lifecycles ------------------------------------------------------------------------------


def test_success_ends_the_ps_within_seconds(
    operator: Operator, code: Path, kube_namespace: str
) -> None:
    kube, ns = operator.kube, kube_namespace
    data = job_dict("ok", runPolicy={"successPolicy": "AllWorkers"})
    data["spec"]["replicas"]["ps"]["replicas"] = 2
    data["spec"]["replicas"]["worker"]["replicas"] = 3
    backend = submit(kube, ns, code, data)
    wait_for("PS pods running", lambda: len(pods(kube, ns, "tfkube.io/replica-type=ps")) == 2)
    status = wait_for("success", lambda: phase_is(kube, ns, "ok", "Succeeded"), 60, 0.1)
    seen_success = time.time()
    wait_for("PS pods gone", lambda: not pods(kube, ns, "tfkube.io/replica-type=ps"), 30, 0.1)
    gone = time.time()
    workers = pods(kube, ns, "tfkube.io/replica-type=worker")
    finished = max(
        p.status.container_statuses[0].state.terminated.finished_at.timestamp() for p in workers
    )
    cleanup = gone - finished
    print(f"\nPS clean-up: {cleanup:.1f}s after the last worker finished (API time, 1 s grain)")
    assert cleanup < PS_CLEANUP_LIMIT_SECONDS
    assert gone - seen_success < PS_CLEANUP_LIMIT_SECONDS

    assert status["reason"] == "Succeeded"
    assert status["replicaStatuses"]["worker"]["succeeded"] == 3
    assert status["restarts"] == 0
    assert status["startTime"]
    assert status["completionTime"]
    # Everything it created is owned by the TFJob; one Job per role, no duplicates.
    uid = tfjob(kube, ns, "ok")["metadata"]["uid"]  # type: ignore[index]
    jobs = kube.batch.list_namespaced_job(ns, label_selector="tfkube.io/job-name=ok").items
    assert sorted(j.metadata.name for j in jobs) == ["ok-ps", "ok-worker"]
    assert [j.metadata.name for j in jobs if j.spec.suspend] == ["ok-ps"]  # PS pods deleted
    for obj in [
        *jobs,
        *kube.core.list_namespaced_service(ns, label_selector="tfkube.io/job-name=ok").items,
        *kube.core.list_namespaced_config_map(ns, label_selector="tfkube.io/job-name=ok").items,
    ]:
        assert [r.uid for r in obj.metadata.owner_references] == [uid], obj.metadata.name
    for role in ("ps", "worker"):  # a headless Service per Job, its pods' subdomain
        service = kube.core.read_namespaced_service(f"ok-{role}", ns)
        assert service.spec.cluster_ip == "None"
        assert service.spec.selector == {"batch.kubernetes.io/job-name": f"ok-{role}"}
    assert len(workers) == 3
    reasons = [e.reason for e in events(kube, ns, "ok")]
    assert "Created" in reasons
    assert "Succeeded" in reasons
    view = backend.get("ok")
    assert view.phase is JobPhase.SUCCEEDED
    assert view.done
    assert {r.key: r.state.value for r in view.replicas}["ps-0"] == "Stopped"
    with pytest.raises(LogsUnavailable, match="fake node"):
        list(backend.logs("ok", "worker-0"))


def test_worker_failure_is_retried_and_the_job_succeeds(
    operator: Operator, code: Path, kube_namespace: str
) -> None:
    """The chief decides success (after 14 s); the worker fails after 1 s each time, and
    Kubernetes re-creates it (its pod template is the same, so it fails again)."""
    kube, ns = operator.kube, kube_namespace
    data = job_dict("retry", runPolicy={"restartPolicy": "OnFailure", "backoffLimit": 6})
    data["spec"]["replicas"] = {
        "chief": {"replicas": 1, "annotations": {"tfkube.io/fake-duration": "14s"}},
        "worker": {
            "replicas": 1,
            "annotations": {"tfkube.io/fake-exit-code": "1", "tfkube.io/fake-fail-after": "1s"},
        },
    }
    submit(kube, ns, code, data)
    wait_for(
        "a worker retried",
        lambda: len(pods(kube, ns, "tfkube.io/replica-type=worker")) >= 2,
        40,
    )
    restarting = wait_for(
        "restarts counted",
        lambda: (phase_is(kube, ns, "retry", "Restarting", "Running", "Succeeded") or {}).get(
            "restarts"
        ),
        30,
    )
    assert restarting >= 1
    status = wait_for("success", lambda: phase_is(kube, ns, "retry", "Succeeded", "Failed"), 40)
    assert status["phase"] == "Succeeded", status
    assert status["restarts"] >= 1
    assert status["message"] == "chief-0 succeeded"
    assert any(e.reason == "ReplicaFailed" for e in events(kube, ns, "retry"))


def test_non_retryable_exit_code_fails_the_job(
    operator: Operator, code: Path, kube_namespace: str
) -> None:
    kube, ns = operator.kube, kube_namespace
    data = job_dict("bad", runPolicy={"restartPolicy": "ExitCode", "backoffLimit": 5})
    data["spec"]["replicas"]["worker"]["annotations"] = {
        "tfkube.io/fake-exit-code": "3",
        "tfkube.io/fake-fail-after": "1s",
    }
    submit(kube, ns, code, data)
    status = wait_for("failure", lambda: phase_is(kube, ns, "bad", "Failed", "Succeeded"), 40)
    assert status["phase"] == "Failed"
    assert status["reason"] in ("ReplicaFailed", "PodFailurePolicy"), status
    assert "exit code 3" in status["message"] or "3" in status["message"]
    assert status["restarts"] == 0
    wait_for("PS gone", lambda: not pods(kube, ns, "tfkube.io/replica-type=ps"), 15)
    assert any(e.type == "Warning" for e in events(kube, ns, "bad"))


def test_ps_failure_restarts_the_whole_job(
    operator: Operator, code: Path, kube_namespace: str
) -> None:
    """The PS fails after 2 s every time (same template): each failure re-creates every
    role's Job (a new generation) after the backoff, until backoffLimit ends it."""
    kube, ns = operator.kube, kube_namespace
    data = job_dict("psfail", runPolicy={"backoffLimit": 2, "backoff": {"baseSeconds": 1}})
    data["spec"]["replicas"]["ps"]["annotations"] = {
        "tfkube.io/fake-exit-code": "1",
        "tfkube.io/fake-fail-after": "2s",
    }
    data["spec"]["replicas"]["worker"]["annotations"] = {"tfkube.io/fake-duration": "60s"}
    submit(kube, ns, code, data)
    first_workers = wait_for(
        "workers running",
        lambda: {
            p.metadata.uid
            for p in pods(kube, ns, "tfkube.io/replica-type=worker")
            if p.status.phase == "Running"
        },
    )
    restarted = wait_for(
        "a whole-job restart",
        lambda: (tfjob(kube, ns, "psfail") or {}).get("status", {}).get("restartGenerations"),
        30,
        0.1,
    )
    assert restarted.get("ps", 0) >= 1
    assert restarted.get("worker", 0) >= 1

    def new_workers() -> bool:
        running = {
            p.metadata.uid
            for p in pods(kube, ns, "tfkube.io/replica-type=worker")
            if p.status.phase == "Running"
        }
        return len(running - first_workers) == 2

    wait_for("both workers re-created", new_workers, 30)
    status = wait_for("the limit", lambda: phase_is(kube, ns, "psfail", "Failed"), 60)
    assert status["reason"] == "BackoffLimitExceeded", status
    # It asked for no claim: its checkpoints were its pods' own, and every restart said
    # it started from scratch (issue 23), as did the job's Storage event.
    assert status["storage"] == {"data": "emptyDir", "logs": "emptyDir"}, status
    said = [e.message for e in events(kube, ns, "psfail")]
    restarts = [m for m in said if "restarting the replicas that use it" in m]
    assert restarts, said
    assert all("from scratch" in m for m in restarts), restarts
    assert any("each pod's own folder (emptyDir" in m for m in said), said
    assert status["restarts"] == 2  # the third PS failure is one too many: not taken
    assert status["restartGenerations"] == {"ps": 2, "worker": 2}
    wait_for("replicas gone", lambda: not pods(kube, ns, "tfkube.io/replica-type=worker"), 20)


def test_status_says_why_a_replica_is_pending(
    operator: Operator, code: Path, kube_namespace: str
) -> None:
    """A worker no node can take: `tfkube status` (the backend's view, the operator's
    interpreter) shows the scheduler's verdict; the operator sees the same state."""
    kube, ns = operator.kube, kube_namespace
    data = job_dict("stuck")
    data["spec"]["replicas"]["worker"]["replicas"] = 1
    data["spec"]["replicas"]["worker"]["nodeSelector"] = {"tfkube.io/pool": "nowhere"}
    backend = submit(kube, ns, code, data)

    def worker_message() -> str | None:
        worker = {r.key: r for r in backend.get("stuck").replicas}["worker-0"]
        return worker.message if worker.message.startswith("unschedulable") else None

    message = wait_for("the scheduler's verdict", worker_message, 30)
    assert "node(s) didn't match" in message, message
    view = backend.get("stuck")
    assert {r.key: r.state.value for r in view.replicas} == {
        "ps-0": "Running",
        "worker-0": "Pending",
    }
    status = wait_for("the operator's status", lambda: phase_is(kube, ns, "stuck", "Running"))
    assert status["replicaStatuses"]["worker"]["active"] == 1
    shown = cli(kube, ns, "status", "stuck")
    assert shown.returncode == 0, shown.stderr
    assert "unschedulable" in shown.stdout, shown.stdout


def test_deadline_exceeded(operator: Operator, code: Path, kube_namespace: str) -> None:
    kube, ns = operator.kube, kube_namespace
    data = job_dict("slow", runPolicy={"activeDeadlineSeconds": 3})
    data["spec"]["replicas"]["worker"]["annotations"] = {"tfkube.io/fake-duration": "60s"}
    started = time.time()
    submit(kube, ns, code, data)
    status = wait_for("the deadline", lambda: phase_is(kube, ns, "slow", "Failed"), 30)
    assert status["reason"] == "DeadlineExceeded"
    assert time.time() - started < 3 + 30  # the deadline, plus a loaded machine's delay
    wait_for("replicas gone", lambda: not pods(kube, ns, "tfkube.io/replica-type"), 20)


def test_ttl_deletes_the_job_and_everything_it_made(
    operator: Operator, code: Path, kube_namespace: str
) -> None:
    kube, ns = operator.kube, kube_namespace
    data = job_dict("ttl", runPolicy={"ttlSecondsAfterFinished": 2})
    data["spec"]["replicas"]["worker"]["annotations"] = {"tfkube.io/fake-duration": "1s"}
    submit(kube, ns, code, data)
    wait_for("success", lambda: phase_is(kube, ns, "ttl", "Succeeded"), 30)
    wait_for("the TFJob deleted", lambda: tfjob(kube, ns, "ttl") is None, 20)
    wait_for("its objects garbage-collected", lambda: nothing_left(kube, ns, "ttl"), 60)


def test_operator_killed_and_restarted_mid_job(
    operator: Operator, code: Path, kube_namespace: str
) -> None:
    kube, ns = operator.kube, kube_namespace
    data = job_dict("survive")
    data["spec"]["replicas"]["worker"]["annotations"] = {"tfkube.io/fake-duration": "6s"}
    submit(kube, ns, code, data)
    wait_for("running", lambda: phase_is(kube, ns, "survive", "Running"), 30)
    operator.kill(signal.SIGKILL)
    time.sleep(1)
    operator.start()
    status = wait_for("success", lambda: phase_is(kube, ns, "survive", "Succeeded"), 40)
    assert status["restarts"] == 0
    jobs = kube.batch.list_namespaced_job(ns, label_selector="tfkube.io/job-name=survive")
    assert sorted(j.metadata.name for j in jobs.items) == ["survive-ps", "survive-worker"]
    workers = pods(kube, ns, "tfkube.io/replica-type=worker")
    # No pod made twice. worker-1's may be gone: the job succeeds with worker-0 (its chief),
    # and a worker still running then is stopped (KWOK may have started it later, each runs
    # 6 s from its own start).
    indexes = [p.metadata.labels[COMPLETION_INDEX] for p in workers]
    assert sorted(set(indexes)) == sorted(indexes), indexes
    (chief,) = [p for p in workers if p.metadata.labels[COMPLETION_INDEX] == "0"]
    assert chief.status.phase == "Succeeded", chief.status
    reasons = [e.reason for e in events(kube, ns, "survive")]
    assert reasons.count("Created") == 1
    assert reasons.count("Succeeded") == 1
    wait_for("PS gone", lambda: not pods(kube, ns, "tfkube.io/replica-type=ps"), 15)


@pytest.mark.parametrize(
    "signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"]
)
def test_a_stop_signal_ends_the_operator_cleanly_and_the_job_carries_on(
    operator: Operator, code: Path, kube_namespace: str, signum: signal.Signals
) -> None:
    """Ctrl-C, SIGTERM or a closed terminal (SIGHUP), sent to the operator alone: it stops
    (kopf's clean stop, exit 0) and leaves the job to the cluster; the next operator takes
    it over to success, nothing made twice (the README's table)."""
    kube, ns = operator.kube, kube_namespace
    data = job_dict("handed-over")
    data["spec"]["replicas"]["worker"]["annotations"] = {"tfkube.io/fake-duration": "8s"}
    submit(kube, ns, code, data)
    wait_for("running", lambda: phase_is(kube, ns, "handed-over", "Running"), 30)
    assert operator.proc is not None
    operator.proc.send_signal(signum)
    assert operator.proc.wait(30) == 0, operator.log.read_text()[-3000:]
    assert phase_is(kube, ns, "handed-over", "Running")  # no operator: nothing changed
    operator.start()
    status = wait_for("success", lambda: phase_is(kube, ns, "handed-over", "Succeeded"), 40)
    assert status["restarts"] == 0
    reasons = [e.reason for e in events(kube, ns, "handed-over")]
    assert reasons.count("Created") == 1


def test_deleting_a_running_tfjob_removes_everything(
    operator: Operator, code: Path, kube_namespace: str
) -> None:
    kube, ns = operator.kube, kube_namespace
    data = job_dict("gone")
    data["spec"]["replicas"]["worker"]["annotations"] = {"tfkube.io/fake-duration": "60s"}
    backend = submit(kube, ns, code, data)
    wait_for("running", lambda: phase_is(kube, ns, "gone", "Running"), 30)
    backend.delete("gone")
    wait_for("everything gone", lambda: nothing_left(kube, ns, "gone"), 60)
    assert tfjob(kube, ns, "gone") is None


def test_suspend_and_resume(operator: Operator, code: Path, kube_namespace: str) -> None:
    kube, ns = operator.kube, kube_namespace
    data = job_dict("nap")
    data["spec"]["replicas"]["worker"]["annotations"] = {"tfkube.io/fake-duration": "8s"}
    submit(kube, ns, code, data)
    wait_for("running", lambda: phase_is(kube, ns, "nap", "Running"), 30)
    custom = client.CustomObjectsApi(kube.api_client)
    patch = {"spec": {"runPolicy": {"suspend": True}}}
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "nap", patch)
    wait_for(
        "suspended",
        lambda: (tfjob(kube, ns, "nap") or {}).get("status", {}).get("reason") == "Suspended",
        20,
    )
    wait_for("pods stopped", lambda: not pods(kube, ns, "tfkube.io/replica-type"), 20)
    patch = {"spec": {"runPolicy": {"suspend": False}}}
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "nap", patch)
    status = wait_for("success", lambda: phase_is(kube, ns, "nap", "Succeeded"), 40)
    assert status["restarts"] == 0
    reasons = [e.reason for e in events(kube, ns, "nap")]
    assert "Suspended" in reasons
    assert "Resumed" in reasons


def test_invalid_tfjob_is_rejected_with_a_clear_message(
    operator: Operator, code: Path, kube_namespace: str
) -> None:
    kube, ns = operator.kube, kube_namespace
    # Through the CLI: checked before anything is created.
    bad = job_dict("bad-env")
    bad["spec"]["replicas"]["worker"]["env"] = {"TF_CONFIG": "{}"}
    path = code / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    proc = cli_submit(kube, ns, path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "spec.replicas.worker.env" in proc.stderr
    assert "set by tfkube itself" in proc.stderr
    assert tfjob(kube, ns, "bad-env") is None
    # Written straight to the API (kubectl apply): a rule the CRD schema cannot express is
    # the operator's to report, on the TFJob's status and as a Warning event.
    custom = client.CustomObjectsApi(kube.api_client)
    custom.create_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, {**bad, "metadata": {"name": "bad-env"}}
    )
    status = wait_for("rejected", lambda: phase_is(kube, ns, "bad-env", "Failed"), 20)
    assert status["reason"] == "InvalidSpec"
    assert "spec.replicas.worker.env" in status["message"]
    assert "set by tfkube itself" in status["message"]
    assert any(
        e.type == "Warning" and e.reason == "InvalidSpec" for e in events(kube, ns, "bad-env")
    )
    assert not kube.batch.list_namespaced_job(ns).items


KUBEFLOW = """
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: kf-mnist
  annotations:
    tfkube.io/code-source: "."
spec:
  runPolicy:
    cleanPodPolicy: Running
    backoffLimit: 2
  tfReplicaSpecs:
    PS:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: tensorflow
              image: tensorflow/tensorflow:2.21.0
              command: [python, train.py]
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        metadata:
          annotations:
            tfkube.io/fake-duration: 2s
        spec:
          containers:
            - name: tensorflow
              image: tensorflow/tensorflow:2.21.0
              command: [python, train.py]
              args: [--steps=10]
              resources:
                limits: {cpu: "1", memory: 1Gi}
"""


def test_kubeflow_manifest_is_converted_and_run(
    operator: Operator, code: Path, kube_namespace: str
) -> None:
    kube, ns = operator.kube, kube_namespace
    path = code / "code" / "kubeflow.yaml"  # next to train.py, shipped by code-source "."
    path.write_text(KUBEFLOW)
    proc = cli_submit(kube, ns, path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stored = tfjob(kube, ns, "kf-mnist")
    assert stored is not None
    assert stored["apiVersion"] == "tfkube.io/v1alpha1"
    assert stored["spec"]["code"]["source"] == "."
    assert stored["spec"]["replicas"]["worker"]["command"] == ["python", "train.py"]
    assert stored["spec"]["replicas"]["worker"]["args"] == ["--steps=10"]
    status = wait_for("success", lambda: phase_is(kube, ns, "kf-mnist", "Succeeded"), 40)
    assert status["message"] == "worker-0 succeeded"
    wait_for("PS gone", lambda: not pods(kube, ns, "tfkube.io/replica-type=ps"), 15)
    worker = pods(kube, ns, "tfkube.io/replica-type=worker")[0]
    limits = worker.spec.containers[0].resources.limits
    assert (limits["cpu"], limits["memory"]) == ("1", "1Gi")


def test_cli_parity_with_tfkube_engine(operator: Operator, code: Path, kube_namespace: str) -> None:
    """submit, list, status, logs, delete through the CLI with TFKUBE_ENGINE=kubernetes."""
    kube, ns = operator.kube, kube_namespace
    env = {**os.environ, "TFKUBE_ENGINE": "kubernetes", "KUBECONFIG": str(kube.kubeconfig)}

    def tfkube(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tfkube", *args, "--namespace", ns],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            cwd=code,
        )

    data = job_dict("cli")
    data["spec"]["replicas"]["worker"]["annotations"] = {"tfkube.io/fake-duration": "1s"}
    (code / "cli.yaml").write_text(yaml.safe_dump(data))
    got = tfkube("submit", "cli.yaml")
    assert got.returncode == 0, got.stderr
    assert f"submitted (3 replicas) to namespace {ns}" in " ".join(got.stdout.split())
    again = tfkube("submit", "cli.yaml")
    assert again.returncode == 2
    assert "already exists" in again.stderr
    backend = KubernetesBackend(api_client=kube.api_client, namespace=ns)
    view = backend.wait("cli", timeout=40)
    assert view.phase is JobPhase.SUCCEEDED
    listed = tfkube("list")
    assert listed.returncode == 0, listed.stderr
    assert "cli" in listed.stdout
    assert "Succeeded" in listed.stdout
    shown = tfkube("status", "cli")
    assert shown.returncode == 0, shown.stderr
    assert "worker-1" in shown.stdout
    assert "Succeeded" in shown.stdout
    logs = tfkube("logs", "cli", "-r", "worker-0")
    assert logs.returncode == 1
    assert "fake node" in " ".join(logs.stderr.split())
    deleted = tfkube("delete", "cli")
    assert deleted.returncode == 0, deleted.stderr
    assert "deleted (it was Succeeded)" in deleted.stdout
    missing = tfkube("status", "cli")
    assert missing.returncode == 1
    assert "no job named 'cli'" in missing.stderr
    wait_for("everything gone", lambda: nothing_left(kube, ns, "cli"), 60)


def _operator_environment(kube: KubeCluster, namespace: str) -> dict[str, str]:
    """The environment the installed operator Deployment in `namespace` gives its pod (the
    kubelet resolves `fieldRef: metadata.namespace` to the pod's namespace)."""
    deployment = client.AppsV1Api(kube.api_client).read_namespaced_deployment(
        OPERATOR_NAME, namespace
    )
    env = {}
    for var in deployment.spec.template.spec.containers[0].env:
        if var.value is not None:
            env[var.name] = var.value
        else:
            assert var.value_from.field_ref.field_path == "metadata.namespace", var
            env[var.name] = namespace
    return env


def test_installed_in_another_namespace_jobs_get_that_namespaces_registry_secret(
    crd: KubeCluster, code: Path, kube_namespace: str, tmp_path: Path
) -> None:
    """`tfkube install -n <other>`: the operator runs in <other> and copies the platform's
    image-pull Secret from there (not from tfkube-system) into each job's namespace."""
    kube, ns = crd, kube_namespace
    other = f"tfkube-other-{uuid.uuid4().hex[:6]}"
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "tfkube",
            "install",
            "-n",
            other,
            "--kubeconfig",
            str(kube.kubeconfig),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    op: Operator | None = None
    try:
        assert installed.returncode == 0, installed.stderr + installed.stdout
        pull = {"auths": {"registry.example": {"auth": base64.b64encode(b"u:p").decode()}}}
        kube.core.create_namespaced_secret(
            other,
            client.V1Secret(
                metadata=client.V1ObjectMeta(name=REGISTRY_SECRET),
                type="kubernetes.io/dockerconfigjson",
                string_data={".dockerconfigjson": json.dumps(pull)},
            ),
        )
        env = _operator_environment(kube, other)
        assert env == {
            "TFKUBE_OPERATOR_NAMESPACE": other,
            "TFKUBE_REGISTRY_SECRET": REGISTRY_SECRET,
        }
        token = service_account_kubeconfig(kube, OPERATOR_NAME, other, tmp_path / "kubeconfig")
        op = Operator(kube, ns, tmp_path / "operator.log", token, env=env)
        op.start()
        submit(kube, ns, code, job_dict("pulls"))

        def copied() -> client.V1Secret | None:
            try:
                secret: client.V1Secret = kube.core.read_namespaced_secret("pulls-registry", ns)
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise
            return secret

        secret = wait_for("the registry secret's copy in the job's namespace", copied, 60)
        assert secret.type == "kubernetes.io/dockerconfigjson"
        assert json.loads(base64.b64decode(secret.data[".dockerconfigjson"])) == pull
        worker = kube.batch.read_namespaced_job("pulls-worker", ns)
        pulls = [s.name for s in worker.spec.template.spec.image_pull_secrets or []]
        assert "pulls-registry" in pulls
        assert wait_for("success", lambda: phase_is(kube, ns, "pulls", "Succeeded"), 60)
    finally:
        if op is not None:
            op.kill()
        # The ClusterRoleBinding is cluster-wide: give it back to tfkube-system's operator.
        install(kube.api_client)
        kube.core.delete_namespace(other, propagation_policy="Background")
    assert not op.errors(), op.log.read_text()[-5000:]
    assert "Forbidden" not in op.log.read_text(), op.log.read_text()[-5000:]
