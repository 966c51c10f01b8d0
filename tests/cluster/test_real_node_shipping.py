"""Kept logs, charts and the result of a job in real pods with no shared folder at all
(issue 18 point 2): the replicas ship them to the server. And each replica's CPU and memory
from the kubelet's resource metrics (metrics-server on the real node), which the server
keeps while the job runs, in the API and `/metrics` (issue 21 point 5 on Kubernetes).

The platform of test_real_node_serving.py (the server on the real node's bridge, where pods
reach it), but the team has no outputs claim: each pod's folder is its own. The
between-graph example trains in real pods; a worker's pod is deleted mid-run. Once the job
has ended and its pods are gone, the server still has every replica's log (the deleted
worker's two starts, each whole), the training curves from the chief's event files and
the job's result.

The same module's platform also shows data reaching real pods (issue 18 point 3, issue 19):
the server may reach the S3 store on loopback (`--allow-fetch-from 127.0.0.1/32`); it
stages the example's digits from SeaweedFS with the team's secret, and each worker pod
fetches them from the server into its data folder and trains on them; a second job reads
0 bytes from the store. The same from HDFS (MiniDFSCluster, WebHDFS as the team's HDFS user).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from s3store import S3Store
from server._server import PASSWORD, Api, api_for
from server.test_team_secrets import digits_npz
from web._browser import LAPTOP, chromium, sign_in

from ._support import KubeCluster, RealNode, upload_code, wait_for
from .test_real_node_serving import EXAMPLE, JOB_TIMEOUT, Team, node_platform

JOB = "shipped"
REPLICAS = {"ps-0", "worker-0", "worker-1"}
USAGE_TIMEOUT = 90.0
"""metrics-server has a pod's CPU after two scrapes (10 s apart); the server asks every 5 s."""
GAUGE = re.compile(r"^(tfkube_replica_(?:cpu_cores|memory_bytes))\{(.*)\} (\S+)$")


@pytest.fixture(scope="module")
def team(
    kube_cluster: KubeCluster,
    real_node: RealNode,
    operator_kubeconfig: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Team]:
    tmp = tmp_path_factory.mktemp("node-shipping")
    with node_platform(
        kube_cluster,
        real_node,
        operator_kubeconfig,
        tmp,
        outputs=False,
        server_args=("--allow-fetch-from", "127.0.0.1/32"),
    ) as made:
        yield made


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


def job_manifest(node: RealNode, name: str = JOB) -> str:
    raw = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    raw["metadata"]["name"] = name
    spec = raw["spec"]
    spec["code"]["source"] = "artifact:mnist"
    spec["runPolicy"] = {**spec.get("runPolicy", {}), "backoffLimit": 6}
    for role in spec["replicas"].values():
        role["nodeSelector"] = dict(node.SELECTOR)
        role["tolerations"] = list(node.TOLERATIONS)
        role.get("resources", {}).pop("cpu", None)
    # Long enough to delete a worker mid-run (two workers share 2,000 global steps).
    spec["replicas"]["worker"]["args"] = ["--train_steps=2000", "--step_sleep=0.05"]
    return str(yaml.safe_dump(raw))


