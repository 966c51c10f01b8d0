"""The operator's pod informer (`tfkube.operator._pods`) against the real API server, with
the operator's own RBAC: its first LIST fills the index, the WATCH follows pods made,
started and deleted, a stopped informer resumes from its resourceVersion (the changes it
missed replayed), an expired resourceVersion (410) makes it list again and replace the
index (the API server restarted: the harness's `restart`), and each TFJob whose pods
changed is poked. The whole operator on top of it (kills,
restarts, an API server restarted mid-job): test_operator.py, test_kube_faults.py."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
import pytest
from kubernetes import client

from tfkube.kube.rest import Endpoint, api_client_from
from tfkube.operator._pods import PodIndex, PodInformer

from ._support import KubeCluster

TIMEOUT = 60.0


def replica_pod(name: str, job: str, role: str = "ps") -> client.V1Pod:
    """A replica pod as the Job controller would label it (a fake node runs it; a PS pod
    keeps running until deleted)."""
    labels = {
        "tfkube.io/job-name": job,
        "tfkube.io/replica-type": role,
        "tfkube.io/component": "replica",
    }
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1PodSpec(
            containers=[client.V1Container(name="tensorflow", image="tfkube/fake")],
            termination_grace_period_seconds=0,
        ),
    )


async def until(what: str, check: Callable[[], Any]) -> Any:
    """Poll `check` (cheap: it reads the in-memory index) until it is truthy."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_informer_follows_lists_again_and_resumes(
    crd: KubeCluster,
    operator_kubeconfig: Path,
    kube_namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    kube, ns = crd, kube_namespace
    caplog.set_level(logging.INFO, logger="tfkube.operator.pods")
    api = api_client_from(operator_kubeconfig)
    pokes: list[tuple[str, str]] = []
    index = PodIndex()
    informer = PodInformer(Endpoint.of(api), (ns,), index, pokes.append, page=2)
    [stream] = informer.streams

    def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Awaitable[Any]:
        return asyncio.to_thread(fn, *args, **kwargs)

    def pods_of(job: str) -> dict[str, str]:
        return {p["metadata"]["name"]: p["status"]["phase"] for p in index.pods_of((ns, job))}

    async def create(name: str, job: str, role: str = "ps") -> None:
        await call(kube.core.create_namespaced_pod, ns, replica_pod(name, job, role))

    async def delete(name: str) -> None:
        await call(kube.core.delete_namespaced_pod, name, ns, grace_period_seconds=0)

    async def gone(name: str) -> None:
        def absent() -> bool:
            return not kube.core.list_namespaced_pod(
                ns, field_selector=f"metadata.name={name}"
            ).items

        while not await call(absent):
            await asyncio.sleep(0.1)

    async def scenario() -> None:
        for name, job in (("a-0", "a"), ("a-1", "a"), ("a-2", "a"), ("b-0", "b")):
            await create(name, job)
        other = replica_pod("c-0", "c")  # not a replica pod: no role label
        del other.metadata.labels["tfkube.io/replica-type"]
        await call(kube.core.create_namespaced_pod, ns, other)

        # The first LIST (pages of 2) fills the index before wait_synced returns.
        informer.start()
        await asyncio.wait_for(informer.wait_synced(), TIMEOUT)
        assert set(pods_of("a")) == {"a-0", "a-1", "a-2"}
        assert set(pods_of("b")) == {"b-0"}
        assert pods_of("c") == {}
        assert set(pokes) == {(ns, "a"), (ns, "b")}

        # The WATCH: pods started by the fake kubelet, one deleted, one made.
        await until("every pod Running", lambda: set(pods_of("a").values()) == {"Running"})
        pokes.clear()
        await delete("a-2")
        await create("b-1", "b")
        await until(
            "a-2 gone and b-1 seen", lambda: "a-2" not in pods_of("a") and "b-1" in pods_of("b")
        )
        assert {(ns, "a"), (ns, "b")} <= set(pokes)

        # Stopped (the index and the resourceVersion kept), the cluster changes, started
        # again: the watch resumes where it was and replays what it missed; no LIST.
        await informer.stop()
        pokes.clear()
        await delete("b-0")
        await create("a-3", "a")
        await gone("b-0")
        informer.start()
        await until(
            "the missed changes", lambda: "b-0" not in pods_of("b") and "a-3" in pods_of("a")
        )
        assert stream.lists == 1
        assert {(ns, "a"), (ns, "b")} <= set(pokes)

        # An expired resourceVersion, as after an API server restart (its watch cache
        # starts at etcd's revision then; the changes made meanwhile are older): 410, a new
        # LIST replaces the index, and the TFJobs whose pods changed or vanished are poked.
        await informer.stop()
        pokes.clear()
        for name in ("b-1", "a-0", "a-1", "a-3"):
            await delete(name)
        await create("d-0", "d")
        for name in ("b-1", "a-0", "a-1", "a-3"):
            await gone(name)
        assert kube.harness is not None, "the control plane is not this session's own"
        # In this thread, not a worker thread: the new apiserver dies with the thread
        # that started it (PR_SET_PDEATHSIG). The informer is stopped: nothing to block.
        kube.harness.restart("kube-apiserver")
        informer.start()
        await until("the relist", lambda: stream.lists == 2)
        assert pods_of("a") == {}
        assert pods_of("b") == {}
        assert set(pods_of("d")) == {"d-0"}
        assert {(ns, "a"), (ns, "b"), (ns, "d")} <= set(pokes)
        assert index.jobs() == {(ns, "d")}
        await informer.stop()
        expired = [r for r in caplog.records if "expired" in r.getMessage()]
        assert expired, "the relist came from no 410"

    try:
        asyncio.run(scenario())
    finally:
        api.close()


def test_a_stopped_informer_leaves_no_connection_open(
    crd: KubeCluster, operator_kubeconfig: Path, kube_namespace: str
) -> None:
    """Stopped mid-watch, the informer returns only once its connections are closed: a
    TLS connection cut off mid-stream was closed outside aiohttp's pool, its socket
    closed only after its TLS shutdown, and an event loop ended before that (a test's,
    the operator's at exit) left an unclosed socket behind (once a ResourceWarning that
    failed the next test's setup in CI)."""
    api = api_client_from(operator_kubeconfig)
    endpoint = Endpoint.of(api)
    port = urlsplit(endpoint.host).port
    informer = PodInformer(endpoint, (kube_namespace,), PodIndex(), lambda key: None)
    me = psutil.Process()

    def api_sockets() -> set[Any]:
        return {c.laddr for c in me.net_connections(kind="tcp") if c.raddr and c.raddr.port == port}

    async def scenario() -> None:
        before = api_sockets()
        informer.start()
        await asyncio.wait_for(informer.wait_synced(), TIMEOUT)
        opened = await until("the watch's connection", lambda: api_sockets() - before)
        await asyncio.sleep(0.5)  # the watch under way on it
        await informer.stop()
        left = api_sockets() & opened
        assert not left, f"sockets to the API server left open after stop(): {left}"

    try:
        asyncio.run(scenario())
    finally:
        api.close()
