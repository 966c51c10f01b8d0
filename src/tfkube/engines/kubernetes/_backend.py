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
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from tfkube.contract import KEPT_LOGS_SUBDIR
from tfkube.engines._artifact import prepare_artifact
from tfkube.engines._base import (
    DataFrom,
    JobEvent,
    JobExists,
    JobNotFound,
    JobView,
    ShipTo,
    SubmitDeferred,
    UsageUnavailable,
)
from tfkube.engines._data import Credentials
from tfkube.kube.errors import (
    AlreadyExists,
    ApiError,
    Forbidden,
    Invalid,
    NotFound,
    QuotaRefused,
    ServerError,
    TooManyRequests,
    Unreachable,
)
from tfkube.kube.names import (
    CODE_TOKEN_ANNOTATION,
    CODE_TOKEN_KEY,
    DATA_TOKEN_KEY,
    DATA_URL_ANNOTATION,
    INDEX_KEY,
    LABEL_CREDENTIAL,
    LABEL_JOB,
    REPLICA_CONTAINER,
    SCRATCH_VOLUME,
    SHIP_TOKEN_KEY,
    SHIP_URL_ANNOTATION,
    STOP_ANNOTATION,
    code_configmap_name,
    code_token_secret_name,
    owner_reference,
    replica_selector,
)
from tfkube.kube.observe import (
    GANG_SCHEDULERS,
    Prior,
    layout,
    observe,
    parse_time,
    pod_index,
    pod_role,
    tfjob_model,
)
from tfkube.kube.podmetrics import Sample, pods_path, replica_samples
from tfkube.kube.resources import CONFIG_MAP, EVENT, JOB, NODE, POD, SECRET, TFJOB, Resource
from tfkube.kube.rest import Kube, api_client_from, context_namespace
from tfkube.planner import Replica, cluster_scale_problems, scale_problems
from tfkube.render import DEFAULT_MAX_PODS_PER_JOB, RenderOptions, address_rule, render_job
from tfkube.spec import FieldError, SchedulingSpec, SpecError, TFJob
from tfkube.tfcluster import parse_replica_key, replica_key, rule_address

LOG_TIMEOUT_SECONDS = 15.0
USAGE_TIMEOUT_SECONDS = 10.0
"""A metrics API that hangs holds the server's sync loop no longer than this."""
SCALE_TIMEOUT_SECONDS = 30.0
"""How long `scale` waits for the operator to resize the worker Job (it looks at a live
job every few seconds, and at once on a change)."""


class LogsUnavailable(ValueError):
    """The cluster could not serve a pod's log (e.g. no kubelet behind a fake node)."""


def not_started(pod: Mapping[str, Any]) -> str | None:
    """Why a pod has no log yet (e.g. `ContainerCreating`, `Unschedulable`), or None once its
    container has started: a kubelet serves the log of a started container only."""
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "Pending"):
        return None
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if "running" in state or "terminated" in state:
            return None
        if "waiting" in state:
            return str((state["waiting"] or {}).get("reason") or "Waiting")
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return str(cond.get("reason") or "Unschedulable")
    return "Pending"


