"""The Kubernetes engine's `Backend`: TFJob custom resources in one namespace of a cluster.

submit: check the job fully on this machine (spec, code, rendering), ship a local code
folder as the ConfigMap `<job>-code`, create the TFJob, then make the ConfigMap owned by
it. Everything after that is the operator's (`tfkube operator`): this backend only reads
the TFJob's status and its pods, and deletes the TFJob (the garbage collector deletes what
it owns). Logs come from the pod log API, which the node's kubelet serves.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from tfkube.api import SpecError, TFJob, dump_job
from tfkube.backends._artifact import prepare_artifact
from tfkube.backends._base import JobExists, JobNotFound, JobView, ReplicaView
from tfkube.backends.kubernetes._rest import rest_request
from tfkube.planner import JobPhase, ReplicaState
from tfkube.render import (
    CONTAINER,
    GROUP,
    LABEL_JOB,
    LABEL_ROLE,
    PLURAL,
    VERSION,
    RenderOptions,
    code_configmap_name,
    render_job,
)

INDEX_KEY = "batch.kubernetes.io/job-completion-index"
STOP_ANNOTATION = "tfkube.io/stop"
"""Set by `stop`: the operator ends the job Failed (Stopped)."""
LOG_TIMEOUT_SECONDS = 15.0


class LogsUnavailable(ValueError):
    """The cluster could not serve a pod's log (e.g. no kubelet behind a fake node)."""