def test_a_job_without_shared_storage_keeps_its_logs_curves_and_result(team: Team) -> None:
    api, kube, ns = team.member, team.kube, team.namespace
    job = api.ok(
        api.post(f"/api/v1/teams/{team.name}/jobs", json={"manifest": job_manifest(team.node)}),
        201,
    )
    jid = job["id"]

    def worker_1_log() -> str:
        r = api.get(f"/api/v1/jobs/{jid}/logs/worker-1", params={"attempt": 0})
        return r.text if r.status_code == 200 else ""

    # worker-1's first start is shipped as it trains.
    wait_for("worker-1 training, shipped", lambda: re.search(r"global_step=\d+ loss",
             worker_1_log()), JOB_TIMEOUT, 1.0)  # fmt: skip
    pods = kube.core.list_namespaced_pod(
        ns, label_selector=f"tfkube.io/job-name={JOB},tfkube.io/replica-type=worker"
    ).items
    victim = next(
        p
        for p in pods
        if p.metadata.annotations.get("batch.kubernetes.io/job-completion-index") == "1"
    )
    kube.core.delete_namespaced_pod(victim.metadata.name, ns)
    # While the job goes on: every replica's CPU and memory, kept by the server.
    used = wait_for("every replica's CPU and memory samples", lambda: _used(api, jid),
                    USAGE_TIMEOUT, 2.0)  # fmt: skip
    assert team.admin is not None
    admin = team.admin
    gauges = wait_for("the usage gauges in /metrics", lambda: _gauges(admin), USAGE_TIMEOUT, 2.0)
    done = wait_for(
        "the job to end",
        lambda: (
            (j := api.ok(api.get(f"/api/v1/jobs/{jid}")))["phase"] in ("Succeeded", "Failed") and j
        ),
        JOB_TIMEOUT,
        2.0,
    )
    assert done["phase"] == "Succeeded", done
    # Every pod of the job gone (as after a node loss or a TTL): the server still has it all.
    for pod in kube.core.list_namespaced_pod(ns, label_selector=f"tfkube.io/job-name={JOB}").items:
        kube.core.delete_namespaced_pod(pod.metadata.name, ns, grace_period_seconds=0)
    wait_for(
        "the pods gone",
        lambda: (
            not kube.core.list_namespaced_pod(ns, label_selector=f"tfkube.io/job-name={JOB}").items
        ),
        120,
    )
    logs = api.ok(api.get(f"/api/v1/jobs/{jid}/logs"))
    starts = {(f["replica"], f["attempt"]) for f in logs}
    assert {("ps-0", 0), ("worker-0", 0), ("worker-1", 0), ("worker-1", 1)} <= starts, logs
    chief = api.get(f"/api/v1/jobs/{jid}/logs/worker-0", params={"attempt": 0}).text
    assert "tfkube-example: result" in chief, chief[-2000:]
    assert "entrypoint exited with 0" in chief, chief[-2000:]  # the launcher's last line
    deleted = api.get(f"/api/v1/jobs/{jid}/logs/worker-1", params={"attempt": 0}).text
    assert re.search(r"global_step=\d+ loss", deleted), deleted[-2000:]
    again = api.get(f"/api/v1/jobs/{jid}/logs/worker-1", params={"attempt": 1}).text
    assert re.search(r"global_step=\d+ loss", again), again[-2000:]
    scalars = api.ok(api.get(f"/api/v1/jobs/{jid}/scalars"))
    assert any(s["points"] for s in scalars["series"]), scalars
    result = api.ok(api.get(f"/api/v1/jobs/{jid}"))["result"]
    assert result["test_accuracy"] >= 0.9, result
    # Kept after the job ended, with the job's logs; /metrics shows running replicas only.
    after = api.ok(api.get(f"/api/v1/jobs/{jid}/usage"))
    assert after["available"] is True, after
    assert {s["replica"] for s in after["replicas"]} >= REPLICAS, after
    print(f"\nshipped: {sorted(starts)}; {len(scalars['series'])} curves; result {result}")
    print(f"usage: {used}; gauges: {gauges}")


def team_secret(team: Team, body: dict[str, str]) -> str:
    """A team secret, stored by a team admin the site admin makes; its name."""
    admin = api_for(team.server.url, "admin")
    try:
        boss = admin.new_user()
        admin.add_member(team.name, boss, "admin")
    finally:
        admin.close()
    api = api_for(team.server.url, boss)
    try:
        api.ok(api.post(f"/api/v1/teams/{team.name}/secrets", json=body), 201)
    finally:
        api.close()
    return body["name"]


def store_keys(team: Team, store: S3Store) -> str:
    """The store's credentials as the team's secret `store-keys`."""
    body = {"name": "store-keys", "access_key_id": store.access_key,
            "secret_access_key": store.secret_key}  # fmt: skip
    return team_secret(team, body)


def data_job(team: Team, name: str, data: dict[str, str], steps: int) -> dict[str, object]:
    raw = yaml.safe_load(job_manifest(team.node, name))
    raw["spec"]["storage"] = {"data": data}
    raw["spec"]["replicas"]["worker"]["args"] = [f"--train_steps={steps}"]
    body = {"manifest": yaml.safe_dump(raw)}
    return dict(team.member.ok(team.member.post(f"/api/v1/teams/{team.name}/jobs", json=body), 201))


