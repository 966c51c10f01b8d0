"""The upgrade as a roll of the pods, on the real kubelet node (issue 18, point 6).

What a platform team does: an earlier tfkube runs in the cluster as pods of its own image
(tfkube's image recipe, tools/kube/images.py, built from that version's source out of this
repository's history under its own tag and imported into the node); a member has a
finished job and a between-graph job training. Then today's `tfkube install --server`,
with the same flags, is applied over it: the operator's and the server's Deployments roll
to today's image (both `Recreate`), the new server migrates the database on its claim
(0012 -> today's head) before it answers, and the job training across the roll finishes
untouched (the same pods by uid, no restart, Succeeded at the example's accuracy); the
users, the old API tokens, the finished job and its kept log are all there. Then a
downgrade: the earlier version's install applied over the upgraded database. Its server
refuses to start (exit 1, saying why and what to do) and changes nothing in the database;
today's install applied again brings the platform back.

The earlier version is `release.POD_RELEASE` (main of 2026-12-02 13:22 UTC, schema 0012),
not the release the local upgrade test starts from (`release.RELEASE`, schema 0011): that
one cannot run as pods of this image (tests/release.py says why).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from release import POD_RELEASE, POD_RELEASE_HEAD, release_source
from server._server import Api
from tfkube.kube.names import INDEX_KEY
from tfkube.render import OPERATOR_IMAGE, SERVER_NAME

from ._support import (
    REPO,
    KubeCluster,
    RealNode,
    create_shared_claim,
    load_cluster_module,
    placed_manifest,
    wait_for,
)
from .test_real_node_incluster import _pv, _tfkube
from .test_real_node_postgres import (
    Forward,
    _kubectl,
    set_up_admin,
    submit_hello,
    take_down,
    team_member,
    upload_code,
)

EXAMPLE = REPO / "examples" / "mnist-between-graph"
DATA_CLAIM = "tfkube-data"
OUTPUTS = "team-outputs"
MIN_ACCURACY = 0.90  # tests/tf/test_examples.py's, the same example locally
PACE = ["--train_steps=1000", "--step_sleep=0.15"]
"""~500 steps a worker at >= 0.15 s each: still training when the roll is done."""


@dataclass
class Release:
    image: str  # ghcr.io/tfkube/operator:<version>-<commit>, in the node's containerd
    src: Path  # its package's source (PYTHONPATH for its CLI)


@pytest.fixture(scope="module")
def release(real_node: RealNode, tmp_path_factory: pytest.TempPathFactory) -> Release:
    """The earlier version's image: tfkube's recipe over its source (seconds: the
    TensorFlow and dependency layers are this checkout's), imported into the node: only
    the blobs the node does not hold yet (its own layer, manifest and config; the
    TensorFlow layer came with the session's images), not the whole ~3 GB again."""
    src = release_source(tmp_path_factory.mktemp("release"), POD_RELEASE)
    images = load_cluster_module()._sibling("images")
    tensorflow = images.tensorflow_image()
    tag = f"{images.tfkube_version(src.parent)}-{POD_RELEASE[:7]}"
    image = images.tfkube_image(tensorflow, source=src.parent, tag=tag)
    assert image.name != OPERATOR_IMAGE
    t0 = time.monotonic()
    if not image.present():
        images.build_tfkube(image, tensorflow, src.parent)
    built = time.monotonic() - t0
    ctr = list(real_node.ctr)
    have = images.stored_blobs(ctr)
    images.import_image(ctr, image, have=have)
    listed = subprocess.run([*ctr, "images", "ls", "-q"], capture_output=True, text=True,
                            check=True).stdout.split()  # fmt: skip
    assert image.name in listed, listed
    print(f"\nthe release's image {image.name}: built in {built:.0f}s, imported in "
          f"{time.monotonic() - t0 - built:.0f}s (the node held {len(have)} blobs)")  # fmt: skip
    return Release(image.name, src)


def _head() -> str:
    """Today's newest schema revision (what the upgraded database must be at)."""
    from importlib import resources

    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option(
        "script_location", str(resources.files("tfkube.server").joinpath("migrations"))
    )
    return str(ScriptDirectory.from_config(config).get_current_head())


def _database(path: Path) -> tuple[list[str], str]:
    """The SQLite database on the server's claim, read from the node's folder: its schema
    revision and its whole content (SQL), to compare."""
    connection = sqlite3.connect(path)
    try:
        revision = [r[0] for r in connection.execute("SELECT version_num FROM alembic_version")]
        return revision, "\n".join(connection.iterdump())
    finally:
        connection.close()


def _pods(kube: KubeCluster, ns: str, selector: str) -> list[client.V1Pod]:
    return list(kube.core.list_namespaced_pod(ns, label_selector=selector).items)


def _component(component: str) -> str:
    return f"app.kubernetes.io/name=tfkube,app.kubernetes.io/component={component}"


def _rolled(kube: KubeCluster, ns: str, component: str, image: str, node: str) -> Any:
    """The component's one pod, of `image`, on the real node and Ready (no other left)."""
    pods = _pods(kube, ns, _component(component))
    if len(pods) != 1 or pods[0].metadata.deletion_timestamp is not None:
        return None
    (p,) = pods
    statuses = p.status.container_statuses or []
    if p.spec.node_name != node or p.spec.containers[0].image != image:
        return None
    return p if statuses and all(c.ready for c in statuses) else None


def _job_pods(kube: KubeCluster, team_ns: str, job: str) -> dict[str, tuple[str, int]]:
    """The job's pods: name -> (uid, restart count of its container)."""
    out = {}
    for p in _pods(kube, team_ns, f"tfkube.io/job-name={job}"):
        restarts = sum(c.restart_count for c in p.status.container_statuses or [])
        out[p.metadata.name] = (p.metadata.uid, restarts)
    return out


def _running(kube: KubeCluster, team_ns: str, job: str) -> bool:
    """Whether the job's worker 0 (its chief: it decides success) is running now."""
    selector = f"tfkube.io/job-name={job},tfkube.io/replica-type=worker,{INDEX_KEY}=0"
    return any(
        c.state.running
        for p in _pods(kube, team_ns, selector)
        for c in p.status.container_statuses or []
    )


def _log(api: Api, job_id: str, replica: str) -> str:
    r = api.get(f"/api/v1/jobs/{job_id}/logs/{replica}")
    return r.text if r.status_code == 200 else ""


def _finished(api: Api, job_id: str) -> dict[str, Any] | None:
    seen = api.ok(api.get(f"/api/v1/jobs/{job_id}"))
    return seen if seen["phase"] in ("Succeeded", "Failed") else None


def _server_refused(kube: KubeCluster, ns: str, image: str) -> tuple[int, str] | None:
    """The server's pod of `image` once its container has exited: (exit code, its log)."""
    for p in _pods(kube, ns, _component("server")):
        if p.spec.containers[0].image != image:
            continue
        for c in p.status.container_statuses or []:
            ended = c.state.terminated or (c.last_state and c.last_state.terminated)
            if ended is not None:
                previous = c.state.terminated is None
                log = kube.core.read_namespaced_pod_log(
                    p.metadata.name, ns, container="server", previous=previous
                )
                return ended.exit_code, log
    return None


@pytest.fixture
def installed(
    kube_cluster: KubeCluster, real_node: RealNode, tmp_path: Path
) -> Iterator[tuple[str, str, list[str], Forward, list[Api]]]:
    """The administrator's part (namespace, the server's data volume, the outputs share);
    afterwards every job deleted through the server, the install and volumes removed."""
    kube, node = kube_cluster, real_node
    ns = f"tfkube-up-{uuid.uuid4().hex[:6]}"
    team = f"t{uuid.uuid4().hex[:8]}"
    pvs: list[str] = []
    apis: list[Api] = []
    forward = Forward(kube, ns, tmp_path / "forward.log")
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    try:
        share = node.volumes_dir / ns / "share"
        pvs.append(_pv(kube, node, f"{ns}-data", node.volumes_dir / ns / "data", ns, DATA_CLAIM))
        pvs.append(_pv(kube, node, f"{ns}-outputs", share, ns, OUTPUTS))
        pvs.append(_pv(kube, node, f"{ns}-{team}", share / team / "outputs", f"tfkube-{team}",
                       OUTPUTS))  # fmt: skip
        create_shared_claim(kube, ns, DATA_CLAIM, "ReadWriteOnce")
        create_shared_claim(kube, ns, OUTPUTS)
        yield ns, team, pvs, forward, apis
    finally:
        take_down(kube, forward, apis, [ns, f"tfkube-{team}"], pvs, tmp_path)


def test_the_release_rolls_to_today_in_the_cluster_and_back_is_refused(
    kube_cluster: KubeCluster,
    real_node: RealNode,
    release: Release,
    installed: tuple[str, str, list[str], Forward, list[Api]],
    tmp_path: Path,
) -> None:
    kube, node = kube_cluster, real_node
    ns, team, _pvs, forward, apis = installed
    team_ns = f"tfkube-{team}"
    database = node.volumes_dir / ns / "data" / "tfkube.db"
    head = _head()
    assert head != POD_RELEASE_HEAD
    env = {**os.environ, "KUBECONFIG": str(kube.kubeconfig), "TFKUBE_HOME": str(tmp_path / "h")}
    release_env = {**env, "PYTHONPATH": str(release.src)}
    (taint,) = node.TOLERATIONS
    flags = ["install", "--server", "-n", ns, "--data-claim", DATA_CLAIM,
             "--outputs-claim", OUTPUTS, "--kubeconfig", str(kube.kubeconfig),
             *[a for k, v in node.SELECTOR.items() for a in ("--node-selector", f"{k}={v}")],
             "--toleration", f"{taint['key']}:{taint['effect']}"]  # fmt: skip
    timings: dict[str, float] = {}

    def roll(image: str) -> float:
        t0 = time.monotonic()
        for component in ("operator", "server"):
            wait_for(f"the {component}'s pod of {image} Ready",
                     lambda c=component: _rolled(kube, ns, c, image, node.name),  # type: ignore[misc]
                     300, 0.5)  # fmt: skip
        return time.monotonic() - t0

    # -- version N: the release's install, its pods on the node --------------------------
    t0 = time.monotonic()
    out = _tfkube(release_env, *flags, "--image", release.image)
    assert "installed" in out, out
    roll(release.image)
    timings["release_ready"] = time.monotonic() - t0
    url = forward.start()
    admin = set_up_admin(kube, ns, _rolled(kube, ns, "server", release.image, node.name), url)
    apis.append(admin)
    assert _database(database)[0] == [POD_RELEASE_HEAD]
    member = team_member(admin, url, team, node)
    apis.append(member)
    create_shared_claim(kube, team_ns, OUTPUTS)
    upload_code(member, team, "mnist", EXAMPLE)
    before = submit_hello(member, team, node, tmp_path, "before")
    t1 = time.monotonic()
    manifest = placed_manifest(node, EXAMPLE, "across", PACE)
    across = member.ok(member.post(f"/api/v1/teams/{team}/jobs", json={"manifest": manifest}), 201)
    done = wait_for("the finished job", lambda: _finished(member, before["id"]), 240, 1.0)
    assert done["phase"] == "Succeeded", done
    wait_for(
        "the job across training (worker 0's steps)",
        lambda: "tfkube-steps:" in _log(member, across["id"], "worker-0"),
        300,
        1.0,
    )
    timings["training"] = time.monotonic() - t1
    pods = _job_pods(kube, team_ns, "across")
    assert len(pods) == 3, pods  # ps-0, worker-0, worker-1
    assert all(n == 0 for _uid, n in pods.values()), pods

    # -- version N+1: today's install over it ----------------------------------------------
    forward.stop()
    t2 = time.monotonic()
    out = _tfkube(env, *flags)
    assert "installed" in out, out
    roll(OPERATOR_IMAGE)
    timings["upgrade_rolled"] = time.monotonic() - t2
    assert _running(kube, team_ns, "across"), "the job ended before the roll"
    assert _job_pods(kube, team_ns, "across") == pods  # the same pods, no restart
    url = forward.start()
    admin, member = (Api(url, a.token, a.name) for a in apis)  # the old tokens
    apis += [admin, member]
    assert _database(database)[0] == [head]  # migrated at the new server's start
    assert member.name in {u["name"] for u in admin.ok(admin.get("/api/v1/users"))}
    kept = member.ok(member.get(f"/api/v1/jobs/{before['id']}"))
    assert kept["phase"] == "Succeeded", kept
    assert "history job ran in" in _log(member, before["id"], "worker-0")
    final = wait_for("the job across to finish", lambda: _finished(member, across["id"]),
                     480, 1.0)  # fmt: skip
    timings["across_done"] = time.monotonic() - t1
    assert final["phase"] == "Succeeded", final
    after = _job_pods(kube, team_ns, "across")
    assert all(pods.get(name) == seen for name, seen in after.items()), (pods, after)
    found = re.findall(r"tfkube-example: result (\{.*\})", _log(member, across["id"], "worker-0"))
    assert found, _log(member, across["id"], "worker-0")[-3000:]
    accuracy = json.loads(found[-1])["test_accuracy"]
    assert accuracy >= MIN_ACCURACY, found[-1]

    # -- back to N: refused, nothing changed -----------------------------------------------
    forward.stop()
    _kubectl(kube, ns, "scale", "deployment", SERVER_NAME, "--replicas=0")
    wait_for("today's server stopped", lambda: not _pods(kube, ns, _component("server")), 120, 0.5)
    revision, content = _database(database)
    assert revision == [head]
    t3 = time.monotonic()
    out = _tfkube(release_env, *flags, "--image", release.image)
    assert "installed" in out, out
    code, said = wait_for("the release's server to refuse the database",
                          lambda: _server_refused(kube, ns, release.image), 300, 0.5)  # fmt: skip
    timings["downgrade_refused"] = time.monotonic() - t3
    assert code == 1, said[-3000:]
    said = " ".join(said.split())
    assert f"the database's schema is at revision {head}, newer than this tfkube" in said, said
    assert "a downgrade is not supported" in said, said
    assert "Traceback" not in said, said
    assert _database(database) == (revision, content)  # nothing changed
    out = _tfkube(env, *flags)  # forward again: today's version on the same database
    roll(OPERATOR_IMAGE)
    url = forward.start()
    admin = Api(url, apis[0].token, apis[0].name)
    apis.append(admin)
    names = {j["name"]: j["phase"] for j in admin.ok(admin.get("/api/v1/jobs"))["items"]}
    assert names == {"before": "Succeeded", "across": "Succeeded"}, names
    print(f"\nrelease {release.image} -> {OPERATOR_IMAGE} in pods: {timings} "
          f"(seconds; accuracy {accuracy:.3f}); the refused downgrade said: "
          f"{said[-400:]}")  # fmt: skip