def job_view(
    tfjob: Mapping[str, Any],
    jobs: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    now: float,
    events: Iterable[Mapping[str, Any]] = (),
) -> JobView:
    """A TFJob resource, its role Jobs and its pods -> the engine-neutral view (pure).

    The replicas are read by `tfkube.kube.observe`, the operator's own interpreter, from
    the same objects and the TFJob's status, so `tfkube status` says what the operator
    sees. A TFJob whose spec does not validate (the operator failed it: InvalidSpec) has
    no replicas."""
    meta = tfjob.get("metadata") or {}
    status = tfjob.get("status") or {}
    name = str(meta.get("name"))
    prior = Prior.from_status(status)
    replicas: tuple[Replica, ...] = ()
    try:
        job = tfjob_model(tfjob)
    except SpecError:
        pass
    else:
        made = layout(status, DEFAULT_MAX_PODS_PER_JOB)
        options = RenderOptions(
            namespace=str(meta.get("namespace") or ""),
            max_pods_per_job=made.pods_per_job,
            one_service=made.one_service,
        )
        address = rule_address(address_rule(job, options))
        pods = list(pods)
        nodes = {
            (p.get("metadata") or {}).get("name"): (p.get("spec") or {}).get("nodeName")
            for p in pods
        }
        observation = observe(job, prior, jobs, pods, now, events)
        seen = observation.replicas
        replicas = tuple(
            Replica.of(
                r.status,
                address=address(r.status.role, r.status.index),
                node=nodes.get(r.pod) if r.pod else None,
                message=r.message,
                stalled=key in observation.stalled,
            )
            for key, r in seen.items()
        )
    return JobView(
        name=name,
        phase=prior.phase,
        restarts=int(status.get("restarts") or 0),
        preemptions=int(status.get("preemptions") or 0),
        disruptions=int(status.get("disruptions") or 0),
        created_at=parse_time(meta.get("creationTimestamp")) or now,
        started_at=prior.started_at,
        finished_at=prior.finished_at,
        reason=prior.reason,
        message=prior.message,
        replicas=replicas,
        extra={
            "namespace": str(meta.get("namespace") or ""),
            "engine": "kubernetes",
            # Where the replicas' logs are: `claim <name>`, or `emptyDir` (in their pods).
            **({"logs": prior.storage["logs"]} if "logs" in prior.storage else {}),
        },
    )


