"""The platform server on the Kubernetes engine, against the real control plane.

As a platform team runs it: `tfkube install --server` (the CRD, the operator's and the
server's RBAC), then `tfkube server --engine kubernetes` as a process here, signed in to the
cluster with the token of the `tfkube-server` ServiceAccount install made (so the server
has exactly the RBAC it ships with, not an administrator's), and `tfkube operator` for the
team's namespace with the operator's token. People then use the server's API only:
set-up, a team (its namespace and ResourceQuota appear), upload, submit by the four fields
or a document, status with the replicas' messages, events, stop, delete (nothing left),
logs (KWOK runs no container: the pod-log path says so), TensorBoard through the API
server's service proxy, another team's 404s, a restart of the server.

No StorageClass and no provisioner here: `install --server` is refused until it is given a
claim for the server's data (`--data-claim`), and says so; jobs get no claim they did not
ask for (issue 23), so they run with nothing bound; the team's outputs claim is bound to a
PersistentVolume the tests make (as an administrator would, docs/kubernetes.md).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from server._server import PASSWORD, Api, ServerProc, api_for, free_port, login
from tfkube.engines.kubernetes import install
from tfkube.engines.kubernetes._cluster import NAMESPACE_GONE_SECONDS
from tfkube.kube.names import GROUP, PLURAL
from tfkube.render import (
    OPERATOR_NAMESPACE,
    SERVER_NAME,
    DataCacheInstall,
    ServerInstall,
)
from tfkube.render._server import SERVER_DATA_CLAIM, server_url

from ._support import (
    KubeCluster,
    Operator,
    create_shared_claim,
    load_cluster_module,
    service_account_kubeconfig,
    still_there,
    wait_for,
)
from .test_operator import tfjob

OUTPUTS = "team-outputs"
NAMESPACE = OPERATOR_NAMESPACE
NOTEBOOK_PLACEMENT = (
    "--notebook-node-selector", "tfkube.io/pool=notebooks",
    "--notebook-toleration", "tfkube.io/pool=notebooks:NoSchedule",
)  # fmt: skip
"""Where this module's server puts notebooks (no node has the label: they stay Pending)."""
RUN_SH = '#!/bin/sh\necho "hello from $TFKUBE_ROLE-$TFKUBE_INDEX"\n'


def _targz(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def bind_volume(kube: KubeCluster, namespace: str, claim: str) -> str:
    """A PersistentVolume pre-bound to `claim` in `namespace` (no provisioner here)."""
    name = f"pv-{uuid.uuid4().hex[:10]}"
    kube.core.create_persistent_volume(
        client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=name, labels={"tfkube-test": "server"}),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": "100Gi"},
                access_modes=["ReadWriteMany", "ReadWriteOnce"],
                persistent_volume_reclaim_policy="Retain",
                host_path=client.V1HostPathVolumeSource(path=f"/tmp/tfkube-fake/{name}"),
                claim_ref=client.V1ObjectReference(namespace=namespace, name=claim),
            ),
        )
    )
    return name


def wait_for_tfjob_quota(kube: KubeCluster) -> None:
    """Kubernetes' quota controller learns of a new CRD by discovery every 30 s, and a quota
    made before that stays "status unknown" (refusing TFJobs) until its 5-minute resync.
    A cluster whose CRD is older than half a minute never sees this; the CRD was just
    installed here, so wait until a probe quota counts TFJobs. (The server meanwhile keeps
    such a job queued with the API server's reason: `passing_refusal` in the engine.)"""
    probe = "tfkube-test-probe"
    key = f"count/{PLURAL}.{GROUP}"

    def counted() -> bool:
        limit = str(int(time.monotonic()) % 1000 + 10)  # a spec change makes it recompute
        body = {"spec": {"hard": {key: limit}}}
        try:
            kube.core.patch_namespaced_resource_quota(probe, NAMESPACE, body)
        except ApiException as exc:
            if exc.status != 404:
                raise
            kube.core.create_namespaced_resource_quota(
                NAMESPACE, {"metadata": {"name": probe}, **body}
            )
        time.sleep(1.0)
        quota = kube.core.read_namespaced_resource_quota(probe, NAMESPACE)
        return key in ((quota.status and quota.status.used) or {})

    wait_for("the quota controller to count TFJobs", counted, 90, interval=0)
    kube.core.delete_namespaced_resource_quota(probe, NAMESPACE)


class Platform:
    """What the module fixture yields: the cluster, the server, its admin."""

    def __init__(self, kube: KubeCluster, server: ServerProc, admin: Api, tmp: Path) -> None:
        self.kube, self.server, self.admin, self.tmp = kube, server, admin, tmp
        self.namespaces: list[str] = []

    def restart(self) -> None:
        self.server.stop()
        self.server.start()