def s3_job(team: Team, name: str, bucket: str, store: S3Store, steps: int) -> dict[str, object]:
    source = f"s3://{bucket}/digits/"
    data = {"source": source, "endpoint": store.endpoint, "credentials": "store-keys"}
    return data_job(team, name, data, steps)


def trained_from_its_data(team: Team, job: dict[str, object], name: str) -> dict[str, Any]:
    """The job ended Succeeded, each worker trained on its own shard, which its pod fetched
    from the server (the launcher's own lines); its result."""
    api, kube, ns = team.member, team.kube, team.namespace
    done = wait_for(
        "the job to end",
        lambda: (
            (j := api.ok(api.get(f"/api/v1/jobs/{job['id']}")))["phase"] in ("Succeeded", "Failed")
            and j
        ),
        JOB_TIMEOUT,
        2.0,
    )
    assert done["phase"] == "Succeeded", done
    assert "3 of 3 objects fetched" in staged(team, job["id"])
    for index in (0, 1):
        log = api.get(f"/api/v1/jobs/{job['id']}/logs/worker-{index}", params={"attempt": 0}).text
        assert f"worker {index}: shard {index}/2" in log, log[-2000:]
    pods = kube.core.list_namespaced_pod(
        ns, label_selector=f"tfkube.io/job-name={name},tfkube.io/replica-type=worker"
    ).items
    assert pods
    for pod in pods:
        text = kube.core.read_namespaced_pod_log(pod.metadata.name, ns, container="tensorflow")
        assert "data ready (" in text, text[-2000:]
        assert "data ready (0 bytes" not in text, text[-2000:]
    result = done["result"]
    assert isinstance(result, dict), done
    assert result["test_accuracy"] >= 0.9, result
    return result


def staged(team: Team, job_id: object) -> str:
    api = team.member

    def said() -> str | None:
        events = api.ok(api.get(f"/api/v1/jobs/{job_id}/events"))
        found = [e["message"] for e in events if e["message"].startswith("data staged from")]
        return found[0] if found else None

    return wait_for("the staging's event", said, JOB_TIMEOUT, 1.0)


def test_s3_data_reaches_real_pods_through_the_server(team: Team, s3_store: S3Store) -> None:
    bucket = s3_store.bucket()
    for name, data in digits_npz().items():
        s3_store.put(bucket, f"digits/{name}", data)
    store_keys(team, s3_store)
    job = s3_job(team, "from-s3", bucket, s3_store, 1000)
    result = trained_from_its_data(team, job, "from-s3")
    pods = team.kube.core.list_namespaced_pod(
        team.namespace, label_selector="tfkube.io/job-name=from-s3"
    ).items
    for pod in pods:
        assert s3_store.secret_key not in str(pod.to_dict())

    again = s3_job(team, "again-s3", bucket, s3_store, 100)
    said = staged(team, again["id"])
    assert "0 of 3 objects fetched (0.0 MiB read from the store)" in said, said
    print(f"\ndata through the server: {result}; second job: {said}")


def test_hdfs_data_reaches_real_pods_through_the_server(team: Team, hdfs_store: Any) -> None:
    """The same from HDFS (MiniDFSCluster on loopback, tests/hdfsstore.py): the server reads
    it over WebHDFS as the team's HDFS user (a team secret), the worker pods fetch their
    shards from the server and train to the example's accuracy; the user is in no pod."""
    user = "real-pods-hdfs-reader"
    secret = team_secret(team, {"name": "hdfs-user", "hadoop_user_name": user})
    root = f"/real-node/{team.name}/digits"
    for name, body in digits_npz().items():
        hdfs_store.put(f"{root}/{name}", body)
    data = {
        "source": f"{hdfs_store.uri}{root}",
        "endpoint": hdfs_store.webhdfs.removesuffix("/webhdfs/v1"),
        "credentials": secret,
    }
    job = data_job(team, "from-hdfs", data, 1000)
    result = trained_from_its_data(team, job, "from-hdfs")
    pods = team.kube.core.list_namespaced_pod(
        team.namespace, label_selector="tfkube.io/job-name=from-hdfs"
    ).items
    for pod in pods:
        assert user not in str(pod.to_dict())
    print(f"\nHDFS data through the server: {result}")


