"""`tfkube operator`: kopf watches TFJobs and their Jobs, an informer of ours the replica
pods, a per-TFJob work queue, and one reconcile function.

    kopf watch events: TFJob / its Jobs ----------poke(ns, name)--> WorkQueue
    PodInformer (_pods.py): LIST then WATCH of every replica pod, decoded with orjson,
                    slimmed into PodIndex by (namespace, TFJob) --poke when a TFJob's
                    pods changed--> WorkQueue: no reconcile ever lists pods
    WorkQueue: one reconcile at a time per TFJob, in a thread; pokes that arrive during
                    one are coalesced into one more, after a pause that grows with the
                    reconcile's own cost (a burst of 11,000 pod events is a few passes),
                    and a longer one when its pods only came up (a big job's start)
    reconcile_once: GET TFJob, LIST its Jobs, its pods from the index, render
                    -> _reconcile.reconcile (pure) -> _apply (ops, then the status);
                    returns when to look again

kopf is used for what it is good at: watching a few kinds of few objects with reconnects
and per-object batching, logging in (kubeconfig or service account), signal handling.
The pods, the one kind with thousands of objects and events, are followed by
`tfkube.operator._pods.PodInformer` instead: kopf's decoding and per-event machinery was
half the operator's CPU at 1,100 replicas (docs/benchmarks.md, "A lean pod watch"). kopf's
change-detecting handlers (on.create/on.update, which keep a diff base and progress in
annotations) are not used: the reconcile is level-triggered from the objects themselves,
so only `on.event` handlers are registered and kopf writes nothing to our objects (no
finalizers: deletion is the garbage collector's business through owner references).

Everything runs in one event loop (`serve`): the informer, kopf, the work queue; only
reconciles run in threads, each given its TFJob's pods as a copied list. The informer's
first LIST fills the pod index before kopf starts, so no reconcile ever sees a partial
index; a restarted operator lists every TFJob and pod and carries on. The work queue and
the pod index are the only in-memory state, and the index is a cache of what the API says.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, cast

from tfkube.kube.errors import ApiError, Forbidden, NotFound
from tfkube.kube.names import (
    CODE_TOKEN_ANNOTATION,
    DATA_URL_ANNOTATION,
    LABEL_JOB,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    SHIP_URL_ANNOTATION,
    code_configmap_name,
)
from tfkube.kube.observe import PREEMPTED_EVENT, ObserveMemo, layout, tfjob_model
from tfkube.kube.resources import CONFIG_MAP, EVENT, JOB, SECRET, TFJOB
from tfkube.kube.rest import Endpoint, Kube, api_client_from
from tfkube.operator._apply import apply, write_status
from tfkube.operator._ops import DeleteTFJob
from tfkube.operator._pods import JobPods, PodIndex, PodInformer
from tfkube.operator._reconcile import invalid_spec_plan, reconcile
from tfkube.operator._settings import OperatorSettings
from tfkube.planner import JobPhase
from tfkube.render import RenderOptions, StorageDefaults, render_job
from tfkube.spec import SpecError, TFJob

log = logging.getLogger("tfkube.operator")
Key = tuple[str, str]
PodsOf = Callable[[Key], JobPods]
PREEMPTED_EVENTS_SECONDS = 60.0
"""How long after it last found a pod of its TFJob gone a reconcile still reads the
namespace's Preempted Events (`JobMemory.read_events`): the scheduler records its Event
apart from deleting the pod, and may record it late."""


@dataclass
class JobMemory:
    """What the operator remembers of a TFJob between its reconciles (one at a time: the
    WorkQueue's rule). Only to spare work; a new operator starts without it and does the
    same."""

    observed: ObserveMemo = field(default_factory=ObserveMemo)
    gone: int | None = None
    """`JobPods.gone` at the last reconcile (None: no reconcile yet)."""
    events_until: float = 0.0

    def read_events(self, gone: int, now: float) -> bool:
        """Whether this reconcile reads the namespace's `Preempted` Events: the first one
        (once: what went before the operator started), one that finds a pod of the job
        gone since the last (`gone` moved on), and every one for PREEMPTED_EVENTS_SECONDS
        after. A preempted pod says so itself while it exists (its DisruptionTarget
        condition, `kube.observe.preemptions`); its Event matters only once it is gone.
        Listing them at every reconcile read all of the namespace's Events from etcd
        (Events have no watch cache), each scheduled and each created pod's among them: 70
        ms of API server CPU per LIST at 5,000 pods, 76 times during one 5,000-replica
        start (docs/benchmarks.md, runs Q8)."""
        first = self.gone is None
        if not first and gone != self.gone:
            self.events_until = now + PREEMPTED_EVENTS_SECONDS
        self.gone = gone
        return first or now < self.events_until


ERROR_REQUEUE_SECONDS = 5.0
CODE_FILE = "code.tar.gz"


class Reconciler:
    """Everything one reconcile needs; `reconcile_once` runs in a worker thread."""

    def __init__(
        self, kube: Kube, settings: OperatorSettings, clock: Callable[[], float] = time.time
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.clock = clock
        self.memory: dict[Key, JobMemory] = {}
        """(namespace, name) -> what the operator remembers of that TFJob."""

    def _registry_secret(self) -> dict[str, Any] | None:
        """The platform's image-pull Secret, if there is one (and the operator may read it)."""
        if self.settings.registry_secret is None:
            return None
        path = SECRET.url(self.settings.operator_namespace, self.settings.registry_secret)
        secret: dict[str, Any] | None = self.kube.request("GET", path, allow=(NotFound, Forbidden))
        return secret

    def _code_archive(self, job: TFJob, namespace: str) -> bytes | None:
        if job.spec.code is None or job.spec.code.is_url:
            return None
        cm = self.kube.get(CONFIG_MAP, namespace, code_configmap_name(job.name))
        data = ((cm or {}).get("binaryData") or {}).get(CODE_FILE)
        return base64.b64decode(data) if data else None

    def _preempted_events(self, namespace: str, tfjob: Mapping[str, Any]) -> list[Any]:
        """The namespace's `Preempted` Events of pods, for a job that has not ended: the
        scheduler's record of a preempted pod, which is gone moments after (an operator
        installed before it could read Events: none, and only the pods say it)."""
        if JobPhase((tfjob.get("status") or {}).get("phase") or "Pending").terminal:
            return []
        query = {"fieldSelector": f"involvedObject.kind=Pod,reason={PREEMPTED_EVENT}"}
        data = self.kube.request("GET", EVENT.url(namespace), query=query, allow=(Forbidden,))
        return list((data or {}).get("items") or [])

    def reconcile_once(self, namespace: str, name: str, seen: JobPods) -> float | None:
        """One reconcile of one TFJob; `seen`: its replica pods as the watch last saw
        them (slimmed), and how many went."""
        tfjob = self.kube.get(TFJOB, namespace, name)
        if tfjob is None or tfjob["metadata"].get("deletionTimestamp"):
            self.memory.pop((namespace, name), None)
            return None
        now = self.clock()
        annotations = tfjob["metadata"].get("annotations") or {}
        made = layout(tfjob.get("status"), self.settings.max_pods_per_job)
        try:
            job = tfjob_model(tfjob)
            rendered = render_job(
                job,
                RenderOptions(
                    namespace=namespace,
                    managed=True,
                    registry_secret=self._registry_secret(),
                    code_archive=self._code_archive(job, namespace),
                    code_token_secret=annotations.get(CODE_TOKEN_ANNOTATION) or None,
                    ship_url=annotations.get(SHIP_URL_ANNOTATION) or None,
                    data_url=annotations.get(DATA_URL_ANNOTATION) or None,
                    data_cache=self.settings.data_cache,
                    storage=self.settings.storage,
                    max_pods_per_job=made.pods_per_job,
                    one_service=made.one_service,
                ),
            )
        except SpecError as exc:
            plan = invalid_spec_plan(tfjob, str(exc), now)
        else:
            jobs = self.kube.list(JOB, namespace, f"{LABEL_JOB}={name}")
            memory = self.memory.setdefault((namespace, name), JobMemory())
            events = []
            if memory.read_events(seen.gone, now):
                events = self._preempted_events(namespace, tfjob)
            plan = reconcile(tfjob, job, jobs, seen.pods, rendered, now, events, memory.observed)
            plan = replace(plan, status={**plan.status, **made.status()})
        for op in plan.ops:
            log.info("%s/%s: %s", namespace, name, _describe(op))
            apply(self.kube, op, tfjob)
        if any(isinstance(op, DeleteTFJob) for op in plan.ops):
            return None  # gone: no status to write
        write_status(self.kube, tfjob, plan.status)
        return plan.requeue_after


def storage_note(defaults: StorageDefaults) -> str:
    """What the operator gives a job whose spec names no logs storage, in words."""
    if defaults.logs_claim:
        return f"a folder of the claim {defaults.logs_claim} in the job's namespace"
    if defaults.logs_storage_class:
        return f"a new claim of the StorageClass {defaults.logs_storage_class}"
    return "an emptyDir in each pod (no claim)"


def _describe(op: object) -> str:
    text = repr(op)
    return text if len(text) < 200 else text[:200] + "..."


COALESCE_MIN_SECONDS = 0.05
COALESCE_MAX_SECONDS = 1.0


def coalesce_pause(last_reconcile_seconds: float) -> float:
    """How long pokes that came during a reconcile wait before the next one: twice what
    the reconcile cost, so a busy job's reconciles take at most a third of a core, within
    [0.05 s, 1 s] (a finished job's PS are still ended within a second or so of the
    last worker's success)."""
    return min(max(2 * last_reconcile_seconds, COALESCE_MIN_SECONDS), COALESCE_MAX_SECONDS)


PROGRESS_FACTOR = 8
PROGRESS_MAX_SECONDS = 5.0


def progress_pause(last_reconcile_seconds: float) -> float:
    """How long a TFJob whose pods only came up during a reconcile (`_pods.progress_only`)
    waits before the next one: eight times the reconcile's cost, within [0.05 s, 5 s]. A
    small job hardly notices (a 10 ms reconcile: 80 ms); an 11,000-replica start, whose
    reconciles cost ~0.3 s each on a busy machine, is reconciled every ~3 s instead of
    every ~1.3 s, leaving the control plane the CPU (docs/benchmarks.md, runs Q11); only
    the counts in its status lag. A poke (anything else) cuts the wait to `coalesce_pause`."""
    return min(
        max(PROGRESS_FACTOR * last_reconcile_seconds, COALESCE_MIN_SECONDS), PROGRESS_MAX_SECONDS
    )


class WorkQueue:
    """Coalesces pokes: at most one reconcile per TFJob runs; pokes during it make it run
    once more afterwards (after `coalesce_pause`), and so do `progress` calls (pods only
    coming up), but after the longer `progress_pause`, which a poke cuts short; a reconcile
    asks to be run again after some seconds. Each reconcile gets the TFJob's pods as the
    index holds them then, and how many went (`JobPods`: read in the event loop, which the
    index is updated in, and copied)."""

    def __init__(
        self,
        work: Callable[[str, str, JobPods], float | None],
        pods_of: PodsOf,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.work = work
        self.pods_of = pods_of
        self.clock = clock
        self.running: dict[Key, asyncio.Task[None]] = {}
        self.dirty: set[Key] = set()
        self.progressed: set[Key] = set()
        self.woken: dict[Key, asyncio.Event] = {}
        """Set by a poke while its TFJob waits out a `progress_pause`."""
        self.timers: dict[Key, asyncio.TimerHandle] = {}

    def poke(self, key: Key) -> None:
        if key in self.running:
            self.dirty.add(key)
            woken = self.woken.get(key)
            if woken is not None:
                woken.set()
            return
        timer = self.timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self.running[key] = asyncio.get_running_loop().create_task(self._run(key))

    def progress(self, key: Key) -> None:
        """A poke that may wait: the TFJob's pods only came up (`_pods.progress_only`)."""
        if key in self.running:
            self.progressed.add(key)
            return
        self.poke(key)

    async def _run(self, key: Key) -> None:
        requeue: float | None = None
        try:
            while True:
                self.dirty.discard(key)
                self.progressed.discard(key)
                started = self.clock()
                try:
                    requeue = await asyncio.to_thread(self.work, *key, self.pods_of(key))
                except ApiError as exc:
                    # The API refused or failed (an apiserver just restarted answers 403
                    # until its RBAC cache is filled, then 5xx...): a state, not a bug in
                    # tfkube, so one line and a retry, no traceback.
                    log.warning("reconciling %s/%s: %s; retrying", *key, exc)
                    requeue = ERROR_REQUEUE_SECONDS
                except Exception:
                    log.exception("reconciling %s/%s failed; retrying", *key)
                    requeue = ERROR_REQUEUE_SECONDS
                cost = self.clock() - started
                if key in self.dirty:
                    await asyncio.sleep(coalesce_pause(cost))
                elif key in self.progressed:
                    await self._progress_pause(key, cost)
                else:
                    break
        finally:
            del self.running[key]
            self.woken.pop(key, None)
        if requeue is not None:
            loop = asyncio.get_running_loop()
            self.timers[key] = loop.call_later(max(requeue, 0.0), self.poke, key)

    async def _progress_pause(self, key: Key, cost: float) -> None:
        """Wait out `progress_pause`, or only `coalesce_pause` once a poke comes."""
        short, long = coalesce_pause(cost), progress_pause(cost)
        await asyncio.sleep(short)
        if key in self.dirty or long <= short:
            return
        woken = self.woken[key] = asyncio.Event()
        try:
            await asyncio.wait_for(woken.wait(), long - short)
        except TimeoutError:
            pass
        finally:
            self.woken.pop(key, None)


def no_diff_base() -> Any:
    """A kopf diff-base storage that keeps nothing. kopf deep-copies every object it sees
    to compare it with the last handled state: a fifth of the operator's CPU at 1,100 pods
    (profiled), for change handlers the operator does not have (only `on.event`)."""
    import kopf

    class NoDiffBase(kopf.DiffBaseStorage):
        def build(self, *, body: Any, extra_fields: Any = None) -> Any:
            return {}

        def fetch(self, *, body: Any) -> Any:
            return None

        def store(self, *, body: Any, patch: Any, essence: Any) -> None:
            return None

    return NoDiffBase()


def same_marks(before: tuple[Any, ...] | None, after: tuple[Any, ...]) -> bool:
    """Whether an event of a TFJob or a role Job changed nothing a reconcile acts on at
    once (`tfjob_marks`, `job_marks`): the operator's own status write, a Job counting
    its pods as they come up."""
    return before is not None and before == after


def tfjob_marks(body: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of a TFJob a reconcile acts on, apart from its status: its spec (through the
    generation), labels, annotations, deletion."""
    meta = body.get("metadata") or {}
    return (
        meta.get("generation"),
        dict(meta.get("labels") or {}),
        dict(meta.get("annotations") or {}),
        meta.get("deletionTimestamp"),
    )


JOB_COUNTERS = ("active", "ready", "terminating")
"""A Job's status fields that only count pods coming and going: the rest (conditions,
succeeded and failed counts and indexes) is what a reconcile acts on."""


def job_marks(body: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of a role Job a reconcile acts on: all but its counters of live pods."""
    meta = body.get("metadata") or {}
    status = {k: v for k, v in (body.get("status") or {}).items() if k not in JOB_COUNTERS}
    return (
        meta.get("generation"),
        dict(meta.get("labels") or {}),
        meta.get("deletionTimestamp"),
        status,
    )


def build_registry(
    poke: Callable[[Key], None], progress: Callable[[Key], None] | None = None
) -> Any:
    """kopf's handlers: a TFJob's events and its Jobs' poke the work queue (the pods are
    `PodInformer`'s). With `progress`, an event that changed only a TFJob's status or a
    Job's counters of live pods (`tfjob_marks`, `job_marks`: the operator's own status
    write, pods coming up during a start) calls it instead: the reconcile may wait."""
    import kopf

    seen: dict[tuple[str, str, str], tuple[Any, ...]] = {}
    """(kind, namespace, name) -> its marks at its last event (ADDED and MODIFIED only)."""

    def notify(kind: str, event_type: str | None, body: Any, key: Key) -> None:
        meta = body.get("metadata") or {}
        where = (kind, meta.get("namespace") or "", meta.get("name") or "")
        if event_type == "DELETED" or progress is None:
            seen.pop(where, None)
            poke(key)
            return
        marks = tfjob_marks(body) if kind == "tfjob" else job_marks(body)
        before, seen[where] = seen.get(where), marks
        (progress if same_marks(before, marks) else poke)(key)

    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    def configure(settings: Any, **_: Any) -> None:
        settings.peering.standalone = True  # one operator per cluster: no peering objects
        settings.posting.level = logging.WARNING  # only kopf's own problems become Events
        settings.posting.reporting_component = "tfkube-operator"
        settings.batching.batch_window = 0.05
        settings.watching.server_timeout = 300
        settings.networking.request_timeout = 120
        settings.persistence.diffbase_storage = no_diff_base()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> Any:
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.event(TFJOB.group, TFJOB.version, TFJOB.plural, registry=registry)  # type: ignore[arg-type]
    async def on_tfjob(name: str, namespace: str, body: Any, type: str | None, **_: Any) -> None:
        notify("tfjob", type, body, (namespace, name))

    managed: dict[str, Any] = {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_JOB: kopf.PRESENT,
    }

    @kopf.on.event(JOB.group, JOB.version, JOB.plural, labels=managed, registry=registry)  # type: ignore[arg-type]
    async def on_job(
        labels: dict[str, str], namespace: str, body: Any, type: str | None, **_: Any
    ) -> None:
        notify("job", type, body, (namespace, labels[LABEL_JOB]))

    return registry


def operator_identity(host: str | None = None, pid: int | None = None) -> str:
    """This operator's name among kopf's peers, e.g. `tfkube-operator@<pod>/<pid>`; never
    from the password database (the image's uid has no entry there)."""
    return f"tfkube-operator@{host or socket.gethostname()}/{pid or os.getpid()}"


GC_YOUNG_OBJECTS = 50_000
"""Python's cyclic garbage collector looks at the youngest objects once this many more were
made than freed (CPython's default: 700). A reconcile of a big TFJob makes some 100,000
objects that live until it ends (its observation of every replica, the plan, the status),
so with the default it ran a young collection every 700 of them, carried the survivors
into the older generations and so brought on full collections over the operator's whole
heap (its pod index, kopf, the memo) every few reconciles: about a third of a
reconcile's CPU at 11,000 replicas (`benchmarks/vs_kubeflow/reconcile_cost.py --gc`,
docs/benchmarks.md). The operator makes few reference cycles (refcounting frees almost
all its garbage at once), so collecting less often costs little memory."""


def tune_gc() -> None:
    """The operator's garbage-collector threshold (GC_YOUNG_OBJECTS); the older
    generations' thresholds stay CPython's."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_OBJECTS, older, oldest)


def run_operator(settings: OperatorSettings) -> None:
    """Run until SIGTERM/SIGINT."""
    tune_gc()
    logging.basicConfig(
        level=logging.DEBUG if settings.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("kopf", "aiohttp", "urllib3", "kubernetes"):
        logging.getLogger(noisy).setLevel(logging.INFO if settings.verbose else logging.WARNING)
    if settings.kubeconfig is not None:
        os.environ["KUBECONFIG"] = str(settings.kubeconfig)  # what kopf's login reads
    api_client = api_client_from(settings.kubeconfig)
    reconciler = Reconciler(Kube(api_client), settings)
    index = PodIndex()
    queue = WorkQueue(reconciler.reconcile_once, index.snapshot)
    informer = PodInformer(
        Endpoint.of(api_client), settings.namespaces, index, queue.poke, progress=queue.progress
    )
    registry = build_registry(queue.poke, queue.progress)
    with contextlib.suppress(asyncio.CancelledError):  # as kopf.run: cancelled, stopped
        asyncio.run(serve(settings, informer, registry))


async def serve(settings: OperatorSettings, informer: PodInformer, registry: Any) -> None:
    """The informer's first LIST, then kopf (whose TFJob events start the reconciles),
    in this one event loop; the informer is stopped when kopf stops."""
    import kopf

    informer.start()
    try:
        await informer.wait_synced()
        log.info(
            "tfkube operator watching %s (%d replica pods)",
            ", ".join(settings.namespaces) if settings.namespaces else "all namespaces",
            len(informer.index),
        )
        if settings.registry_secret is not None:
            log.info(
                "jobs get a copy of the image-pull Secret %s/%s when it exists",
                settings.operator_namespace,
                settings.registry_secret,
            )
        log.info("jobs that name no logs storage: %s", storage_note(settings.storage))
        await kopf.operator(
            registry=registry,
            standalone=True,
            clusterwide=not settings.namespaces,
            namespaces=list(settings.namespaces),
            # Named here: kopf's default asks the password database for the user's name, and
            # tfkube's image runs as a uid that has no entry there (65532): KeyError at start.
            identity=cast(Any, operator_identity()),  # kopf's NewType, not exported
        )
    finally:
        await informer.stop()