@contextlib.contextmanager
def running_platform(
    kube: KubeCluster,
    tmp: Path,
    *,
    outputs_claim: str | None,
    code_url: str | None,
    server_args: tuple[str, ...] = (),
    data_cache: DataCacheInstall | None = None,
) -> Iterator[Platform]:
    """`tfkube install --server` (its Deployment removed: the server runs here, not as a
    KWOK fake pod), then `tfkube server --engine kubernetes` here with the server's
    ServiceAccount token, set up with an admin; everything removed afterwards, and the
    server's log checked for errors. `outputs_claim`: the teams' shared claim (None: the
    replicas ship what the server keeps); `code_url`: how replicas reach the server
    (None: its own loopback address); `server_args`: more of `tfkube server`'s options;
    `data_cache`: `--data-cache` (its DaemonSet is the test's to remove)."""
    # No StorageClass here: the server's data is on a claim the administrator names (none
    # is made; the server runs here, so it is never needed).
    install(
        kube.api_client,
        server=ServerInstall(
            outputs_claim=outputs_claim, data_claim=SERVER_DATA_CLAIM, data_cache=data_cache
        ),
    )
    apps = client.AppsV1Api(kube.api_client)
    with contextlib.suppress(ApiException):  # a module before this one removed it
        apps.delete_namespaced_deployment(SERVER_NAME, NAMESPACE)
    wait_for_tfjob_quota(kube)
    kubeconfig = service_account_kubeconfig(kube, SERVER_NAME, NAMESPACE, tmp / "server.kubeconfig")
    extra = ["--engine", "kubernetes", "--kubeconfig", str(kubeconfig)]
    if outputs_claim:
        extra += ["--outputs-claim", outputs_claim]
    if code_url:
        extra += ["--code-url", code_url]
    extra += server_args
    env = {**os.environ, "TFKUBE_HOME": str(tmp / "home")}
    server = ServerProc(tmp / "data", free_port(), None, env, extra=extra)
    server.start()
    admin: Api | None = None
    made = Platform(kube, server, Api(server.url, "", "admin"), tmp)
    try:
        assert server.setup_token
        r = httpx.post(
            f"{server.url}/api/v1/setup",
            json={"token": server.setup_token, "name": "admin", "password": PASSWORD},
            # the default team may wait for its namespace, still being deleted by the
            # module before this one (NAMESPACE_GONE_SECONDS)
            timeout=NAMESPACE_GONE_SECONDS + 30,
        )
        assert r.status_code == 201, r.text
        made.admin.close()
        admin = api_for(server.url, "admin")
        made.admin = admin
        made.namespaces.append("tfkube-default")
        yield made
    finally:
        try:
            if admin is not None:
                for job in admin.get("/api/v1/jobs", params={"limit": 500}).json()["items"]:
                    admin.delete(f"/api/v1/jobs/{job['id']}")
                admin.close()
        finally:
            server.stop()
            errors = [
                line
                for line in server.log.read_text().splitlines()
                if "Traceback" in line or "ERROR" in line
            ]
            for ns in made.namespaces:
                try:
                    kube.core.delete_namespace(ns, propagation_policy="Background")
                except ApiException as exc:
                    if exc.status != 404:
                        raise
            for pv in kube.core.list_persistent_volume(label_selector="tfkube-test=server").items:
                kube.core.delete_persistent_volume(pv.metadata.name)
        assert not errors, server.log.read_text()[-6000:]


