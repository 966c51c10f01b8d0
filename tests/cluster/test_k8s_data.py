"""Uploaded data sets and data sources reach Kubernetes jobs (issue 18 point 3, issue 19's
Kubernetes half), against the real control plane, the real server and a real S3 store
(SeaweedFS on loopback, tests/s3store.py).

The server stages a source itself, with the team's secret, into the team's content-keyed
cache; the pods fetch their data (an uploaded data set, or their folder of the staged
source: their shard with a shard rule) through the data door with the job's claim. As in
test_shipping.py, KWOK's pods run no container, so the test is the kubelet: it reads the
role's pod template as the operator rendered it, resolves its Secret references, and runs
the REAL launcher here with that environment (the pod's emptyDirs folders of its own).
The same in real pods: tests/cluster/test_real_node_shipping.py (the lead runs it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from s3store import S3Store
from server._server import api_for
from server.conftest import targz
from tfkube import contract
from tfkube.kube.names import DATA_URL_ANNOTATION

from ._support import KubeCluster, wait_for
from .test_operator import tfjob
from .test_server_kubernetes import Team, manifest, operated_team, running_platform
from .test_shipping import launcher_env, pod_env

LISTER = """#!/bin/sh
set -e
cd "$TFKUBE_DATA_DIR"
find . -type f | sort | while read -r f; do echo "file $f $(wc -c < "$f")"; done
echo "store keys here: $(env | grep -c AWS_SECRET_ACCESS_KEY)"
"""


@pytest.fixture(scope="module")
def data_team(
    kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory, operator_kubeconfig: Path
) -> Iterator[Team]:
    tmp = tmp_path_factory.mktemp("k8s-data")
    with (
        running_platform(
            kube_cluster,
            tmp,
            outputs_claim=None,
            code_url=None,
            server_args=("--allow-fetch-from", "127.0.0.1/32"),
        ) as platform,
        operated_team(platform, operator_kubeconfig, {"run.sh": LISTER}, outputs=False) as team,
    ):
        yield team


def run_pod(env: dict[str, str], pod: Path, index: int = 0) -> subprocess.CompletedProcess[str]:
    """The real launcher as in a pod of its own, its data folder an emptyDir in `pod`."""
    for sub in ("logs", "work", "venvs", "home", "data"):
        (pod / sub).mkdir(parents=True, exist_ok=True)
    here = {
        **launcher_env(env, pod, "data"),
        contract.DATA_DIR: str(pod / "data"),
        contract.K8S_INDEX: str(index),
        contract.DATA_WAIT_SECONDS: "90",
    }
    return subprocess.run(
        [sys.executable, "-m", "tfkube.launcher"], env=here, capture_output=True, text=True,
        timeout=150,
    )  # fmt: skip


def files_in(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def submit(team: Team, body: dict[str, Any]) -> dict[str, Any]:
    api = team.member
    return dict(api.ok(api.post(f"/api/v1/teams/{team.name}/jobs", json=body), 201))


def upload_set(team: Team, archive: bytes) -> None:
    """A member of `team` uploads `archive` as the team's data set `digits`."""
    api = team.member
    api.ok(
        api.post(
            f"/api/v1/teams/{team.name}/artifacts",
            params={"name": "digits", "filename": "digits.tar.gz", "kind": "data"},
            content=archive,
            headers={"Content-Type": "application/octet-stream"},
        ),
        201,
    )


def one_worker(name: str, workers: int = 1, **data: Any) -> dict[str, Any]:
    made = manifest(name, code={"source": "artifact:hello"})
    made["spec"]["replicas"]["worker"]["replicas"] = workers
    if data:
        made["spec"]["storage"] = {"data": data}
    return made


def test_an_uploaded_data_set_reaches_the_workers_not_the_ps(
    data_team: Team, tmp_path: Path
) -> None:
    team = data_team
    kube = team.platform.kube
    upload_set(team, targz({"digits/hello.txt": "42 digits\n", "readme": "the data set\n"}))
    job = submit(team, {"manifest": yaml.safe_dump(one_worker("with-set")), "data": "digits"})
    tf = wait_for("the TFJob", lambda: tfjob(kube, team.namespace, "with-set"), 30)
    door = f"{team.platform.server.url}/api/v1/data/{job['id']}"
    assert tf["metadata"]["annotations"][DATA_URL_ANNOTATION] == door
    env = pod_env(kube, team.namespace, "with-set", "worker")
    assert env[contract.DATA_URL] == door
    assert env[contract.DATA_TOKEN] not in str(tf)  # from the job's Secret, never a spec
    ps = pod_env(kube, team.namespace, "with-set", "ps")
    assert contract.DATA_URL not in ps
    assert contract.DATA_TOKEN not in ps

    done = run_pod(env, tmp_path / "pod")
    assert done.returncode == 0, done.stderr[-3000:]
    assert files_in(tmp_path / "pod" / "data") == {
        "digits/hello.txt": b"42 digits\n",
        "readme": b"the data set\n",
    }
    assert "file ./digits/hello.txt 10" in done.stdout, done.stdout
    # A restarted container of the same pod fetches nothing again.
    again = run_pod(env, tmp_path / "pod")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "data ready (0 bytes fetched)" in again.stderr, again.stderr