THROTTLE_QUOTA_US = 1000
"""A hundredth of a CPU per 100 ms period for the throttled worker's container (a twentieth
left it at a third of the other worker's rate: its steps mostly sleep)."""
FLAGGED_WITHIN = 90.0


def container_cgroup(pod: Any) -> Path:
    """The pod's main container's folder in the node's cgroup v1 `cpu` hierarchy (the
    kubelet's cgroupfs driver names it by the container's id)."""
    container_id = pod.status.container_statuses[0].container_id.split("://", 1)[1]
    for root in sorted(Path("/sys/fs/cgroup/cpu").glob("tfkube-*")):
        for found in root.rglob(container_id):
            return found
    raise AssertionError(f"no cpu cgroup for container {container_id}")


def replica_of(api: Api, jid: str, key: str) -> dict[str, Any]:
    job = api.ok(api.get(f"/api/v1/jobs/{jid}"))
    return next(r for r in job["replicas"] or [] if f"{r['role']}-{r['index']}" == key)


def test_a_throttled_worker_is_flagged_and_the_page_charts_every_replica(
    team: Team, browser: Any
) -> None:
    """Issue 21 points 4 and 5 on the real node: worker-1's container is throttled with its
    cgroup's CPU quota (`cpu.cfs_quota_us`: this machine mounts cgroup v1; `cpu.max` is
    v2's name for it) while the job trains; the server, reading the shipped logs' steps,
    flags it a straggler within 90 s, and the job page in Chromium shows it so and charts
    every replica's CPU and memory from the kubelet's resource metrics."""
    api, kube, ns = team.member, team.kube, team.namespace
    raw = yaml.safe_load(job_manifest(team.node, "throttled"))
    raw["spec"]["replicas"]["worker"]["args"] = ["--train_steps=1000000", "--step_sleep=0.01"]
    raw["spec"]["runPolicy"]["stragglerSeconds"] = 20
    body = {"manifest": yaml.safe_dump(raw)}
    job = api.ok(api.post(f"/api/v1/teams/{team.name}/jobs", json=body), 201)
    jid = job["id"]
    try:
        for key in ("worker-0", "worker-1"):
            wait_for(f"{key}'s step rate", lambda k=key: replica_of(api, jid, k)["step_rate"],
                     JOB_TIMEOUT, 1.0)  # fmt: skip
        pod = next(
            p
            for p in kube.core.list_namespaced_pod(
                ns, label_selector="tfkube.io/job-name=throttled,tfkube.io/replica-type=worker"
            ).items
            if p.metadata.annotations.get("batch.kubernetes.io/job-completion-index") == "1"
        )
        folder = container_cgroup(pod)
        (folder / "cpu.cfs_period_us").write_text("100000")
        (folder / "cpu.cfs_quota_us").write_text(str(THROTTLE_QUOTA_US))
        throttled = time.monotonic()
        seen: list[tuple[float, object, object]] = []

        def straggling() -> dict[str, Any] | None:
            slow, fast = replica_of(api, jid, "worker-1"), replica_of(api, jid, "worker-0")
            seen.append((round(time.monotonic() - throttled), slow["step_rate"], fast["step_rate"]))
            return slow if slow["straggler"] else None

        try:
            flagged = wait_for("worker-1 a straggler", straggling, FLAGGED_WITHIN, 1.0)
        except AssertionError as exc:
            stat = (folder / "cpu.stat").read_text().split()
            raise AssertionError(f"{exc}; (s, worker-1, worker-0 rates): {seen}; {stat}") from None
        took = time.monotonic() - throttled
        fast = replica_of(api, jid, "worker-0")
        assert not fast["straggler"], fast
        assert flagged["step_rate"] < fast["step_rate"] / 2, (flagged, fast)
        print(f"\nworker-1 flagged {took:.1f} s after its throttle: {flagged['step_rate']} "
              f"steps/s against worker-0's {fast['step_rate']}")  # fmt: skip

        context = browser.new_context(viewport=LAPTOP, base_url=team.server.url)
        context.set_default_timeout(30_000)
        try:
            page = context.new_page()
            sign_in(page, team.server.url, api.name, PASSWORD)
            page.goto(f"/jobs/{jid}")
            row = page.locator("table.replicas").get_by_role("row", name=re.compile("worker-1"))
            wait_for("worker-1 shown a straggler", lambda: "Straggler" in row.inner_text(), 30)
            for usage in ("cpu", "memory"):
                chart = page.locator(f'figure.chart[data-usage="{usage}"]')
                wait_for(f"{usage} samples charted",
                         lambda c=chart: int(c.get_attribute("data-points") or 0) > 3,
                         USAGE_TIMEOUT, 2.0)  # fmt: skip
                page.reload()
            caption = page.locator('figure.chart[data-usage="memory"] figcaption').inner_text()
            for key in REPLICAS:
                assert key in caption, caption
        finally:
            context.close()
    finally:
        api.post(f"/api/v1/jobs/{jid}/stop")