def _by_job(objects: Iterable[dict[str, Any]]) -> dict[str, builtins.list[dict[str, Any]]]:
    out: dict[str, builtins.list[dict[str, Any]]] = {}
    for obj in objects:
        out.setdefault(
            str(((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_JOB)), []
        ).append(obj)
    return out


def with_priority_class(job: TFJob, name: str | None) -> TFJob:
    """The job with its pods' PriorityClass `name` (a team's), unless it names one itself
    (only one a site admin allowed the team: `tfkube.engines.admission_refusals`) or there
    is none. Pure."""
    scheduling = job.spec.scheduling
    if name is None or (scheduling is not None and scheduling.priority_class_name):
        return job
    given = (scheduling or SchedulingSpec()).model_copy(update={"priority_class_name": name})
    return job.model_copy(update={"spec": job.spec.model_copy(update={"scheduling": given})})


def passing_refusal(exc: Exception) -> str | None:
    """Why a submit failed for a while only (the job waits and is tried again), or None
    when the failure is final. Pure: the quota admission's "exceeded quota" and "status
    unknown for quota" (a new or changed quota not computed yet), an API server that is
    busy or unreachable."""
    if isinstance(exc, QuotaRefused):
        return f"waiting for the team's quota in the cluster: {exc.message}"
    if isinstance(exc, (TooManyRequests, ServerError, Unreachable)):
        return f"waiting for the cluster: {exc.message}"
    if isinstance(exc, ApiError):
        return None
    if isinstance(exc, OSError) or type(exc).__module__.startswith("urllib3"):
        return f"waiting for the cluster: cannot reach it ({type(exc).__name__}: {exc})"
    return None


class KubernetesBackend:
    """Runs TFJobs through the TFJob resource; needs `tfkube operator` in the cluster."""

    def __init__(
        self,
        api_client: Any = None,
        namespace: str | None = None,
        kubeconfig: Path | None = None,
        priority_class: str | None = None,
    ) -> None:
        self.kube = Kube(api_client if api_client is not None else api_client_from(kubeconfig))
        self.namespace = namespace or context_namespace(kubeconfig) or "default"
        self.priority_class = priority_class
        """The team's PriorityClass (the server's engine sets it from the team's priority):
        given to the jobs that name none (`with_priority_class`)."""

    # -- reads ------------------------------------------------------------------------

    def _read(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] | None = self.kube.get(TFJOB, self.namespace, name)
        if result is None:
            raise JobNotFound(name)
        return result

    def _list(self, resource: Resource, selector: str) -> builtins.list[dict[str, Any]]:
        return self.kube.list(resource, self.namespace, selector)

    def _view(self, tfjob: dict[str, Any], jobs: Any, pods: Any, events: Any = ()) -> JobView:
        return job_view(tfjob, jobs, pods, time.time(), events)

    def _creation_failures(self) -> builtins.list[dict[str, Any]]:
        """The namespace's Events of Jobs that could not create a pod (quota, ...): the
        only trace of a replica whose pod was refused. Not allowed to read Events: none."""
        return self._events("involvedObject.kind=Job,reason=FailedCreate")

    def _gang_events(self, tfjob: Mapping[str, Any]) -> builtins.list[dict[str, Any]]:
        """For a gang's job, the namespace's `FailedScheduling` Events of pods: a gang
        scheduler's pods take turns at being the one that does not fit, and only the
        Events keep the verdict that names what is lacking (`observe.gang_message`)."""
        scheduling = (tfjob.get("spec") or {}).get("scheduling") or {}
        if scheduling.get("gang") not in GANG_SCHEDULERS:
            return []
        return self._events("involvedObject.kind=Pod,reason=FailedScheduling")

    def _events(self, field_selector: str) -> builtins.list[dict[str, Any]]:
        query = {"fieldSelector": field_selector}
        data = self.kube.request("GET", EVENT.url(self.namespace), query=query, allow=(Forbidden,))
        return list((data or {}).get("items") or [])

    # -- the Backend protocol ---------------------------------------------------------

    def submit(
        self,
        job: TFJob,
        base_dir: Path,
        *,
        code_token: str | None = None,
        data_credentials: Credentials | None = None,
        ship: ShipTo | None = None,
        data_from: DataFrom | None = None,
    ) -> JobView:
        """Raises SubmitDeferred when the cluster turned the job away for a while only.
        `data_credentials` go unused: the server stages a data source itself and the pods
        fetch it (`data_from`), so a store's credentials never reach the cluster."""
        try:
            return self._submit(job, base_dir, code_token, ship, data_from)
        except (SpecError, JobExists):
            raise
        except Exception as exc:  # the API server's refusals, urllib3's connection errors
            wait = passing_refusal(exc)
            if wait is None:
                raise
            raise SubmitDeferred(wait) from exc

    def _submit(
        self,
        job: TFJob,
        base_dir: Path,
        code_token: str | None,
        ship: ShipTo | None,
        data_from: DataFrom | None = None,
    ) -> JobView:
        job = with_priority_class(job, self.priority_class)
        code_archive = None
        if job.spec.code is not None and not job.spec.code.is_url:
            with tempfile.TemporaryDirectory(prefix="tfkube-submit-") as tmp:
                code_archive = prepare_artifact(job, base_dir, Path(tmp)).path.read_bytes()
        # The fetch and shipping tokens reach the pods from a Secret, never the pod spec.
        secret_name = code_token_secret_name(job.name)
        tokens = {CODE_TOKEN_KEY: code_token} if code_token else {}
        if ship is not None:
            tokens[SHIP_TOKEN_KEY] = ship.token
        if data_from is not None:
            tokens[DATA_TOKEN_KEY] = data_from.token
        # Render here too: a job the operator could not render fails now, not later.
        objects = render_job(
            job,
            RenderOptions(
                namespace=self.namespace,
                managed=True,
                code_archive=code_archive,
                code_token_secret=secret_name if code_token else None,
                ship_url=ship.url if ship else None,
                data_url=data_from.url if data_from else None,
            ),
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
        cm_name = code_configmap_name(job.name)
        code_cm = next((o for o in objects if o["metadata"]["name"] == cm_name), None)
        owned = []  # created before the TFJob, owned by it once it exists
        if tokens:
            secret = {
                "apiVersion": SECRET.api_version,
                "kind": SECRET.kind,
                "metadata": {
                    "name": secret_name,
                    "namespace": self.namespace,
                    "labels": {LABEL_JOB: job.name, LABEL_CREDENTIAL: "code-token"},
                },
                "type": "Opaque",
                "stringData": tokens,
            }
            self._create_or_replace(SECRET, secret_name, secret)
            owned.append(SECRET.url(self.namespace, secret_name))
        if code_cm is not None:
            self._create_or_replace(CONFIG_MAP, cm_name, code_cm)
            owned.append(CONFIG_MAP.url(self.namespace, cm_name))
        body = _resource(job, self.namespace)
        annotations = {}  # the operator renders the replicas' env from these
        if code_token:
            annotations[CODE_TOKEN_ANNOTATION] = secret_name
        if ship is not None:
            annotations[SHIP_URL_ANNOTATION] = ship.url
        if data_from is not None:
            annotations[DATA_URL_ANNOTATION] = data_from.url
        if annotations:
            body["metadata"]["annotations"] = annotations
        try:
            created = self.kube.request("POST", TFJOB.url(self.namespace), body=body)
        except ApiError as exc:
            for path in owned:  # not owned by anything yet: do not leave them behind
                with contextlib.suppress(ApiError):
                    self.kube.request("DELETE", path)
            if isinstance(exc, AlreadyExists):
                raise JobExists(f"a job named {job.name!r} already exists") from None
            if isinstance(exc, Invalid):
                raise SpecError(
                    [FieldError("(api server)", exc.message)],
                    f"job {job.name!r} (refused by the API server)",
                ) from None
            raise
        owner = owner_reference(job.name, created["metadata"]["uid"])
        for path in owned:
            self.kube.merge_patch(path, {"metadata": {"ownerReferences": [owner]}})
        return self._view(created, [], [])

    def _create_or_replace(self, resource: Resource, name: str, obj: dict[str, Any]) -> None:
        """Create the object; one left over from an earlier attempt is replaced."""
        if not self.kube.request(
            "POST", resource.url(self.namespace), body=obj, allow=(AlreadyExists,)
        ):
            self.kube.request("PUT", resource.url(self.namespace, name), body=obj)

    def get(self, name: str) -> JobView:
        tfjob = self._read(name)
        selector = replica_selector(name)
        jobs = self._list(JOB, selector)
        pods = self._pods(selector)
        events = self._creation_failures() + self._gang_events(tfjob)
        return self._view(tfjob, jobs, pods, events)

    def _pods(self, selector: str) -> builtins.list[dict[str, Any]]:
        return self._list(POD, selector)

    def list(self) -> builtins.list[JobView]:
        items = self.kube.list(TFJOB, self.namespace)
        jobs = _by_job(self._list(JOB, replica_selector()))
        pods = _by_job(self._pods(replica_selector()))
        failures = self._creation_failures() if items else []
        return [
            self._view(
                t,
                jobs.get(t["metadata"]["name"], []),
                pods.get(t["metadata"]["name"], []),
                failures,
            )
            for t in items
        ]

    def logs(self, name: str, replica: str | None = None, follow: bool = False) -> Iterator[str]:
        if replica is not None:
            # One replica's log (what a job page asks for, every few seconds while it
            # waits for one): only its own pods are read, not the whole job twice (on a
            # 1,000-replica job that was two listings of 1,000 pods per request).
            found = self._replica_pod(name, replica)
            if found is not None:
                yield from self._pod_log(replica, found, replica, follow)
                return
        view = self.get(name)
        keys = [r.key for r in view.replicas]
        if replica is not None and replica not in keys:
            raise ValueError(
                f"job {name!r} has no replica {replica!r}; its replicas are {', '.join(keys)}"
            )
        chosen = [replica] if replica else keys
        pods = self._pods(replica_selector(name))
        newest: dict[str, dict[str, Any]] = {}
        for pod in sorted(pods, key=lambda p: str(p["metadata"].get("creationTimestamp"))):
            role, index = pod_role(pod), pod_index(pod)
            if role is not None and index is not None:
                newest[replica_key(role, index)] = pod
        for key in chosen:
            found = newest.get(key)
            if found is None:
                gone = (
                    (
                        f"{key} has no pod now (a job's PS and still-running workers are "
                        "removed when it ends); "
                        + (
                            "its log went with it: the job had no logs claim, so each "
                            "replica's log was its pod's own"
                            if view.extra.get("logs") == SCRATCH_VOLUME
                            else "the launcher keeps every start's log on the job's logs "
                            f"volume under {'/'.join(KEPT_LOGS_SUBDIR)}/{key}/, which a tfkube "
                            "server serves"
                        )
                    )
                    if view.phase.terminal
                    else f"{key} has no pod yet"
                )
                if replica is not None:
                    raise LogsUnavailable(gone)
                yield f"[{key}] ({gone})"
                continue
            yield from self._pod_log(key, found, replica, follow)

    def usage(self, name: str) -> dict[str, Sample]:
        """Replica -> its newest (time, cpu cores, memory bytes) from the kubelet's resource
        metrics (`pods.metrics.k8s.io`, metrics-server: a sample per pod every scrape,
        10-60 s). UsageUnavailable when the cluster has no metrics API or may not be read."""
        try:
            data = self.kube.request(
                "GET",
                pods_path(self.namespace),
                query={"labelSelector": replica_selector(name)},
                timeout=USAGE_TIMEOUT_SECONDS,
            )
        except NotFound as exc:
            raise UsageUnavailable(
                "the cluster has no metrics API (metrics.k8s.io): CPU and memory per "
                "replica come from the kubelet's resource metrics through metrics-server; "
                f"a cluster administrator installs it ({exc})"
            ) from None
        except ServerError as exc:  # 503: the APIService is there, its server is not
            raise UsageUnavailable(
                "the cluster's metrics API (metrics.k8s.io) does not answer: is "
                f"metrics-server running? ({exc})"
            ) from None
        except Forbidden as exc:
            raise UsageUnavailable(
                "the server may not read the metrics API (metrics.k8s.io pods get/list): "
                f"install tfkube's RBAC again (`tfkube install --server`) ({exc})"
            ) from None
        except Unreachable as exc:
            raise UsageUnavailable(f"the API server did not answer ({exc})") from None
        return replica_samples((data or {}).get("items") or [])

    def _replica_pod(self, name: str, replica: str) -> dict[str, Any] | None:
        """The newest pod of one replica, selected by its labels (role and completion
        index); None when it has none, or when the cluster labels no pod with its index
        (older than Kubernetes 1.28: the index is an annotation there), so the caller
        reads the whole job instead. Raises JobNotFound."""
        self._read(name)
        try:
            role, index = parse_replica_key(replica)
        except ValueError:
            return None
        pods = [
            p
            for p in self._pods(f"{replica_selector(name, role)},{INDEX_KEY}={index}")
            if pod_role(p) == role and pod_index(p) == index
        ]
        pods.sort(key=lambda p: str(p["metadata"].get("creationTimestamp")))
        return pods[-1] if pods else None

    def _pod_log(
        self, key: str, found: dict[str, Any], replica: str | None, follow: bool
    ) -> Iterator[str]:
        """The log of replica `key`'s pod `found`: its lines (prefixed with the key when
        `replica` is None: the whole job's log)."""
        pod_name = found["metadata"]["name"]
        waiting = not_started(found)
        if waiting is not None:  # not an error while the job starts: say so, go on
            if replica is not None:
                raise LogsUnavailable(f"{key} has not started yet ({waiting}); no log yet")
            yield f"[{key}] (no log yet: {waiting})"
            return
        node = (found.get("spec") or {}).get("nodeName")
        if node and self._fake_node(node):
            raise LogsUnavailable(
                f"cannot read the log of {key}: its pod {pod_name} runs on {node}, a KWOK "
                "fake node, where no kubelet serves logs (nothing really runs there)"
            )
        query: dict[str, Any] = {"container": REPLICA_CONTAINER}
        if follow and replica is not None:
            query["follow"] = "true"
        try:
            data = self.kube.request(
                "GET",
                POD.url(self.namespace, pod_name, "log"),
                query=query,
                timeout=LOG_TIMEOUT_SECONDS if not follow else 3600.0,
                raw=True,
            )
        except ApiError as exc:
            raise LogsUnavailable(
                f"cannot read the log of {key} (pod {pod_name}): {exc.message}; "
                "the node's kubelet serves pod logs, so a node without one (such as a "
                "KWOK fake node) has none"
            ) from None
        except Exception as exc:  # urllib3 timeouts and connection errors
            raise LogsUnavailable(f"cannot read the log of {key} (pod {pod_name}): {exc}") from None
        for line in data.decode("utf-8", errors="replace").splitlines():
            yield line if replica else f"[{key}] {line}"

    def events(self, name: str) -> builtins.list[JobEvent]:
        """The Kubernetes Events of the TFJob (the operator posts them), oldest first."""
        self._read(name)
        about = f"involvedObject.kind={TFJOB.kind},involvedObject.name={name}"
        out = []
        for e in self.kube.list(EVENT, self.namespace, fields=about):
            when = (
                parse_time(e.get("lastTimestamp"))
                or parse_time(e.get("eventTime"))
                or parse_time((e.get("metadata") or {}).get("creationTimestamp"))
                or 0.0
            )
            reason, message = e.get("reason") or "", e.get("message") or ""
            out.append(JobEvent(time=when, message=f"{reason}: {message}" if reason else message))
        return sorted(out, key=lambda ev: ev.time)

    def _fake_node(self, node: str) -> bool:
        """A KWOK node has no kubelet: asking the API server for a log would make it dial
        (and resolve) a name nothing answers to. Unknown (e.g. not allowed to read nodes)
        counts as real."""
        try:
            data = self.kube.get(NODE, None, node)
        except ApiError:
            return False
        if data is None:
            return False
        annotations = (data.get("metadata") or {}).get("annotations") or {}
        return annotations.get("kwok.x-k8s.io/node") == "fake"

    def delete(self, name: str) -> JobView:
        view = self.get(name)
        gone = self.kube.request(
            "DELETE",
            TFJOB.url(self.namespace, name),
            body={"propagationPolicy": "Background"},
            allow=(NotFound,),
        )
        if gone is None:
            raise JobNotFound(name)
        return view

    def stop(self, name: str) -> JobView:
        """Ask the operator to end the job (Failed, reason Stopped); it stays listed."""
        self._read(name)
        patch = {"metadata": {"annotations": {STOP_ANNOTATION: "true"}}}
        self.kube.merge_patch(TFJOB.url(self.namespace, name), patch)
        return self.get(name)

    def scale(self, name: str, workers: int) -> JobView:
        """Run the job with `workers` workers from now on: the TFJob's
        spec.replicas.worker.replicas changes, and the operator resizes the worker Indexed
        Job (`tfkube.operator` `resize`); this waits until the TFJob's status says it did
        (`status.workers`). Raises `SpecError` naming the field when the job cannot
        (`tfkube.planner.scale_problems`, `cluster_scale_problems`); TimeoutError when no
        operator answers."""
        tfjob = self._read(name)
        where = f"scaling job {name!r}"
        job = tfjob_model(tfjob)
        phase = Prior.from_status(tfjob.get("status")).phase
        problems = scale_problems(job, phase, workers) + cluster_scale_problems(job)
        if problems:
            raise SpecError(problems, where)
        patch = {"spec": {"replicas": {"worker": {"replicas": workers}}}}
        patched = self.kube.merge_patch(TFJOB.url(self.namespace, name), patch)
        generation = int((patched.get("metadata") or {}).get("generation") or 0)
        deadline = time.monotonic() + SCALE_TIMEOUT_SECONDS
        while True:
            status = self._read(name).get("status") or {}
            if int(status.get("observedGeneration") or 0) >= generation:
                if status.get("workers") == workers:
                    return self.get(name)
                if status.get("refusedWorkers") == workers:
                    why = "the operator refused it (see `tfkube events`)"
                    raise SpecError([FieldError("workers", why)], where)
                ended = Prior.from_status(status).phase
                if ended.terminal:
                    why = f"the job ended ({ended.value}) before it was resized"
                    raise SpecError([FieldError("workers", why)], where)
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"job {name!r}: the operator did not resize it within "
                    f"{SCALE_TIMEOUT_SECONDS:.0f}s (spec.replicas.worker.replicas is "
                    f"{workers} now); is `tfkube operator` running for namespace "
                    f"{self.namespace!r}?"
                )
            time.sleep(0.2)

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
    """The TFJob object to create: the job as it runs (`dump_job`'s fields, defaults
    filled in), in the namespace."""
    data: dict[str, Any] = job.model_dump(mode="json", by_alias=True, exclude_none=True)
    meta: dict[str, Any] = {"name": job.name, "namespace": namespace}
    if job.metadata.labels:
        meta["labels"] = dict(job.metadata.labels)
    data["metadata"] = meta
    return data