def store_secret(team: Team, store: S3Store, name: str) -> str:
    """The team's secret `name`: the store's credentials, stored by a new team admin."""
    admin = team.platform.admin
    user = admin.new_user()
    admin.add_member(team.name, user, "admin")
    boss = api_for(team.platform.server.url, user)
    try:
        body = {"name": name, "access_key_id": store.access_key,
                "secret_access_key": store.secret_key}  # fmt: skip
        boss.ok(boss.post(f"/api/v1/teams/{team.name}/secrets", json=body), 201)
    finally:
        boss.close()
    return name


@pytest.fixture(scope="module")
def store_keys(data_team: Team, s3_store: S3Store) -> str:
    """The team's secret `store-keys`."""
    return store_secret(data_team, s3_store, "store-keys")


def staged_event(api: Any, job_id: str, nth: int = 0) -> str:
    """The job's `nth` "data staged from ..." event (0: the first), once it is there."""

    def found() -> str | None:
        events = api.ok(api.get(f"/api/v1/jobs/{job_id}/events"))
        said = [e["message"] for e in events if e["message"].startswith("data staged from")]
        return said[nth] if len(said) > nth else None

    return wait_for("the staging's event", found, 60, 0.5)


def test_an_s3_source_is_staged_once_and_each_worker_fetches_its_shard(
    data_team: Team, s3_store: S3Store, store_keys: str, tmp_path: Path
) -> None:
    team, api = data_team, data_team.member
    kube = team.platform.kube
    bucket = s3_store.bucket()
    objects = {f"part-{i}.bin": bytes([i]) * (1000 + i) for i in range(5)}
    for name, body in objects.items():
        s3_store.put(bucket, f"ds/{name}", body)
    source = {
        "source": f"s3://{bucket}/ds/",
        "endpoint": s3_store.endpoint,
        "credentials": store_keys,
        "shard": "byWorker",
    }
    job = submit(team, {"manifest": yaml.safe_dump(one_worker("from-s3", 2, **source))})
    tf = wait_for("the TFJob", lambda: tfjob(kube, team.namespace, "from-s3"), 30)
    env = pod_env(kube, team.namespace, "from-s3", "worker")
    # The store's credentials never reach the cluster: not the TFJob, not a pod.
    assert s3_store.secret_key not in str(tf)
    assert s3_store.secret_key not in str(env)
    for secret in kube.core.list_namespaced_secret(team.namespace).items:
        assert s3_store.secret_key not in str(secret.data), secret.metadata.name

    shards = {}
    for index in (0, 1):
        done = run_pod(env, tmp_path / f"worker-{index}", index)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "store keys here: 0" in done.stdout, done.stdout
        shards[index] = files_in(tmp_path / f"worker-{index}" / "data")
    names = sorted(objects)
    assert shards[0] == {n: objects[n] for n in names[0::2]}, shards[0].keys()
    assert shards[1] == {n: objects[n] for n in names[1::2]}, shards[1].keys()
    first = staged_event(api, job["id"])
    assert "5 of 5 objects fetched" in first, first

    # A second job with the same data reads nothing from the store.
    unsharded = {k: v for k, v in source.items() if k != "shard"}
    second = submit(team, {"manifest": yaml.safe_dump(one_worker("again-s3", 1, **unsharded))})
    env2 = pod_env(kube, team.namespace, "again-s3", "worker")
    done = run_pod(env2, tmp_path / "again")
    assert done.returncode == 0, done.stderr[-3000:]
    assert files_in(tmp_path / "again" / "data") == objects
    said = staged_event(api, second["id"])
    assert "0 of 5 objects fetched (0.0 MiB read from the store)" in said, said

    # The door: another job's claim, a member's token, no token: nothing.
    door = env[contract.DATA_URL] + "/worker-0"
    assert httpx.get(door).status_code == 404
    assert httpx.get(door, headers={"Authorization": f"Bearer {api.token}"}).status_code == 404
    other = env2[contract.DATA_TOKEN]
    assert httpx.get(door, headers={"Authorization": f"Bearer {other}"}).status_code == 404
    mine = httpx.get(door, headers={"Authorization": f"Bearer {env[contract.DATA_TOKEN]}"})
    assert mine.status_code == 200, mine.text
    assert httpx.get(door.replace("worker-0", "worker-7"),
                     headers={"Authorization": f"Bearer {env[contract.DATA_TOKEN]}"}
                     ).status_code == 404  # fmt: skip


def test_a_missing_source_is_refused_before_anything_starts(
    data_team: Team, s3_store: S3Store, store_keys: str
) -> None:
    team = data_team
    bucket = s3_store.bucket()
    source = {"source": f"s3://{bucket}/ds/", "endpoint": s3_store.endpoint,
              "credentials": store_keys}  # fmt: skip
    body = {"manifest": yaml.safe_dump(one_worker("gone-s3", 1, **source))}
    refused = team.member.post(f"/api/v1/teams/{team.name}/jobs", json=body)
    assert refused.status_code in (400, 422), refused.text
    assert "nothing there" in refused.text, refused.text
    assert tfjob(team.platform.kube, team.namespace, "gone-s3") is None


