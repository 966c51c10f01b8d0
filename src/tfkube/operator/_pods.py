"""The replica pods, followed by a lean informer of the operator's own: LIST, then WATCH.

    PodInformer (one stream per watched namespace, or one for the cluster)
      LIST  pods?labelSelector=<replica pods>&limit=500      paged, one snapshot
            -> PodIndex.replace(namespace, ...)   poke every TFJob whose pods changed
      WATCH pods?...&resourceVersion=<last>&allowWatchBookmarks=true
            each line: orjson -> slim_pod -> PodIndex.apply -> poke the TFJob if its
            pods changed; BOOKMARKs only move the resourceVersion on
            (`progress` instead of `poke` when the change only says a replica is
            coming up: `progress_only`)
    PodIndex: (namespace, TFJob) -> {pod name: slimmed pod}, and how many of its pods went;
              read by the WorkQueue

Why not kopf's index and event handler (what the operator used before): at 1,100 replicas
kopf's JSON decoding of the pod stream was a quarter of the operator's CPU and its
per-event machinery (a worker per object, the handler's keyword arguments, the index
store) another quarter (py-spy, docs/benchmarks.md). Here a pod event is one `orjson`
decode, one `slim_pod`, a dict comparison and at most one poke. kopf still follows the
TFJobs and their Jobs (few events).

What it keeps of kopf's guarantees:

- **No reconcile before the index is filled**: `wait_synced` returns once every stream's
  first LIST is in the index; the operator starts kopf (whose TFJob events start
  reconciles) only then.
- **Reconnects** from the last resourceVersion seen (BOOKMARKs keep it fresh while no pod
  changes), so nothing is missed or replayed twice; a watch the server ends (its
  `timeoutSeconds`) is opened again.
- **Expiry** (`410 Gone`, as the answer or as an ERROR event: "too old resource
  version") lists again and replaces that stream's part of the index, poking every TFJob
  whose pods changed or vanished meanwhile.
- **DELETED** events drop the pod; a pod whose labels move it to another TFJob moves.
- **Errors** (refusals, a dropped connection, an unreadable line, an API server that is
  down) are retried with a backoff (0.5 s doubling to 30 s), never ending the informer;
  an unexpected exception is logged with its traceback and retried the same way.
- **Stop**: `stop()` (or cancelling `run()`) ends the streams and closes the connections.

**Threads.** The informer runs in kopf's event loop, as a task, with aiohttp (which kopf
already uses) rather than in a thread with the official client: the index is then only
ever touched in the loop — written by the informer, read by the WorkQueue when it hands a
reconcile its pods (a copied list, in the loop, before the reconcile's thread starts) —
so it needs no lock and a poke is a plain call. A thread would buy nothing (orjson and
`slim_pod` hold the GIL) and would need every update handed over with
`loop.call_soon_threadsafe` and a socket timeout to be stoppable. A slimmed pod is never
changed in place (an update replaces it), so a reconcile's thread may keep reading the
pods it was given while the index moves on.

**Credentials** are the official client's, as everywhere in the operator
(`tfkube.kube.rest.Endpoint`): the same URL, CA (TLS verified unless the kubeconfig
says not to), client certificate and bearer token, read again for every request (a
rotated service-account token is picked up), and its proxy (a kubeconfig's `proxy-url`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from tfkube.kube.errors import ApiError, error_from
from tfkube.kube.names import LABEL_JOB, LABEL_ROLE
from tfkube.kube.observe import slim_pod
from tfkube.kube.resources import POD
from tfkube.kube.rest import LIST_RESTARTS, Endpoint

log = logging.getLogger("tfkube.operator.pods")

Key = tuple[str, str]
"""(namespace, TFJob name)."""
PodName = tuple[str, str]
"""(namespace, pod name)."""
Entry = tuple[PodName, Key, dict[str, Any]]
"""A pod as the index keeps it: its name, its TFJob, the slimmed pod."""

REPLICA_PODS = f"{LABEL_JOB},{LABEL_ROLE}"
"""The label selector of every replica pod the operator follows (they carry no managed-by
label: `tfkube.kube.names.replica_pod_labels`)."""
LIST_PAGE = 500
WATCH_SECONDS = 300
"""How long the API server keeps one watch open (`timeoutSeconds`) before it is opened
again from the last resourceVersion (kopf's `server_timeout` in this operator)."""
REQUEST_SECONDS = 120
"""At most this long to connect, or for one LIST page (kopf's `request_timeout` here)."""
READ_MARGIN_SECONDS = 60
"""A watch that sends nothing (not even a bookmark, the API server's one a minute) for
`WATCH_SECONDS` plus this is taken as dead."""
BACKOFF_FIRST_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 30.0
SHORT_WATCH_SECONDS = 1.0
"""A watch that ends without error and without an event sooner than this counts as a
failure (backed off), so a server that closes watches at once is not hammered."""
CLOSE_SECONDS = 2.0
"""How long a stopped informer waits for a connection's TLS shutdown before aborting it."""


def backoff(failures: int) -> float:
    """Seconds to wait after `failures` failures in a row (0: none)."""
    if failures <= 0:
        return 0.0
    return float(min(BACKOFF_FIRST_SECONDS * 2 ** (failures - 1), BACKOFF_MAX_SECONDS))


def entry_of(pod: dict[str, Any]) -> Entry | None:
    """A pod from the API as the index keeps it; None without a TFJob label."""
    meta = pod.get("metadata") or {}
    namespace, name = meta.get("namespace") or "", meta.get("name") or ""
    job = (meta.get("labels") or {}).get(LABEL_JOB)
    if not job:
        return None
    return (namespace, name), (namespace, job), slim_pod(pod)


STARTING_PHASES = (None, "Pending", "Running")


def progress_only(old: dict[str, Any] | None, new: dict[str, Any] | None) -> bool:
    """Whether a pod's change (slimmed pods; None: none before, or deleted) only says that
    its replica is coming up: made, bound, started, ready. A big job's start is thousands of
    such changes, and nothing the operator does waits on them but the counts in its status
    (`WorkQueue.progress`). Anything else is acted on as soon as the last reconcile allows:
    a pod that ended, failed, restarted, is being deleted or evicted, or went."""
    if new is None:
        return False
    meta, status = new["metadata"], new["status"]
    if status["phase"] not in STARTING_PHASES or meta.get("deletionTimestamp"):
        return False
    if status.get("reason") or status.get("message"):  # Evicted, preempted, node lost...
        return False
    if any(c["type"] == "DisruptionTarget" for c in status["conditions"]):
        return False
    if any("terminated" in cs["state"] or cs["lastState"] for cs in status["containerStatuses"]):
        return False
    if old is None:
        return True
    return old["status"]["phase"] in STARTING_PHASES and old["metadata"]["labels"].get(
        LABEL_JOB
    ) == meta["labels"].get(LABEL_JOB)


class JobPods(NamedTuple):
    """What a reconcile gets of its TFJob from the index (`PodIndex.snapshot`)."""

    pods: list[dict[str, Any]]
    """Its pods, in a new list (the index changes while a reconcile runs)."""
    gone: int
    """How many of its pods the index saw go since the operator started (deleted, moved to
    another TFJob by their labels; each relist of their namespace counts one, since a pod
    may have come and gone unseen between the two): a reconcile that finds this moved on
    knows a pod went, which the pods alone cannot say (`Reconciler`, Preempted Events)."""


class PodIndex:
    """Every replica pod, slimmed, by (namespace, TFJob): what the API last said. Pure.
    Each change returns the TFJobs whose pods changed, to be poked."""

    def __init__(self) -> None:
        self._by_job: dict[Key, dict[str, dict[str, Any]]] = {}
        self._job_of: dict[PodName, Key] = {}
        self._gone: dict[Key, int] = {}

    def pods_of(self, key: Key) -> list[dict[str, Any]]:
        """A TFJob's pods, in a new list (the index changes while a reconcile runs)."""
        return list(self._by_job.get(key, {}).values())

    def snapshot(self, key: Key) -> JobPods:
        """A TFJob's pods and how many of its pods went (`JobPods`)."""
        return JobPods(self.pods_of(key), self._gone.get(key, 0))

    def jobs(self) -> set[Key]:
        return set(self._by_job)

    def get(self, pod: PodName) -> dict[str, Any] | None:
        """One pod as the index holds it (slimmed), or None."""
        key = self._job_of.get(pod)
        return None if key is None else self._by_job[key].get(pod[1])

    def __len__(self) -> int:
        return len(self._job_of)

    def _drop(self, pod: PodName) -> Key | None:
        key = self._job_of.pop(pod, None)
        if key is not None:
            self._gone[key] = self._gone.get(key, 0) + 1
            pods = self._by_job[key]
            del pods[pod[1]]
            if not pods:
                del self._by_job[key]
        return key

    def put(self, entry: Entry) -> set[Key]:
        """A pod added or changed."""
        pod, key, slim = entry
        changed: set[Key] = set()
        before = self._job_of.get(pod)
        if before is not None and before != key:  # its TFJob label changed
            self._drop(pod)
            changed.add(before)
        pods = self._by_job.setdefault(key, {})
        if pods.get(pod[1]) != slim:
            pods[pod[1]] = slim  # replaced, never changed in place
            changed.add(key)
        self._job_of[pod] = key
        return changed

    def delete(self, pod: PodName) -> set[Key]:
        key = self._drop(pod)
        return set() if key is None else {key}

    def apply(self, kind: str, obj: dict[str, Any]) -> set[Key]:
        """One watch event (ADDED, MODIFIED or DELETED) of a pod."""
        meta = obj.get("metadata") or {}
        name = (meta.get("namespace") or "", meta.get("name") or "")
        entry = entry_of(obj) if kind != "DELETED" else None
        if entry is None:  # deleted, or (never from the selector) without a TFJob label
            return self.delete(name)
        return self.put(entry)

    def replace(self, entries: Iterable[Entry], namespace: str | None) -> set[Key]:
        """A fresh LIST of one namespace (None: the whole cluster) replaces what the index
        held there; returns the TFJobs whose pods differ (changed, added or gone)."""
        fresh: dict[Key, dict[str, dict[str, Any]]] = {}
        job_of: dict[PodName, Key] = {}
        for pod, key, slim in entries:
            fresh.setdefault(key, {})[pod[1]] = slim
            job_of[pod] = key
        old = {k: v for k, v in self._by_job.items() if namespace is None or k[0] == namespace}
        changed = {k for k in old.keys() | fresh.keys() if old.get(k) != fresh.get(k)}
        for key in old.keys() | fresh.keys():  # a pod may have come and gone unseen
            self._gone[key] = self._gone.get(key, 0) + 1
        for key in old:
            del self._by_job[key]
        self._job_of = {
            p: k for p, k in self._job_of.items() if namespace is not None and p[0] != namespace
        }
        self._by_job.update(fresh)
        self._job_of.update(job_of)
        return changed


class Expired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


def split_lines(buffer: bytearray, chunk: bytes) -> list[bytes]:
    """Append `chunk` to `buffer`; return the whole lines now in it (without their
    newline, empty ones left out), leaving an unfinished line in `buffer`."""
    buffer += chunk
    end = buffer.rfind(b"\n")
    if end < 0:
        return []
    lines = [bytes(line) for line in buffer[:end].split(b"\n") if line]
    del buffer[: end + 1]
    return lines


@dataclass
class PodStream:
    """One LIST+WATCH: a namespace's replica pods, or the cluster's (namespace None)."""

    namespace: str | None
    resource_version: str | None = None
    """The last version seen (None: list first)."""
    lists: int = 0
    """How many LISTs filled the index (1 + relists)."""

    @property
    def scope(self) -> str:
        return self.namespace or "all namespaces"


class PodInformer:
    """Follows the replica pods into `index` and calls `poke(key)` for every TFJob whose
    pods changed. Runs in the operator's event loop (`run`); see the module docstring."""

    def __init__(
        self,
        endpoint: Endpoint,
        namespaces: Sequence[str],
        index: PodIndex,
        poke: Callable[[Key], None],
        *,
        progress: Callable[[Key], None] | None = None,
        selector: str = REPLICA_PODS,
        page: int = LIST_PAGE,
        watch_seconds: int = WATCH_SECONDS,
    ) -> None:
        self.endpoint = endpoint
        self.index = index
        self.poke = poke
        self.progress = progress
        """Called instead of `poke` for a change that only says a replica is coming up
        (`progress_only`); None: `poke` for every change."""
        self.selector = selector
        self.page = page
        self.watch_seconds = watch_seconds
        self.streams = [PodStream(ns) for ns in namespaces] or [PodStream(None)]
        self.proxy: str | None = getattr(endpoint.configuration, "proxy", None) or None
        """The kubeconfig's `proxy-url`, as the official client uses it."""
        self._synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._connections: dict[asyncio.Future[None], asyncio.Transport] = {}
        """The informer's connections not known closed yet: each one's `connection_lost`
        future (aiohttp's) -> its transport."""

    # -- the pure part: one event, one page ----------------------------------------------

    def handle(self, stream: PodStream, event: dict[str, Any]) -> None:
        """One decoded watch line: the index updated, the TFJobs poked, the stream's
        resourceVersion moved on. Raises `Expired` (410) or the `ApiError` of an ERROR."""
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            code = int(obj.get("code") or 500)
            if code == 410:
                raise Expired(obj.get("message") or "410 Gone")
            raise error_from(code, str(obj.get("reason") or ""), orjson.dumps(obj))
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            meta = obj.get("metadata") or {}
            name = (meta.get("namespace") or "", meta.get("name") or "")
            old = self.index.get(name) if self.progress is not None else None
            changed = self.index.apply(kind, obj)
            poke = self.poke
            if (
                self.progress is not None
                and len(changed) == 1
                and progress_only(old, self.index.get(name))
            ):
                poke = self.progress
            for key in changed:
                poke(key)
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            stream.resource_version = str(version)

    def listed(self, stream: PodStream, entries: Iterable[Entry], version: str) -> None:
        """A whole LIST of the stream's pods: the index replaced there, the TFJobs whose
        pods differ poked; the watch goes on from `version`."""
        for key in self.index.replace(entries, stream.namespace):
            self.poke(key)
        stream.resource_version = version
        stream.lists += 1
        if all(s.lists for s in self.streams):
            self._synced.set()

    # -- the I/O ------------------------------------------------------------------------

    async def wait_synced(self) -> None:
        """Until every stream's first LIST is in the index."""
        await self._synced.wait()

    def start(self) -> asyncio.Task[None]:
        """`run` as a task of the running loop."""
        self._task = asyncio.get_running_loop().create_task(self.run(), name="replica pods")
        return self._task

    async def stop(self) -> None:
        """End the streams and close the connections (the index stays as it was)."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # stop() itself was cancelled

    async def run(self) -> None:
        """Follow every stream until cancelled."""
        import aiohttp

        connector = aiohttp.TCPConnector(ssl=self.endpoint.ssl_context, limit=0)
        headers = {
            "Accept": "application/json",
            "Accept-Encoding": "identity",  # no gzip: both ends would spend CPU on it
            "User-Agent": "tfkube-operator (replica pods)",
        }
        try:
            async with aiohttp.ClientSession(
                connector=connector, headers=headers, trust_env=False
            ) as session:
                await asyncio.gather(*(self._follow(session, s) for s in self.streams))
        finally:
            await self._closed()

    def _track(self, response: Any) -> None:
        """Remember the connection a response came on until it is closed: a watch cut
        off mid-stream (stop) closes its connection when it is released, outside the
        session's pool, so closing the session does not wait for it, and a TLS transport
        closes its socket only after its shutdown (aio-libs/aiohttp#1925). An event loop
        ended before that left an unclosed socket behind (a ResourceWarning)."""
        connection = getattr(response, "connection", None)
        protocol = getattr(connection, "protocol", None)
        closed = getattr(protocol, "closed", None)  # aiohttp >= 3.10's connection_lost future
        transport = getattr(connection, "transport", None)
        if isinstance(closed, asyncio.Future) and closed not in self._connections:
            if transport is None:
                return
            self._connections[closed] = transport
            closed.add_done_callback(self._forget)

    def _forget(self, closed: asyncio.Future[None]) -> None:
        self._connections.pop(closed, None)
        if not closed.cancelled():
            closed.exception()  # retrieved: a connection lost with an error is still gone

    async def _closed(self) -> None:
        """Until every connection of the informer is closed: CLOSE_SECONDS for a TLS
        shutdown, then aborted (their sockets closed at once)."""
        pending = set(self._connections)
        if pending:
            _, pending = await asyncio.wait(pending, timeout=CLOSE_SECONDS)
        for closed in pending:
            transport = self._connections.get(closed)
            if transport is not None:
                transport.abort()
        if pending:
            await asyncio.wait(pending, timeout=CLOSE_SECONDS)

    async def _follow(self, session: Any, stream: PodStream) -> None:
        import aiohttp

        failures = 0
        loop = asyncio.get_running_loop()
        while True:
            relisted = False
            try:
                if stream.resource_version is None:
                    await self._list(session, stream)
                    relisted = True
                started = loop.time()
                events = await self._watch(session, stream)
                if events or loop.time() - started >= SHORT_WATCH_SECONDS:
                    failures = 0
                    continue
                failures += 1
                log.warning("the pod watch of %s ended at once; opening it again", stream.scope)
            except Expired as exc:
                stream.resource_version = None
                if not relisted:  # at once; a list whose version expires at once backs off
                    log.info("the pod watch of %s expired (%s): listing again", stream.scope, exc)
                    continue
                failures += 1
                log.warning("the pod watch of %s expired at once (%s)", stream.scope, exc)
            except (TimeoutError, ApiError, aiohttp.ClientError, OSError, ValueError) as exc:
                failures += 1
                log.warning("following the pods of %s: %s; retrying", stream.scope, _describe(exc))
            except Exception:
                failures += 1
                log.exception("following the pods of %s failed; retrying", stream.scope)
            await asyncio.sleep(backoff(failures))

    def _get(self, session: Any, stream: PodStream, query: dict[str, str], timeout: Any) -> Any:
        """A GET of the stream's pods (a page of the list, or the watch) with the
        endpoint's current credentials, through the kubeconfig's proxy if any."""
        return session.get(
            self.endpoint.host + POD.url(stream.namespace),
            params=query,
            headers=self.endpoint.headers(),
            timeout=timeout,
            proxy=self.proxy,
        )

    async def _list(self, session: Any, stream: PodStream) -> None:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=REQUEST_SECONDS)
        entries: list[Entry] = []
        token, restarts = "", 0
        started = asyncio.get_running_loop().time()
        while True:
            query = {"labelSelector": self.selector, "limit": str(self.page)}
            if token:
                query["continue"] = token
            async with self._get(session, stream, query, timeout) as response:
                self._track(response)
                body = await response.read()
                status, reason = response.status, response.reason or ""
            if status == 410 and token and restarts < LIST_RESTARTS:
                entries, token, restarts = [], "", restarts + 1  # the snapshot expired
                continue
            if status != 200:
                raise error_from(status, reason, body)
            data = orjson.loads(body)
            for pod in data.get("items") or []:
                entry = entry_of(pod)
                if entry is not None:
                    entries.append(entry)
            meta = data.get("metadata") or {}
            token = meta.get("continue") or ""
            if not token:
                break
        self.listed(stream, entries, str(meta.get("resourceVersion") or ""))
        log.info(
            "listed %d replica pods in %s (%.1f s)",
            len(entries),
            stream.scope,
            asyncio.get_running_loop().time() - started,
        )

    async def _watch(self, session: Any, stream: PodStream) -> int:
        """One watch, until the server ends it; returns how many events it brought."""
        import aiohttp

        query = {
            "labelSelector": self.selector,
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": stream.resource_version or "",
            "timeoutSeconds": str(self.watch_seconds),
        }
        timeout = aiohttp.ClientTimeout(
            total=None,
            sock_connect=REQUEST_SECONDS,
            sock_read=self.watch_seconds + READ_MARGIN_SECONDS,
        )
        events = 0
        async with self._get(session, stream, query, timeout) as response:
            self._track(response)
            if response.status == 410:
                raise Expired(f"410 {response.reason or 'Gone'}")
            if response.status != 200:
                raise error_from(response.status, response.reason or "", await response.read())
            buffer = bytearray()
            async for chunk in response.content.iter_any():
                for line in split_lines(buffer, chunk):
                    self.handle(stream, orjson.loads(line))
                    events += 1
        return events


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