@pytest.fixture(scope="module")
def platform(
    kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    tmp = tmp_path_factory.mktemp("k8s-server")
    with running_platform(
        kube_cluster,
        tmp,
        outputs_claim=OUTPUTS,
        code_url=server_url(NAMESPACE),
        server_args=NOTEBOOK_PLACEMENT,
    ) as made:
        yield made


class Team:
    """A team of the server with a member, its namespace, the outputs claim an
    administrator made in it (unless `outputs` is False), and the operator watching it."""

    def __init__(self, platform: Platform, quota: dict[str, Any], outputs: bool = True) -> None:
        self.platform = platform
        self.name = f"t{uuid.uuid4().hex[:8]}"
        self.namespace = f"tfkube-{self.name}"
        admin = platform.admin
        admin.new_team(self.name, quota)
        platform.namespaces.append(self.namespace)
        user = admin.new_user()
        admin.add_member(self.name, user, "member")
        self.member = api_for(platform.server.url, user)
        kube = platform.kube
        if outputs:
            bind_volume(kube, self.namespace, OUTPUTS)
            create_shared_claim(kube, self.namespace, OUTPUTS)
        self.operator: Operator | None = None

    def upload_code(self, name: str, files: dict[str, str]) -> None:
        """The member uploads `files` as the team's code artifact `name`."""
        self.member.ok(
            self.member.post(
                f"/api/v1/teams/{self.name}/artifacts",
                params={"name": name, "filename": "code.tar.gz"},
                content=_targz(files),
                headers={"Content-Type": "application/octet-stream"},
            ),
            201,
        )

    def start_operator(self, kubeconfig: Path, env: dict[str, str] | None = None) -> None:
        self.operator = Operator(
            self.platform.kube,
            self.namespace,
            self.platform.tmp / f"{self.name}-op.log",
            kubeconfig,
            env,
        )
        self.operator.start()

    def close(self) -> None:
        self.member.close()
        if self.operator is not None:
            self.operator.kill()
            log = self.operator.log.read_text()
            assert not self.operator.errors(), log[-5000:]
            assert "Forbidden" not in log, log[-5000:]


@contextlib.contextmanager
def operated_team(
    platform: Platform,
    operator_kubeconfig: Path,
    code: dict[str, str],
    outputs: bool = True,
    operator_env: dict[str, str] | None = None,
) -> Iterator[Team]:
    """A new team with its operator running (`operator_env` added to its environment) and
    `code` uploaded as its artifact `hello`."""
    made = Team(platform, {"cpu": 8, "memory": 32 * 2**30, "gpu": 2, "jobs": 4}, outputs)
    try:
        made.start_operator(operator_kubeconfig, operator_env)
        made.upload_code("hello", code)
        yield made
    finally:
        made.close()


@pytest.fixture(scope="module")
def team(platform: Platform, operator_kubeconfig: Path) -> Iterator[Team]:
    with operated_team(platform, operator_kubeconfig, {"run.sh": RUN_SH}) as made:
        yield made


@pytest.fixture(scope="module")
def outsider(platform: Platform) -> Iterator[Api]:
    """A user of another team."""
    admin = platform.admin
    other = admin.new_team(f"o{uuid.uuid4().hex[:8]}")
    platform.namespaces.append(f"tfkube-{other}")
    name = admin.new_user()
    admin.add_member(other, name, "admin")
    api = api_for(platform.server.url, name)
    yield api
    api.close()


# -- helpers ---------------------------------------------------------------------------------


def job_of(api: Api, job_id: str) -> dict[str, Any]:
    return dict(api.ok(api.get(f"/api/v1/jobs/{job_id}")))


def wait_phase(api: Api, job_id: str, *phases: str, timeout: float = 120) -> dict[str, Any]:
    """Until the job is in one of `phases`; the failure shows the job as last seen."""
    seen: list[dict[str, Any]] = [{}]

    def reached() -> dict[str, Any] | None:
        seen[0] = job_of(api, job_id)
        return seen[0] if seen[0]["phase"] in phases else None

    try:
        return wait_for(f"job {job_id} to reach {phases}", reached, timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the job: {seen[0]}") from None


def wait_replica(api: Api, job_id: str, key: str, state: str, timeout: float = 120) -> None:
    """Until the job's replica `key` is in `state`; the failure shows the job as last seen."""
    seen: list[dict[str, Any]] = []

    def reached() -> bool:
        seen[:] = [job_of(api, job_id)]
        return any(r["key"] == key and r["state"] == state for r in seen[0]["replicas"])

    try:
        wait_for(f"{key} {state}", reached, timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the job: {seen}") from None


def left_of(kube: KubeCluster, namespace: str, job: str) -> list[str]:
    """The job's Secrets, ConfigMaps, Jobs and pods still in the namespace."""
    selector = f"tfkube.io/job-name={job}"
    found = [
        *(f"Secret {s.metadata.name}" for s in kube.core.list_namespaced_secret(namespace).items),
        *(
            f"ConfigMap {c.metadata.name}"
            for c in kube.core.list_namespaced_config_map(namespace).items
        ),
        *(
            f"Job {j.metadata.name}"
            for j in kube.batch.list_namespaced_job(namespace, label_selector=selector).items
        ),
        *(
            f"Pod {p.metadata.name}"
            for p in kube.core.list_namespaced_pod(namespace, label_selector=selector).items
        ),
    ]
    return [f for f in found if f.split()[1].startswith(f"{job}-") and "kube-root-ca" not in f]


def submit_form(team: Team, **form: Any) -> dict[str, Any]:
    return dict(team.member.ok(team.member.post(f"/api/v1/teams/{team.name}/jobs", json=form), 201))


def submit_manifest(team: Team, manifest: dict[str, Any]) -> dict[str, Any]:
    body = {"manifest": yaml.safe_dump(manifest)}
    return dict(team.member.ok(team.member.post(f"/api/v1/teams/{team.name}/jobs", json=body), 201))


def manifest(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "tfkube.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {
            "replicas": {
                "ps": {"replicas": 1},
                "worker": {
                    "replicas": 1,
                    "annotations": {"tfkube.io/fake-duration": "600s"},
                },
            },
            "code": {"source": "artifact:hello"},
            **spec,
        },
    }


# -- tests -----------------------------------------------------------------------------------


def test_a_team_is_a_namespace_with_its_quota(platform: Platform, team: Team) -> None:
    kube = platform.kube
    ns = kube.core.read_namespace(team.namespace)
    assert ns.metadata.labels["app.kubernetes.io/managed-by"] == "tfkube"
    quota = kube.core.read_namespaced_resource_quota("tfkube-tenant", team.namespace)
    assert quota.spec.hard == {
        "requests.cpu": "8",
        "requests.memory": str(32 * 2**30),
        "requests.nvidia.com/gpu": "2",
        f"count/{PLURAL}.{GROUP}": "4",
    }
    # Only the team's own pods, tfkube's namespace and the API server (its address, read
    # from the `kubernetes` Service with the server's RBAC) may connect to its pods.
    policy = _network_policy(kube, team.namespace)
    assert policy is not None
    assert policy.spec.pod_selector.match_labels is None  # every pod of the namespace
    assert policy.spec.policy_types == ["Ingress", "Egress"]
    # Out: everywhere but the clouds' metadata services (the server's default).
    (out,) = policy.spec.egress
    blocks = {p.ip_block.cidr: p.ip_block._except for p in out.to if p.ip_block}
    assert blocks == {"0.0.0.0/0": ["169.254.169.254/32"], "::/0": ["fd00:ec2::254/128"]}
    (rule,) = policy.spec.ingress
    peers = [p.to_dict() for p in rule._from]
    assert {"pod_selector": {"match_expressions": None, "match_labels": None},
            "namespace_selector": None, "ip_block": None} in peers  # fmt: skip
    assert any(
        (p["namespace_selector"] or {}).get("match_labels")
        == {"kubernetes.io/metadata.name": OPERATOR_NAMESPACE}
        for p in peers
    ), peers
    # The API servers' own addresses as the `kubernetes` Service lists them (none here: the
    # API server of this control plane listens on loopback, which it does not publish).
    slices = kube.discovery.list_namespaced_endpoint_slice(
        "default", label_selector="kubernetes.io/service-name=kubernetes"
    ).items
    published = sorted(f"{a}/32" for s in slices for e in s.endpoints or [] for a in e.addresses)
    assert sorted(p["ip_block"]["cidr"] for p in peers if p["ip_block"]) == published, peers
    # Pods that ask for nothing still fit a namespace whose quota counts requests.
    limits = kube.core.read_namespaced_limit_range("tfkube-tenant", team.namespace)
    assert limits.spec.limits[0].default_request == {"cpu": "500m", "memory": "512Mi"}
    # A quota change reaches the cluster.
    platform.admin.ok(
        platform.admin.http.patch(
            f"/api/v1/teams/{team.name}",
            json={"quota": {"cpu": 8, "memory": 32 * 2**30, "gpu": 2, "jobs": 5}},
        )
    )
    wait_for(
        "the new quota",
        lambda: (
            kube.core.read_namespaced_resource_quota("tfkube-tenant", team.namespace).spec.hard[
                f"count/{PLURAL}.{GROUP}"
            ]
            == "5"
        ),
        30,
    )


def _network_policy(kube: KubeCluster, namespace: str) -> Any:
    try:
        return client.NetworkingV1Api(kube.api_client).read_namespaced_network_policy(
            "tfkube-tenant", namespace
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_a_starting_server_makes_every_team_ready_again(platform: Platform, team: Team) -> None:
    """An upgrade brings the teams made before it what this version makes: a team
    namespace without its NetworkPolicy (as one made by an older server) has it again
    once the server has started (`tenants.prepare_teams`)."""
    kube = platform.kube
    client.NetworkingV1Api(kube.api_client).delete_namespaced_network_policy(
        "tfkube-tenant", team.namespace
    )
    assert _network_policy(kube, team.namespace) is None
    platform.restart()
    wait_for("the team's NetworkPolicy again",
             lambda: _network_policy(kube, team.namespace) is not None, 30)  # fmt: skip


def test_four_fields_run_as_a_tfjob_in_the_team_namespace(
    platform: Platform, team: Team, outsider: Api
) -> None:
    kube, api = platform.kube, team.member
    job = submit_form(team, name="four", workers=2, ps=1, code="hello")
    assert job["code"] == "hello:1"
    tf = wait_for("the TFJob", lambda: tfjob(kube, team.namespace, "four"), 30)
    code = tf["spec"]["code"]
    assert code["source"] == f"{server_url(NAMESPACE)}/api/v1/code/{job['code_sha256']}"
    assert code["sha256"] == job["code_sha256"]
    assert tf["spec"]["storage"]["logs"]["claimName"] == OUTPUTS
    # The code token: a Secret owned by the TFJob, read by the pods from it, never in a spec.
    secret = kube.core.read_namespaced_secret("four-code-token", team.namespace)
    owner = secret.metadata.owner_references[0]
    assert (owner.kind, owner.name) == ("TFJob", "four")
    token = __import__("base64").b64decode(secret.data["token"]).decode()
    worker = wait_for(
        "the worker Job",
        lambda: next(
            iter(
                kube.batch.list_namespaced_job(
                    team.namespace,
                    label_selector="tfkube.io/job-name=four,tfkube.io/replica-type=worker",
                ).items
            ),
            None,
        ),
        30,
    )
    pod = worker.spec.template.spec
    env = {e.name: e for e in pod.containers[0].env}
    assert env["TFKUBE_CODE_TOKEN"].value_from.secret_key_ref.name == "four-code-token"
    # Kept logs: the team's outputs claim, one folder per job.
    logs = next(m for m in pod.containers[0].volume_mounts if m.name == "logs")
    assert logs.sub_path == "four"
    assert (
        next(v for v in pod.volumes if v.name == "logs").persistent_volume_claim.claim_name
        == OUTPUTS
    )
    # Its data is scratch space in each pod: it asked for no claim (issue 23), so nothing
    # needs binding and no replica waits for one.
    data = next(v for v in pod.volumes if v.name == "data")
    assert data.empty_dir is not None
    assert data.persistent_volume_claim is None
    done = wait_phase(api, job["id"], "Succeeded")
    claims = kube.core.list_namespaced_persistent_volume_claim(team.namespace).items
    assert [c.metadata.name for c in claims] == [OUTPUTS]
    nodes = [*kube.cpu_nodes, *kube.gpu_nodes]
    placed = {r["key"]: r["node"] for r in done["replicas"]}
    assert placed["worker-0"] in nodes, placed  # its pod is kept after the job
    states = {r["key"]: r["state"] for r in done["replicas"]}
    assert states["worker-0"] == states["worker-1"] == "Succeeded"
    assert states["ps-0"] != "Running"
    addresses = {r["key"]: r["address"] for r in done["replicas"]}
    assert addresses["worker-1"] == "four-worker-1.four-worker:2222"
    events = [e["message"] for e in api.ok(api.get(f"/api/v1/jobs/{job['id']}/events"))]
    assert any("submitted" in m for m in events)
    assert any(m.startswith("Succeeded") for m in events), events
    # Listing and filtering read the server's database.
    listed = api.ok(api.get("/api/v1/jobs", params={"team": team.name, "phase": "Succeeded"}))
    assert job["id"] in [j["id"] for j in listed["items"]]
    # Its kept outputs are under its name on the team's claim: the name waits for a delete.
    again = api.post(
        f"/api/v1/teams/{team.name}/jobs", json={"name": "four", "workers": 1, "code": "hello"}
    )
    assert again.status_code == 409
    assert "delete it first" in again.json()["detail"]
    # Another team sees nothing of it.
    for path in ("", "/logs", "/logs/worker-0", "/events", "/outputs", "/scalars"):
        assert outsider.get(f"/api/v1/jobs/{job['id']}{path}").status_code == 404, path
    assert outsider.post(f"/api/v1/jobs/{job['id']}/stop").status_code == 404
    assert job["id"] not in [j["id"] for j in outsider.get("/api/v1/jobs").json()["items"]]
    # The token never leaves the cluster's Secret: not in the TFJob, a Job, or a log.
    assert token not in json.dumps(tfjob(kube, team.namespace, "four"))
    assert token not in json.dumps(kube.api_client.sanitize_for_serialization(worker))
    assert token not in platform.server.log.read_text()
    assert token not in api.get(f"/api/v1/jobs/{job['id']}").text


def test_logs_without_a_kubelet_say_why(platform: Platform, team: Team) -> None:
    """KWOK runs no container: nothing is written to the outputs claim, and the pod log
    API has no kubelet to ask. The answer names the replica and says that."""
    job = submit_manifest(team, manifest("talk"))
    wait_replica(team.member, job["id"], "worker-0", "Running")
    r = team.member.get(f"/api/v1/jobs/{job['id']}/logs/worker-0")
    assert r.status_code == 404
    detail = r.json()["detail"]
    assert "worker-0" in detail
    assert "fake node" in detail
    assert team.member.get(f"/api/v1/jobs/{job['id']}/logs").json() == []
    r = team.member.get(f"/api/v1/jobs/{job['id']}/logs/chief-0")
    assert r.status_code == 404
    assert "chief-0" in r.json()["detail"]
    team.member.ok(team.member.delete(f"/api/v1/jobs/{job['id']}"), 204)


def test_stop_and_delete_leave_nothing(platform: Platform, team: Team) -> None:
    kube, api = platform.kube, team.member
    job = submit_manifest(team, manifest("long"))
    wait_phase(api, job["id"], "Running")
    # A restart of the server loses nothing: the job, its token, its sync.
    platform.restart()
    assert job_of(api, job["id"])["phase"] == "Running"
    api.ok(api.post(f"/api/v1/jobs/{job['id']}/stop"))
    stopped = wait_phase(api, job["id"], "Failed")
    assert stopped["reason"] == "Stopped"
    wait_for(
        "the stopped job's pods to go",
        lambda: (
            not kube.core.list_namespaced_pod(
                team.namespace, label_selector="tfkube.io/job-name=long,tfkube.io/replica-type"
            ).items
        ),
        60,
    )
    assert tfjob(kube, team.namespace, "long") is not None  # stopped jobs stay listed
    api.ok(api.delete(f"/api/v1/jobs/{job['id']}"), 204)
    assert api.get(f"/api/v1/jobs/{job['id']}").status_code == 404
    wait_for("the TFJob to go", lambda: tfjob(kube, team.namespace, "long") is None, 30)
    wait_for("nothing left of it", lambda: not left_of(kube, team.namespace, "long"), 60)


def test_tensorboard_through_the_api_servers_service_proxy(
    platform: Platform, team: Team, outsider: Api
) -> None:
    """The job's TensorBoard Service, reached by the server through the API server's
    service proxy with its own credentials. A KWOK pod cannot serve, so the TensorBoard
    pod is kept from starting (no endpoints) and the API server's own answer proves where
    the request went; RBAC (services/proxy) would have answered 403 instead."""
    api = team.member
    job = submit_manifest(team, manifest("board", tensorboard={"resources": {"cpu": "100"}}))
    wait_for(
        "the TensorBoard Service",
        lambda: (
            platform.kube.core.list_namespaced_service(
                team.namespace, label_selector="tfkube.io/component=tensorboard"
            ).items
        ),
        60,
    )
    base = f"/proxy/tensorboard/{job['id']}"
    for method in ("GET", "POST"):
        r = api.http.request(method, f"{base}/data/plugin/scalars/tags")
        assert r.status_code == 503, (method, r.status_code, r.text)
        assert 'no endpoints available for service \\"board-tensorboard\\"' in r.text or (
            'no endpoints available for service "board-tensorboard"' in r.text
        ), r.text
    assert outsider.get(f"{base}/").status_code == 404
    assert httpx.get(f"{platform.server.url}{base}/").status_code == 401
    plain = submit_manifest(team, manifest("plain"))
    r = api.get(f"/proxy/tensorboard/{plain['id']}/")
    assert r.status_code == 404
    assert "tensorboard" in r.json()["detail"]
    for made in (job, plain):
        api.ok(api.delete(f"/api/v1/jobs/{made['id']}"), 204)


def test_a_notebook_goes_where_the_server_puts_notebooks(
    platform: Platform, team: Team, outsider: Api
) -> None:
    """`tfkube server --notebook-node-selector --notebook-toleration`: the notebook a member
    starts (`POST /api/v1/teams/<team>/notebook`) is a StatefulSet whose pod asks for those
    nodes; its proxy reaches the API server's service proxy (no pod can serve: no node has
    the label), another team's member gets 404; stopped, its objects go and its home
    claim stays. (A notebook answering from a real pod: test_real_node_incluster.py.)"""
    kube, api = platform.kube, team.member
    notebook = api.ok(api.post(f"/api/v1/teams/{team.name}/notebook"))
    name = f"notebook-{notebook['id']}"
    apps = client.AppsV1Api(kube.api_client)
    sts = apps.read_namespaced_stateful_set(name, team.namespace)
    pod = sts.spec.template.spec
    assert pod.node_selector == {"tfkube.io/pool": "notebooks"}
    assert [(t.key, t.operator, t.value, t.effect) for t in pod.tolerations] == [
        ("tfkube.io/pool", "Equal", "notebooks", "NoSchedule")
    ]
    base = f"/proxy/notebook/{notebook['id']}"
    r = api.get(f"{base}/api/status")
    assert r.status_code == 503, r.text
    assert f'no endpoints available for service \\"{name}\\"' in r.text or (
        f'no endpoints available for service "{name}"' in r.text
    ), r.text
    assert outsider.get(f"{base}/api/status").status_code == 404
    home = f"home-{name}-0"
    wait_for("the home claim made by the StatefulSet",
             lambda: kube.core.list_namespaced_persistent_volume_claim(
                 team.namespace, field_selector=f"metadata.name={home}").items, 60)  # fmt: skip
    api.ok(api.post(f"/api/v1/notebooks/{notebook['id']}/stop"))

    reads = {
        "StatefulSet": apps.read_namespaced_stateful_set,
        "Service": kube.core.read_namespaced_service,
        "Secret": kube.core.read_namespaced_secret,
    }
    wait_for("the notebook's objects gone", lambda: not still_there(team.namespace, name, reads))
    kube.core.read_namespaced_persistent_volume_claim(home, team.namespace)  # kept


def test_a_team_the_cluster_refuses_is_not_kept(platform: Platform) -> None:
    """Its namespace is being deleted and stays so (held by a finalizer): the server waits
    for it (`NAMESPACE_GONE_SECONDS`: a namespace being deleted is usually gone in
    seconds, and the team is then made anew, tests/cluster/test_team_namespace.py), then
    answers 502 naming what holds it, and keeps no team (nothing half-made)."""
    kube, admin = platform.kube, platform.admin
    name = f"gone{uuid.uuid4().hex[:6]}"
    namespace = f"tfkube-{name}"
    kube.core.create_namespace(
        client.V1Namespace(
            metadata=client.V1ObjectMeta(name=namespace, finalizers=["tfkube.io/test-hold"])
        )
    )
    kube.core.delete_namespace(namespace)
    try:
        asked = time.monotonic()
        r = admin.post("/api/v1/teams", json={"name": name, "quota": {"cpu": 1}}, timeout=180)
        waited = time.monotonic() - asked
        assert r.status_code == 502, r.text
        detail = r.json()["detail"]
        assert f"namespace {namespace} has been being deleted" in detail, detail
        assert "tfkube.io/test-hold" in detail, detail
        assert waited >= NAMESPACE_GONE_SECONDS, waited
        assert name not in [t["name"] for t in admin.ok(admin.get("/api/v1/teams"))]
    finally:
        kube.core.patch_namespace(namespace, {"metadata": {"finalizers": None}})


def test_cli_install_server_dry_run(platform: Platform) -> None:
    """`tfkube install --server --dry-run` as a user runs it: every object is checked by
    the API server, nothing is stored (the module's fixture installed it for real)."""
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tfkube",
            "install",
            "--server",
            "--outputs-claim",
            OUTPUTS,
            "--data-claim",
            SERVER_DATA_CLAIM,
            "--dry-run",
            "--kubeconfig",
            str(platform.kube.kubeconfig),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    said = " ".join(proc.stdout.split())
    for line in (
        f"ClusterRole {SERVER_NAME}: validated",
        f"Deployment {NAMESPACE}/{SERVER_NAME}: validated",
        f"Service {NAMESPACE}/{SERVER_NAME}: validated",
        # What it does about storage, said before anything is applied.
        "storage: a job gets a claim only when it asks for one",
        "storage: this cluster has no default StorageClass",
        f"storage: warning: the claim {SERVER_DATA_CLAIM} in namespace {NAMESPACE} (its data "
        "folder) does not exist yet: the server's pod waits (Pending)",
    ):
        assert line in said, proc.stdout
    assert "PersistentVolumeClaim" not in proc.stdout  # the administrator's claim: none made
    deployments = client.AppsV1Api(platform.kube.api_client).list_namespaced_deployment(
        NAMESPACE, label_selector="app.kubernetes.io/component=server"
    )
    assert deployments.items == []  # a dry run stores nothing


def test_cli_install_server_without_storage_is_refused_and_says_what_to_give(
    platform: Platform,
) -> None:
    """This cluster has no StorageClass at all: the server's data claim would stay Pending
    and the server never start. `tfkube install --server` says so and applies nothing
    (issue 23: never a Pending pod without a word); a StorageClass that does not exist is
    refused the same way."""
    import subprocess
    import sys

    def install_cli(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tfkube", "install", "--server", *extra,
             "--kubeconfig", str(platform.kube.kubeconfig)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    apps = client.AppsV1Api(platform.kube.api_client)
    before = apps.read_namespaced_deployment("tfkube-operator", NAMESPACE).metadata
    refused = install_cli()
    assert refused.returncode == 1, refused.stdout + refused.stderr
    said = " ".join(refused.stderr.split())
    for words in (
        "nothing was installed",
        f"no default StorageClass, so the server's data claim {SERVER_DATA_CLAIM} would "
        "never be bound",
        "never an emptyDir",
        "--storage-class NAME (StorageClasses: none)",
        f"--data-claim NAME: a claim you made in namespace {NAMESPACE}",
    ):
        assert words in said, refused.stderr
    missing = install_cli("--storage-class", "fast")
    assert missing.returncode == 1
    assert "--storage-class fast: this cluster has no such StorageClass" in " ".join(
        missing.stderr.split()
    ), missing.stderr
    # Nothing was applied: no server Deployment, the operator's untouched.
    assert not apps.list_namespaced_deployment(
        NAMESPACE, label_selector="app.kubernetes.io/component=server"
    ).items
    after = apps.read_namespaced_deployment("tfkube-operator", NAMESPACE).metadata
    assert after.resource_version == before.resource_version


def test_scale_through_the_api_on_kubernetes(platform: Platform, team: Team) -> None:
    """`POST /api/v1/jobs/{id}/scale`, the same route and service as on the local engine
    (the engine protocol's `scale`): the operator resizes the worker Job, the job's
    replicas, spec and timeline follow; a job without PS is refused naming the field."""
    kube, api = platform.kube, team.member
    job = submit_manifest(team, manifest("elastic"))
    wait_replica(api, job["id"], "worker-0", "Running")
    out = api.ok(api.post(f"/api/v1/jobs/{job['id']}/scale", json={"workers": 3}))
    assert [r["key"] for r in out["replicas"] if r["role"] == "worker"] == [
        "worker-0",
        "worker-1",
        "worker-2",
    ]
    assert kube.batch.read_namespaced_job("elastic-worker", team.namespace).spec.completions == 3
    assert (tfjob(kube, team.namespace, "elastic") or {})["status"]["workers"] == 3
    wait_replica(api, job["id"], "worker-2", "Running")
    out = api.ok(api.post(f"/api/v1/jobs/{job['id']}/scale", json={"workers": 1}))
    assert [r["key"] for r in out["replicas"] if r["role"] == "worker"] == ["worker-0"]
    assert out["restarts"] == 0
    events = [e["message"] for e in api.ok(api.get(f"/api/v1/jobs/{job['id']}/events"))]
    assert any("scaled the job from 1 to 3 workers through the server" in m for m in events)
    assert any("scaled the job from 3 to 1 workers through the server" in m for m in events)

    plain = manifest("fixed")
    del plain["spec"]["replicas"]["ps"]
    fixed = submit_manifest(team, plain)
    wait_phase(api, fixed["id"], "Running")
    refused = api.post(f"/api/v1/jobs/{fixed['id']}/scale", json={"workers": 2})
    assert refused.status_code == 422, refused.text
    assert "spec.replicas.ps" in refused.text
    for one in (job, fixed):
        api.ok(api.delete(f"/api/v1/jobs/{one['id']}"), 204)


PREEMPT_POOL = "tfkube.io/preempt-pool"


def _pooled(job: dict[str, Any], pool: str, cpu: str) -> dict[str, Any]:
    for spec in job["spec"]["replicas"].values():
        spec["nodeSelector"] = {PREEMPT_POOL: pool}
        spec["tolerations"] = [{"key": PREEMPT_POOL, "operator": "Exists", "effect": "NoSchedule"}]
        spec["resources"] = {"cpu": cpu}
    return job


def test_team_priorities_preempt_and_the_preempted_job_resumes(
    platform: Platform, operator_kubeconfig: Path
) -> None:
    """Two teams of priority 1 and 5 (a site admin's PATCH: their PriorityClasses are made
    and their jobs' pods get them); the low team's job fills a 2-CPU node kept for this
    test, the high team's job needs all of it: the scheduler preempts the low job, which
    the server shows as 1 preemption and 0 restarts (API, timeline, job page, /metrics)
    and which succeeds after the high job."""
    kube, admin = platform.kube, platform.admin
    pool = f"p{uuid.uuid4().hex[:8]}"
    node = f"tfkube-{pool}"
    manifest_of: dict[str, Any] = (
        load_cluster_module().NodeSpec(node, "127.0.5.9", cpu="2").manifest()
    )
    manifest_of["metadata"]["labels"][PREEMPT_POOL] = pool
    manifest_of["spec"]["taints"] = [{"key": PREEMPT_POOL, "value": pool, "effect": "NoSchedule"}]
    kube.core.create_node(manifest_of)
    scheduling = client.SchedulingV1Api(kube.api_client)
    try:
        with (
            operated_team(platform, operator_kubeconfig, {"run.sh": RUN_SH}) as low,
            operated_team(platform, operator_kubeconfig, {"run.sh": RUN_SH}) as high,
        ):
            for team, priority in ((low, 1), (high, 5)):
                admin.ok(admin.patch(f"/api/v1/teams/{team.name}", json={"priority": priority}))
                allowances = f"/api/v1/teams/{team.name}/allowances"
                admin.ok(admin.http.put(allowances, json={"toleration_keys": [PREEMPT_POOL]}))
            assert scheduling.read_priority_class("tfkube-priority-5").value == 5

            slow = manifest("slow", runPolicy={"backoffLimit": 0})
            slow["spec"]["replicas"]["worker"].update(
                replicas=2, annotations={"tfkube.io/fake-duration": "20s"}
            )
            low_job = submit_manifest(low, _pooled(slow, pool, "500m"))
            for key in ("ps-0", "worker-0", "worker-1"):
                wait_replica(low.member, low_job["id"], key, "Running")
            spec = (tfjob(kube, low.namespace, "slow") or {})["spec"]
            assert spec["scheduling"]["priorityClassName"] == "tfkube-priority-1"

            urgent = manifest("urgent")
            urgent["spec"]["replicas"] = {
                "worker": {"replicas": 1, "annotations": {"tfkube.io/fake-duration": "10s"}}
            }
            high_job = submit_manifest(high, _pooled(urgent, pool, "2"))
            api = low.member

            def preempted() -> dict[str, Any] | None:
                seen = job_of(api, low_job["id"])
                return seen if seen["preemptions"] else None

            seen = wait_for("the server shows the preemption", preempted, 60)
            assert seen["preemptions"] == 1
            assert seen["restarts"] == 0
            timeline = [
                e["message"] for e in api.ok(api.get(f"/api/v1/jobs/{low_job['id']}/events"))
            ]
            assert any("preempted by the scheduler" in m for m in timeline), timeline
            browser, _ = login(platform.server.url, api.name)  # the page: a cookie session
            try:
                page = browser.get(f"/jobs/{low_job['id']}/part/summary")
            finally:
                browser.close()
            assert page.status_code == 200, page.text[:500]
            assert "<dt>Preempted</dt><dd" in page.text

            done = wait_phase(high.member, high_job["id"], "Succeeded", "Failed", timeout=90)
            assert done["phase"] == "Succeeded", done
            done = wait_phase(api, low_job["id"], "Succeeded", "Failed", timeout=120)
            assert done["phase"] == "Succeeded", done
            assert done["preemptions"] == 1
            assert done["restarts"] == 0
            metrics = admin.get("/metrics").text
            assert f'tfkube_job_preemptions{{team="{low.name}"}} 1.0' in metrics
    finally:
        kube.core.delete_node(node)
        for priority in (1, 5):
            with contextlib.suppress(ApiException):
                scheduling.delete_priority_class(f"tfkube-priority-{priority}")