def _time(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _pod_state(pod: Mapping[str, Any]) -> ReplicaState:
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    return {
        "Pending": ReplicaState.PENDING,
        "Running": ReplicaState.RUNNING,
        "Succeeded": ReplicaState.SUCCEEDED,
        "Failed": ReplicaState.FAILED,
    }.get(phase, ReplicaState.PENDING)


def _exit_code(pod: Mapping[str, Any]) -> int | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated")
        if terminated and terminated.get("exitCode") is not None:
            return int(terminated["exitCode"])
    return None


def _index(pod: Mapping[str, Any]) -> int | None:
    meta = pod.get("metadata") or {}
    value = (meta.get("labels") or {}).get(INDEX_KEY) or (meta.get("annotations") or {}).get(
        INDEX_KEY
    )
    return int(value) if value is not None and str(value).isdigit() else None


def job_view(tfjob: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> JobView:
    """A TFJob resource and its pods -> the engine-neutral view (pure)."""
    meta = tfjob.get("metadata") or {}
    status = tfjob.get("status") or {}
    spec = tfjob.get("spec") or {}
    name = str(meta.get("name"))
    try:
        phase = JobPhase(status.get("phase") or "Pending")
    except ValueError:
        phase = JobPhase.PENDING
    port = int((spec.get("runPolicy") or {}).get("port") or 2222)
    by_key: dict[str, builtins.list[Mapping[str, Any]]] = {}
    for pod in pods:
        role = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_ROLE)
        index = _index(pod)
        if role is None or index is None:
            continue
        by_key.setdefault(f"{role}-{index}", []).append(pod)
    replicas = []
    for role in ("chief", "ps", "worker", "evaluator"):
        count = int(((spec.get("replicas") or {}).get(role) or {}).get("replicas", 0) or 0)
        for i in range(count):
            key = f"{role}-{i}"
            mine = sorted(
                (p for p in by_key.get(key, []) if not p["metadata"].get("deletionTimestamp")),
                key=lambda p: str(p["metadata"].get("creationTimestamp")),
            )
            failed = sum(_pod_state(p) is ReplicaState.FAILED for p in mine)
            if mine:
                newest = mine[-1]
                state = _pod_state(newest)
                if any(_pod_state(p) is ReplicaState.SUCCEEDED for p in mine):
                    state = ReplicaState.SUCCEEDED
                code = _exit_code(newest)
                restarts = failed - (state is ReplicaState.FAILED)
            else:
                state = ReplicaState.STOPPED if phase.terminal else ReplicaState.PENDING
                code, restarts = None, 0
            replicas.append(
                ReplicaView(
                    key=key,
                    role=role,
                    index=i,
                    state=state,
                    restarts=max(restarts, 0),
                    exit_code=code,
                    address=f"{name}-{role}-{i}.{name}:{port}",
                )
            )
    return JobView(
        name=name,
        phase=phase,
        restarts=int(status.get("restarts") or 0),
        created_at=_time(meta.get("creationTimestamp")) or time.time(),
        started_at=_time(status.get("startTime")),
        finished_at=_time(status.get("completionTime")),
        reason=status.get("reason"),
        message=status.get("message"),
        replicas=tuple(replicas),
        extra={"namespace": str(meta.get("namespace") or ""), "engine": "kubernetes"},
    )


class KubernetesBackend:
    """Runs TFJobs through the TFJob resource; needs `tfkube operator` in the cluster."""

    def __init__(
        self,
        api_client: Any = None,
        namespace: str | None = None,
        kubeconfig: Path | None = None,
    ) -> None:
        from kubernetes.client.exceptions import ApiException

        from tfkube.backends.kubernetes._install import api_client_from

        self.api = api_client if api_client is not None else api_client_from(kubeconfig)
        self.namespace = namespace or _context_namespace(kubeconfig) or "default"
        self.ApiException = ApiException

    # -- REST -------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        timeout: float = 60.0,
        raw: bool = False,
    ) -> Any:
        return rest_request(self.api, method, path, body, query, content_type, timeout, raw)

    def _tfjobs(self, name: str = "") -> str:
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{self.namespace}/{PLURAL}"
        return f"{path}/{name}" if name else path

    def _read(self, name: str) -> dict[str, Any]:
        try:
            result: dict[str, Any] = self._request("GET", self._tfjobs(name))
        except self.ApiException as exc:
            if exc.status == 404:
                raise JobNotFound(name) from None
            raise
        return result

    def _pods(self, selector: str) -> builtins.list[dict[str, Any]]:
        data = self._request(
            "GET",
            f"/api/v1/namespaces/{self.namespace}/pods",
            query={"labelSelector": selector},
        )
        items: builtins.list[dict[str, Any]] = data.get("items") or []
        return items

    # -- the Backend protocol ---------------------------------------------------------

    def submit(self, job: TFJob, base_dir: Path) -> JobView:
        code_archive = None
        if not job.spec.code.is_url:
            with tempfile.TemporaryDirectory(prefix="tfkube-submit-") as tmp:
                code_archive = prepare_artifact(job, base_dir, Path(tmp)).path.read_bytes()
        # Render here too: a job the operator could not render fails now, not later.
        objects = render_job(
            job, RenderOptions(namespace=self.namespace, managed=True, code_archive=code_archive)
        )
        try:
            current = self._read(job.name)
        except JobNotFound:
            current = None
        if current is not None:
            phase = (current.get("status") or {}).get("phase") or "Pending"
            raise JobExists(
                f"a job named {job.name!r} already exists in namespace {self.namespace} "
                f"({phase}); `tfkube delete {job.name} --engine kubernetes` or choose "
                "another name"
            )
        code_cm = next(
            (o for o in objects if o["metadata"]["name"] == code_configmap_name(job.name)), None
        )
        cm_path = f"/api/v1/namespaces/{self.namespace}/configmaps"
        if code_cm is not None:
            try:
                self._request("POST", cm_path, body=code_cm)
            except self.ApiException as exc:
                if exc.status != 409:
                    raise
                self._request("PUT", f"{cm_path}/{code_cm['metadata']['name']}", body=code_cm)
        body = _resource(job, self.namespace)
        try:
            created = self._request("POST", self._tfjobs(), body=body)
        except self.ApiException as exc:
            if code_cm is not None:  # not owned by anything yet: do not leave it behind
                with contextlib.suppress(self.ApiException):
                    self._request("DELETE", f"{cm_path}/{code_cm['metadata']['name']}")
            if exc.status == 409:
                raise JobExists(f"a job named {job.name!r} already exists") from None
            if exc.status == 422:
                raise SpecError(
                    [_api_field_error(exc)], f"job {job.name!r} (refused by the API server)"
                ) from None
            raise
        if code_cm is not None:
            owner = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "TFJob",
                "name": job.name,
                "uid": created["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
            self._request(
                "PATCH",
                f"{cm_path}/{code_cm['metadata']['name']}",
                body={"metadata": {"ownerReferences": [owner]}},
                content_type="application/merge-patch+json",
            )
        return job_view(created, [])

    def get(self, name: str) -> JobView:
        tfjob = self._read(name)
        return job_view(tfjob, self._pods(f"{LABEL_JOB}={name},{LABEL_ROLE}"))

    def list(self) -> builtins.list[JobView]:
        items = self._request("GET", self._tfjobs()).get("items") or []
        pods = self._pods(LABEL_ROLE)
        by_job: dict[str, builtins.list[dict[str, Any]]] = {}
        for pod in pods:
            owner = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_JOB)
            by_job.setdefault(str(owner), []).append(pod)
        return [job_view(t, by_job.get(t["metadata"]["name"], [])) for t in items]

    def logs(self, name: str, replica: str | None = None, follow: bool = False) -> Iterator[str]:
        view = self.get(name)
        keys = [r.key for r in view.replicas]
        if replica is not None and replica not in keys:
            raise ValueError(
                f"job {name!r} has no replica {replica!r}; its replicas are {', '.join(keys)}"
            )
        chosen = [replica] if replica else keys
        pods = self._pods(f"{LABEL_JOB}={name},{LABEL_ROLE}")
        newest: dict[str, dict[str, Any]] = {}
        for pod in sorted(pods, key=lambda p: str(p["metadata"].get("creationTimestamp"))):
            role = pod["metadata"]["labels"].get(LABEL_ROLE)
            newest[f"{role}-{_index(pod)}"] = pod
        for key in chosen:
            found = newest.get(key)
            if found is None:
                continue
            pod_name = found["metadata"]["name"]
            node = (found.get("spec") or {}).get("nodeName")
            if node and self._fake_node(node):
                raise LogsUnavailable(
                    f"cannot read the log of {key}: its pod {pod_name} runs on {node}, a KWOK "
                    "fake node, where no kubelet serves logs (nothing really runs there)"
                )
            query: dict[str, Any] = {"container": CONTAINER}
            if follow and replica is not None:
                query["follow"] = "true"
            try:
                data = self._request(
                    "GET",
                    f"/api/v1/namespaces/{self.namespace}/pods/{pod_name}/log",
                    query=query,
                    timeout=LOG_TIMEOUT_SECONDS if not follow else 3600.0,
                    raw=True,
                )
            except self.ApiException as exc:
                raise LogsUnavailable(
                    f"cannot read the log of {key} (pod {pod_name}): {_api_message(exc)}; "
                    "the node's kubelet serves pod logs, so a node without one (such as a "
                    "KWOK fake node) has none"
                ) from None
            except Exception as exc:  # urllib3 timeouts and connection errors
                raise LogsUnavailable(
                    f"cannot read the log of {key} (pod {pod_name}): {exc}"
                ) from None
            for line in data.decode("utf-8", errors="replace").splitlines():
                yield line if replica else f"[{key}] {line}"

    def _fake_node(self, node: str) -> bool:
        """A KWOK node has no kubelet: asking the API server for a log would make it dial
        (and resolve) a name nothing answers to. Unknown (e.g. not allowed to read nodes)
        counts as real."""
        try:
            data = self._request("GET", f"/api/v1/nodes/{node}")
        except self.ApiException:
            return False
        annotations = (data.get("metadata") or {}).get("annotations") or {}
        return annotations.get("kwok.x-k8s.io/node") == "fake"

    def delete(self, name: str) -> JobView:
        view = self.get(name)
        try:
            self._request("DELETE", self._tfjobs(name), body={"propagationPolicy": "Background"})
        except self.ApiException as exc:
            if exc.status == 404:
                raise JobNotFound(name) from None
            raise
        return view

    def stop(self, name: str) -> JobView:
        """Ask the operator to end the job (Failed, reason Stopped); it stays listed."""
        self._read(name)
        self._request(
            "PATCH",
            self._tfjobs(name),
            body={"metadata": {"annotations": {STOP_ANNOTATION: "true"}}},
            content_type="application/merge-patch+json",
        )
        return self.get(name)

    def wait(self, name: str, timeout: float | None = None) -> JobView:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            view = self.get(name)
            if view.done:
                return view
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {name!r} is still {view.phase.value}")
            time.sleep(0.5)


def _resource(job: TFJob, namespace: str) -> dict[str, Any]:
    import yaml

    data: dict[str, Any] = yaml.safe_load(dump_job(job))
    meta: dict[str, Any] = {"name": job.name, "namespace": namespace}
    if job.metadata.labels:
        meta["labels"] = dict(job.metadata.labels)
    data["metadata"] = meta
    return data


def _api_message(exc: Any) -> str:
    try:
        return str(json.loads(exc.body).get("message", exc.body))
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason or exc)


def _api_field_error(exc: Any) -> Any:
    from tfkube.api import FieldError

    return FieldError("(api server)", _api_message(exc))


def _context_namespace(kubeconfig: Path | None) -> str | None:
    """The namespace of the kubeconfig's current context, if it names one."""
    try:
        from kubernetes import config

        _, active = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig) if kubeconfig else None
        )
    except Exception:
        return None
    ns = (active or {}).get("context", {}).get("namespace")
    return str(ns) if ns else None