def test_a_staging_cut_short_is_staged_again_and_a_lost_secret_fails_for_good(
    data_team: Team, s3_store: S3Store, store_keys: str, tmp_path: Path
) -> None:
    """A server stopped mid-staging leaves the state `staging` with no thread running it
    (written here as it leaves it): the next replica's ask stages again (from the cache:
    0 bytes) and gets its data. With the team's secret removed meanwhile, the door answers
    410 with why, and the replica fails for good (EX_DATAERR) with that reason. Last in
    the module: it removes the team's secret."""
    team, api = data_team, data_team.member
    kube = team.platform.kube
    bucket = s3_store.bucket()
    objects = {f"f{i}.txt": f"line {i}\n".encode() for i in range(3)}
    for name, body in objects.items():
        s3_store.put(bucket, f"ds/{name}", body)
    source = {"source": f"s3://{bucket}/ds/", "endpoint": s3_store.endpoint,
              "credentials": store_keys}  # fmt: skip
    job = submit(team, {"manifest": yaml.safe_dump(one_worker("cut-short", 1, **source))})
    assert "3 of 3 objects fetched" in staged_event(api, job["id"])
    served = team.platform.tmp / "data" / "teams" / team.name / "staged" / job["id"]
    state = served.with_name(served.name + ".json")
    assert json.loads(state.read_text())["phase"] == "ready"
    cut_short = json.dumps({"phase": "staging", "text": "staging data: 0.0 of 0.0 MiB"})
    state.write_text(cut_short)
    env = pod_env(kube, team.namespace, "cut-short", "worker")
    done = run_pod(env, tmp_path / "pod")
    assert done.returncode == 0, done.stderr[-3000:]
    assert files_in(tmp_path / "pod" / "data") == objects
    again = staged_event(api, job["id"], 1)
    assert "0 of 3 objects fetched (0.0 MiB read from the store)" in again, again

    admin = team.platform.admin
    boss_name = admin.new_user()
    admin.add_member(team.name, boss_name, "admin")
    boss = api_for(team.platform.server.url, boss_name)
    try:
        boss.ok(boss.delete(f"/api/v1/teams/{team.name}/secrets/{store_keys}"), 204)
    finally:
        boss.close()
    state.write_text(cut_short)
    failed = run_pod(env, tmp_path / "pod-2")
    assert failed.returncode == contract.EX_DATAERR, failed.stderr[-3000:]
    reason = (tmp_path / "pod-2" / "termination-log").read_text()
    assert "bad data" in reason, reason
    assert store_keys in reason, reason  # the secret's name, never a value
    assert s3_store.secret_key not in reason + failed.stderr


def test_an_hdfs_source_reaches_each_worker_as_its_shard(
    data_team: Team, hdfs_store: Any, tmp_path: Path
) -> None:
    """HDFS alike (MiniDFSCluster on loopback, tests/hdfsstore.py): the server reads it
    over WebHDFS as the team's HDFS user (a team secret), each worker fetches its shard;
    the user is in no TFJob or pod."""
    team, api = data_team, data_team.member
    kube = team.platform.kube
    for job in api.ok(api.get("/api/v1/jobs", params={"team": team.name}))["items"]:
        api.delete(f"/api/v1/jobs/{job['id']}")  # room in the team's quota (4 jobs)
    user = "k8s-hdfs-reader-5e1"
    admin = team.platform.admin
    boss_name = admin.new_user()
    admin.add_member(team.name, boss_name, "admin")
    boss = api_for(team.platform.server.url, boss_name)
    try:
        body = {"name": "hdfs-user", "hadoop_user_name": user}
        boss.ok(boss.post(f"/api/v1/teams/{team.name}/secrets", json=body), 201)
    finally:
        boss.close()
    root = f"/k8s-tests/{team.name}"
    parts = {f"part-{i}": f"part {i}\n".encode() for i in range(3)}
    for name, body_bytes in parts.items():
        hdfs_store.put(f"{root}/{name}", body_bytes)
    source = {
        "source": f"{hdfs_store.uri}{root}",
        "endpoint": hdfs_store.webhdfs.removesuffix("/webhdfs/v1"),
        "credentials": "hdfs-user",
        "shard": "byWorker",
    }
    job = submit(team, {"manifest": yaml.safe_dump(one_worker("from-hdfs", 2, **source))})
    tf = wait_for("the TFJob", lambda: tfjob(kube, team.namespace, "from-hdfs"), 30)
    env = pod_env(kube, team.namespace, "from-hdfs", "worker")
    assert user not in str(tf)
    assert user not in str(env)
    for index, mine in enumerate([["part-0", "part-2"], ["part-1"]]):
        done = run_pod(env, tmp_path / f"worker-{index}", index)
        assert done.returncode == 0, done.stderr[-3000:]
        assert files_in(tmp_path / f"worker-{index}" / "data") == {n: parts[n] for n in mine}
    assert "3 of 3 objects fetched" in staged_event(api, job["id"])
