"""The node data cache (`python -m tfkube.datacache`) as a real process in front of a real
tfkube server on the control plane, with the REAL launcher as the replica (as in
test_k8s_data.py: the operator's pod template, its Secret resolved, run here).

It proves: a first job's pod fetches through the cache from the server; a second job with
the same data fetches 0 bytes from the server (its bytes come from the cache's disk,
counted by its /metrics); another team's job with the very same bytes gets its own key
(never the first team's copy) and another job's token opens nothing; an ended job's
token is refused with the server's answer even though the bytes are on the cache's disk;
a stream the server's side cuts short is not kept, and the launcher then asks the server
itself; a cache that cannot be reached sends the launcher to the server. The same for a
source the server staged, sharded (each worker's tar its own key).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client

from s3store import S3Store
from server.conftest import targz
from tfkube import contract
from tfkube.kube.names import DATA_CACHE_ENV
from tfkube.render import DATACACHE_NAME, OPERATOR_NAMESPACE, DataCacheInstall

from ._support import KubeCluster
from .test_k8s_data import (
    LISTER,
    files_in,
    one_worker,
    run_pod,
    store_secret,
    submit,
    upload_set,
)
from .test_server_kubernetes import Platform, Team, operated_team, running_platform
from .test_shipping import pod_env


class NodeCache:
    """`python -m tfkube.datacache` on a free loopback port; stopped by its PID."""

    def __init__(self, server: str, folder: Path) -> None:
        self.folder = folder
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tfkube.datacache", "--server", server, "--dir", str(folder),
             "--limit", "64MiB", "--host", "127.0.0.1", "--port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("listening on "), line
        self.url = f"http://{line.split()[-1]}"
        self.tokens_seen = []

    def metrics(self) -> dict[str, int]:
        text = httpx.get(f"{self.url}/metrics").text
        return {
            name.removeprefix("tfkube_datacache_").removesuffix("_total"): int(value)
            for name, value in (ln.split() for ln in text.splitlines() if not ln.startswith("#"))
        }

    def door(self, env: dict[str, str]) -> str:
        """The job's address at this cache (what TFKUBE_DATA_CACHE_URL holds)."""
        return self.url + urllib.parse.urlsplit(env[contract.DATA_URL]).path

    def kept(self) -> list[str]:
        return sorted(p.name for p in (self.folder / "objects").iterdir())

    def stop(self) -> str:
        """Stops it (its PID); its log."""
        if self.proc.returncode is None:
            self.proc.terminate()
            _out, self.log = self.proc.communicate(timeout=30)
        return self.log

    log = ""
    tokens_seen: list[str] = []  # noqa: RUF012 - set per instance in __init__


@contextlib.contextmanager
def node_cache(server: str, folder: Path) -> Iterator[NodeCache]:
    cache = NodeCache(server, folder)
    try:
        yield cache
    finally:
        log = cache.stop()
        assert "Traceback" not in log, log