def test_a_replica_over_its_memory_limit_ends_oomkilled(team: Team, tmp_path: Path) -> None:
    """Issue 21 point 5: the kubelet kills a container over its memory limit; the job
    fails for good (backoffLimit 0) and says OOMKilled."""
    api = team.member
    code = tmp_path / "oom"
    code.mkdir()
    (code / "run.sh").write_text(
        "#!/bin/sh\npython3 -c 'import time; x = bytearray(1 << 30); time.sleep(60)'\n"
    )
    (code / "run.sh").chmod(0o755)
    upload_code(api, team.name, "oom", code)
    manifest = {
        "apiVersion": "tfkube.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": "oom"},
        "spec": {
            "code": {"source": "artifact:oom"},
            "replicas": {
                "worker": {
                    "replicas": 1,
                    "resources": {"memory": "256Mi"},
                    "nodeSelector": dict(team.node.SELECTOR),
                    "tolerations": list(team.node.TOLERATIONS),
                }
            },
            "runPolicy": {"backoffLimit": 0, "restartPolicy": "Never"},
        },
    }
    body = {"manifest": yaml.safe_dump(manifest)}
    job = api.ok(api.post(f"/api/v1/teams/{team.name}/jobs", json=body), 201)
    done = wait_for(
        "the job to fail",
        lambda: (j := api.ok(api.get(f"/api/v1/jobs/{job['id']}")))["phase"] == "Failed" and j,
        JOB_TIMEOUT,
        1.0,
    )
    assert "OOMKilled" in done["message"], done  # the job's own message says why
    assert done["restarts"] == 0, done
    print(f"\nover its limit: {done['reason']}: {done['message']}")


def _used(api: Api, jid: str) -> dict[str, tuple[float, int]] | None:
    """Replica -> its highest (cores, bytes) when every replica has a sample using both."""
    usage = api.ok(api.get(f"/api/v1/jobs/{jid}/usage"))
    assert usage["available"] is True, usage  # the cluster has a metrics API
    best = {
        s["replica"]: (max(p[1] for p in s["points"]), max(p[2] for p in s["points"]))
        for s in usage["replicas"]
        if s["points"]
    }
    # The job page draws a line per replica through the times they share: the server
    # keeps each poll's new samples at the poll's time (`at_poll`).
    times = [{p[0] for p in s["points"]} for s in usage["replicas"] if s["replica"] in REPLICAS]
    shared = set.intersection(*times) if len(times) == len(REPLICAS) else set()
    if shared and {k for k, (cores, used) in best.items() if cores > 0 and used > 0} >= REPLICAS:
        return best
    return None


def _gauges(admin: Api) -> dict[tuple[str, str], float] | None:
    """(gauge, replica) -> value for this job's running replicas, once CPU and memory are
    there for at least one replica."""
    found = {}
    for line in admin.get("/metrics").text.splitlines():
        m = GAUGE.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        if labels.get("job") == JOB:
            found[(m.group(1), f"{labels['role']}-{labels['index']}")] = float(m.group(3))
    kinds = {name for (name, _), value in found.items() if value > 0}
    return found if kinds == {"tfkube_replica_cpu_cores", "tfkube_replica_memory_bytes"} else None