class CuttingProxy:
    """A TCP relay to the server that cuts every data answer (not the key's) after
    `budget` bytes: a server gone mid-stream, as the cache sees it."""

    def __init__(self, upstream: str, budget: int) -> None:
        parts = urllib.parse.urlsplit(upstream)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.budget = budget
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.cut = 0
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                threading.Thread(target=self._relay, args=(conn,), daemon=True).start()

    def _relay(self, conn: socket.socket) -> None:
        with conn, socket.create_connection(self.target) as up:
            head = b""
            while b"\r\n\r\n" not in head:
                got = conn.recv(65536)
                if not got:
                    return
                head += got
            up.sendall(head)
            limited = b"/key " not in head.split(b"\r\n", 1)[0]
            sent = 0
            while got := up.recv(4096):
                if limited and sent + len(got) > self.budget:
                    conn.sendall(got[: self.budget - sent])
                    self.cut += 1
                    return
                conn.sendall(got)
                sent += len(got)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def platform(
    kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    """`tfkube install --server --data-cache`: its DaemonSet and node-local Service are
    there; the DaemonSet is removed (its pods would be KWOK fakes: the cache runs here)."""
    tmp = tmp_path_factory.mktemp("datacache")
    with running_platform(
        kube_cluster,
        tmp,
        outputs_claim=None,
        code_url=None,
        server_args=("--allow-fetch-from", "127.0.0.1/32"),
        data_cache=DataCacheInstall(str(tmp / "host-cache")),
    ) as made:
        apps = client.AppsV1Api(kube_cluster.api_client)
        try:
            service = kube_cluster.core.read_namespaced_service(DATACACHE_NAME, OPERATOR_NAMESPACE)
            assert service.spec.internal_traffic_policy == "Local"
            ds = apps.read_namespaced_daemon_set(DATACACHE_NAME, OPERATOR_NAMESPACE)
            assert ds.spec.template.spec.automount_service_account_token is False
        finally:
            apps.delete_namespaced_daemon_set(DATACACHE_NAME, OPERATOR_NAMESPACE)
            kube_cluster.core.delete_namespaced_service(DATACACHE_NAME, OPERATOR_NAMESPACE)
        yield made


@pytest.fixture(scope="module")
def cache(platform: Platform, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCache]:
    """The node's cache, as `tfkube install --server` runs it on every node."""
    with node_cache(platform.server.url, tmp_path_factory.mktemp("node") / "cache") as made:
        yield made
    for token in made.tokens_seen:
        assert token not in made.log  # never logged
    assert "bytes from the node's disk" in made.log, made.log


@pytest.fixture(scope="module")
def teams(
    platform: Platform, cache: NodeCache, operator_kubeconfig: Path
) -> Iterator[tuple[Team, Team]]:
    """Two teams whose operators name the node cache to replicas, as installed."""
    env = {DATA_CACHE_ENV: cache.url}
    with (
        operated_team(platform, operator_kubeconfig, {"run.sh": LISTER}, False, env) as one,
        operated_team(platform, operator_kubeconfig, {"run.sh": LISTER}, False, env) as two,
    ):
        yield one, two


def with_set(team: Team, name: str) -> tuple[dict[str, Any], dict[str, str]]:
    """A job of `team` with its data set `digits`, and its worker pod's environment."""
    job = submit(team, {"manifest": yaml.safe_dump(one_worker(name)), "data": "digits"})
    return job, pod_env(team.platform.kube, team.namespace, name, "worker")


def ask(url: str, token: str) -> httpx.Response:
    return httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


# Random bytes: gzip cannot shrink them, so the archive is larger than the cut's budget.
FILES = {"digits/train.bin": os.urandom(300_000), "readme": b"the data set\n"}


def test_a_second_job_reads_its_data_set_from_the_nodes_disk(
    teams: tuple[Team, Team], cache: NodeCache, tmp_path: Path
) -> None:
    one, two = teams
    archive = targz(FILES)
    upload_set(one, archive)
    upload_set(two, archive)  # the very same bytes, in another team
    m0, kept0 = cache.metrics(), len(cache.kept())
    first, env1 = with_set(one, "first")
    # The operator names the node cache to the replica: the same path, the cache's host.
    assert env1[contract.DATA_CACHE_URL] == cache.door(env1)
    cache.tokens_seen.append(env1[contract.DATA_TOKEN])
    done = run_pod(env1, tmp_path / "p1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert files_in(tmp_path / "p1" / "data") == FILES
    m1 = cache.metrics()
    assert m1["bytes_from_server"] - m0["bytes_from_server"] == len(archive), m1
    assert m1["bytes_from_disk"] == m0["bytes_from_disk"], m1
    assert len(cache.kept()) == kept0 + 1

    # A second job with the same data: 0 bytes from the server, all from the disk.
    _second, env2 = with_set(one, "second")
    cache.tokens_seen.append(env2[contract.DATA_TOKEN])
    done = run_pod(env2, tmp_path / "p2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert files_in(tmp_path / "p2" / "data") == FILES
    m2 = cache.metrics()
    assert m2["bytes_from_server"] == m1["bytes_from_server"], m2
    assert m2["bytes_from_disk"] - m1["bytes_from_disk"] == len(archive), m2

    # Another team, the same bytes: its own key, fetched from the server, never the
    # first team's copy; and its token opens none of the first team's jobs.
    _other, env3 = with_set(two, "other")
    theirs = env3[contract.DATA_TOKEN]
    cache.tokens_seen.append(theirs)
    refused = ask(cache.door(env1) + "/worker-0", theirs)
    assert refused.status_code == 404, refused.text
    assert "claim does not open it" in refused.json()["detail"]
    got = ask(cache.door(env3) + "/worker-0", theirs)
    assert got.status_code == 200
    assert got.content == archive
    m3 = cache.metrics()
    assert m3["bytes_from_server"] == m2["bytes_from_server"] + len(archive), m3
    assert m3["bytes_from_disk"] == m2["bytes_from_disk"], m3
    assert len(cache.kept()) == kept0 + 2

    # No token, a member's token: the server's refusal, nothing from the disk.
    assert httpx.get(cache.door(env1) + "/worker-0").status_code == 404
    assert ask(cache.door(env1) + "/worker-0", one.member.token).status_code == 404

    # The first job ended (deleted): its token is refused, its bytes are still here.
    one.member.ok(one.member.delete(f"/api/v1/jobs/{first['id']}"), 204)
    gone = ask(cache.door(env1) + "/worker-0", env1[contract.DATA_TOKEN])
    assert gone.status_code == 404, gone.text
    assert cache.metrics()["bytes_from_disk"] == m3["bytes_from_disk"]
    assert len(cache.kept()) == kept0 + 2


def test_a_cut_stream_is_not_kept_and_the_launcher_asks_the_server(
    teams: tuple[Team, Team], tmp_path: Path
) -> None:
    one, _two = teams
    proxy = CuttingProxy(one.platform.server.url, budget=50_000)
    try:
        with node_cache(proxy.url, tmp_path / "cache") as cutting:
            _job, env = with_set(one, "cut")
            done = run_pod({**env, contract.DATA_CACHE_URL: cutting.door(env)}, tmp_path / "p")
            assert done.returncode == 0, done.stderr[-3000:]
            assert files_in(tmp_path / "p" / "data") == FILES  # from the server itself
            assert "the node's data cache cannot be used" in done.stderr, done.stderr
            assert proxy.cut == 1
            assert cutting.kept() == []
            assert list((tmp_path / "cache" / "incoming").iterdir()) == []
            assert cutting.metrics()["not_kept"] == 1
    finally:
        proxy.close()
    # A cache that is not there at all: the launcher goes to the server.
    _job, env = with_set(one, "no-cache")
    dead = "http://127.0.0.1:9" + urllib.parse.urlsplit(env[contract.DATA_URL]).path
    done = run_pod({**env, contract.DATA_CACHE_URL: dead}, tmp_path / "p2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert files_in(tmp_path / "p2" / "data") == FILES


def test_a_staged_source_each_workers_shard_once_per_node(
    teams: tuple[Team, Team], cache: NodeCache, s3_store: S3Store, tmp_path: Path
) -> None:
    one, _two = teams
    api = one.member
    for job in api.ok(api.get("/api/v1/jobs", params={"team": one.name}))["items"]:
        api.delete(f"/api/v1/jobs/{job['id']}")  # room in the team's quota (4 jobs)
    store_secret(one, s3_store, "keys")
    bucket = s3_store.bucket()
    objects = {f"part-{i}.bin": bytes([i]) * (5000 + i) for i in range(4)}
    for name, data in objects.items():
        s3_store.put(bucket, f"ds/{name}", data)
    source = {"source": f"s3://{bucket}/ds/", "endpoint": s3_store.endpoint,
              "credentials": "keys", "shard": "byWorker"}  # fmt: skip
    names = sorted(objects)
    m0, kept0 = cache.metrics(), len(cache.kept())
    fetched = 0
    for round_, name in enumerate(("shard-a", "shard-b")):
        submit(one, {"manifest": yaml.safe_dump(one_worker(name, 2, **source))})
        env = pod_env(one.platform.kube, one.namespace, name, "worker")
        assert env[contract.DATA_CACHE_URL] == cache.door(env)
        cache.tokens_seen.append(env[contract.DATA_TOKEN])
        for index in (0, 1):
            pod = tmp_path / f"{name}-{index}"
            done = run_pod(env, pod, index)
            assert done.returncode == 0, done.stderr[-3000:]
            assert files_in(pod / "data") == {n: objects[n] for n in names[index::2]}
        m = cache.metrics()
        assert len(cache.kept()) == kept0 + 2  # one tar per shard
        if round_ == 0:
            fetched = m["bytes_from_server"] - m0["bytes_from_server"]
            assert fetched > sum(len(b) for b in objects.values()), m
            assert m["bytes_from_disk"] == m0["bytes_from_disk"], m
        else:  # the second job: 0 bytes from the server
            assert m["bytes_from_server"] - m0["bytes_from_server"] == fetched, m
            assert m["bytes_from_disk"] - m0["bytes_from_disk"] == fetched, m
