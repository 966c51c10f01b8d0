"""Kubernetes admission: what a team's member may make the cluster do, against the real
control plane, through a real `tfkube server --engine kubernetes` (the set-up of
tests/cluster/test_server_kubernetes.py: the server with the RBAC `tfkube install --server`
gives it, a team whose namespace the server made).

Each attack below was accepted by the server before tfkube had an admission policy (the
job's TFJob was created, its pods would have mounted what it named); now each is refused
with a 422 naming the field and the fix, and nothing at all is created in the namespace:

- a member's job reading the Secret that holds a notebook owner's full API token (here the
  site admin's), by env `secretKeyRef`, a secret volume, a helper container's env or an
  image-pull secret; another Secret of the namespace; a ServiceAccount; `spec.tenant`
  (the namespace's quota objects); a TensorBoard image that is not the default; a
  scheduler other than the cluster's default, or a Volcano queue other than `default`;
- a team admin's allowance lets the Secret it names through (and a platform credential
  can never be allowed);
- Kubernetes itself refuses a privileged or root pod in a team namespace: the namespace
  carries `pod-security.kubernetes.io/enforce: restricted` (tfkube's rendered workloads
  all pass it: tests/unit/test_pod_security.py, and the dry runs below).
"""

from __future__ import annotations

import base64
import copy
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cluster import test_server_kubernetes as on_kube
from cluster._support import KubeCluster, wait_for
from cluster.test_operator import tfjob
from server._server import Api, api_for

kube_platform = on_kube.platform
"""The server on the kubernetes engine (test_server_kubernetes.py's module fixture, here
for this module)."""

DB_SECRET = "team-db-password"
"""A Secret a cluster administrator keeps in the team's namespace (not for every member)."""
SERVICE_ACCOUNT = "deployer"


class Tenant:
    """A team of the server: a member, a team admin, its namespace (made by the server)."""

    def __init__(self, platform: on_kube.Platform) -> None:
        self.team = on_kube.Team(platform, {"cpu": 8, "memory": 32 * 2**30, "jobs": 10})
        self.platform = platform
        self.name, self.namespace = self.team.name, self.team.namespace
        self.member = self.team.member
        admin_name = platform.admin.new_user()
        platform.admin.add_member(self.name, admin_name, "admin")
        self.admin = api_for(platform.server.url, admin_name)

    def close(self) -> None:
        self.admin.close()
        self.team.close()


@pytest.fixture(scope="module")
def tenant(kube_platform: on_kube.Platform) -> Iterator[Tenant]:
    made = Tenant(kube_platform)
    kube = kube_platform.kube
    kube.core.create_namespaced_secret(
        made.namespace,
        client.V1Secret(metadata=client.V1ObjectMeta(name=DB_SECRET), string_data={"url": "pg"}),
    )
    kube.core.create_namespaced_service_account(
        made.namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=SERVICE_ACCOUNT))
    )
    made.member.ok(
        made.member.post(
            f"/api/v1/teams/{made.name}/artifacts",
            params={"name": "hello", "filename": "code.tar.gz"},
            content=on_kube._targz({"run.sh": on_kube.RUN_SH}),
            headers={"Content-Type": "application/octet-stream"},
        ),
        201,
    )
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(scope="module")
def notebook_secret(kube_platform: on_kube.Platform, tenant: Tenant) -> str:
    """The site admin's notebook in the team: its Secret holds an API token of the admin's,
    limited to the team since migration 0014 (site-wide calls 403) but with the admin's
    role there: still worth stealing for a member's job."""
    admin = kube_platform.admin
    notebook = admin.ok(admin.post(f"/api/v1/teams/{tenant.name}/notebook"))
    name = f"notebook-{notebook['id']}"
    secret = kube_platform.kube.core.read_namespaced_secret(name, tenant.namespace)
    token = base64.b64decode(secret.data["TFKUBE_TOKEN"]).decode()
    stolen = Api(kube_platform.server.url, token, "stolen")
    try:  # what a member's job would hold: the site admin's token in the team
        assert stolen.get("/api/v1/jobs", params={"team": tenant.name}).status_code == 200
        assert stolen.get("/api/v1/users").status_code == 403
    finally:
        stolen.close()
    return name


def in_namespace(kube: KubeCluster, namespace: str) -> set[str]:
    """Everything a submit could make in the namespace (kind/name)."""
    custom = client.CustomObjectsApi(kube.api_client)
    found = {
        f"TFJob/{t['metadata']['name']}"
        for t in custom.list_namespaced_custom_object("tfkube.io", "v1alpha1", namespace, "tfjobs")[
            "items"
        ]
    }
    core, batch = kube.core, kube.batch
    for kind, items in (
        ("Secret", core.list_namespaced_secret(namespace).items),
        ("ConfigMap", core.list_namespaced_config_map(namespace).items),
        ("Pod", core.list_namespaced_pod(namespace).items),
        ("Service", core.list_namespaced_service(namespace).items),
        ("PersistentVolumeClaim", core.list_namespaced_persistent_volume_claim(namespace).items),
        ("ResourceQuota", core.list_namespaced_resource_quota(namespace).items),
        ("LimitRange", core.list_namespaced_limit_range(namespace).items),
        ("Job", batch.list_namespaced_job(namespace).items),
    ):
        found |= {f"{kind}/{o.metadata.name}" for o in items}
    return found


def job(name: str, **spec: Any) -> dict[str, Any]:
    worker: dict[str, Any] = {"replicas": 1, **spec.pop("worker", {})}
    return {
        "apiVersion": "tfkube.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {"replicas": {"worker": worker}, "code": {"source": "artifact:hello"}, **spec},
    }


def submit(api: Api, team: str, manifest: dict[str, Any]) -> Any:
    return api.post(f"/api/v1/teams/{team}/jobs", json={"manifest": yaml.safe_dump(manifest)})


def assert_refused(
    platform: on_kube.Platform, tenant: Tenant, manifest: dict[str, Any], field: str
) -> str:
    """The member's job is refused with a 422 naming `field`, and nothing was made."""
    before = in_namespace(platform.kube, tenant.namespace)
    r = submit(tenant.member, tenant.name, manifest)
    name = manifest["metadata"]["name"]
    if r.status_code == 201:  # the attack went through: clean up for the next one
        tenant.member.delete(f"/api/v1/jobs/{r.json()['id']}")
    assert r.status_code == 422, f"{field}: {r.status_code} {r.text[:300]}"
    fields = [e["field"] for e in r.json()["errors"]]
    assert field in fields, r.json()
    assert tfjob(platform.kube, tenant.namespace, name) is None
    assert in_namespace(platform.kube, tenant.namespace) == before
    jobs = tenant.member.ok(tenant.member.get("/api/v1/jobs", params={"team": tenant.name}))
    assert name not in [j["name"] for j in jobs["items"]]
    return str(next(e["message"] for e in r.json()["errors"] if e["field"] == field))


def _secret_references(secret: str) -> list[Any]:
    """A job reading `secret` every way a TFJob can name one: -> (id, manifest, field)."""
    return [
        pytest.param(
            job(
                "by-env",
                worker={"env": {"STOLEN": {"secretKeyRef": {"name": secret, "key": "TOKEN"}}}},
            ),
            "spec.replicas.worker.env.STOLEN.secretKeyRef.name",
            id="env-secretKeyRef",
        ),
        pytest.param(
            job(
                "by-volume",
                worker={"volumes": [{"name": "stolen", "mountPath": "/s", "secret": secret}]},
            ),
            "spec.replicas.worker.volumes[0].secret",
            id="secret-volume",
        ),
        pytest.param(
            job(
                "by-sidecar",
                worker={
                    "sidecars": [
                        {
                            "name": "ship",
                            "image": "busybox",
                            "env": {"T": {"secretKeyRef": {"name": secret, "key": "TOKEN"}}},
                        }
                    ]
                },
            ),
            "spec.replicas.worker.sidecars[0].env.T.secretKeyRef.name",
            id="sidecar-env",
        ),
        pytest.param(
            job("by-pull", imagePullSecrets=[secret]),
            "spec.imagePullSecrets[0]",
            id="image-pull-secret",
        ),
    ]


@pytest.mark.parametrize(("manifest", "field"), _secret_references("NOTEBOOK"))
def test_a_members_job_cannot_read_a_notebook_token(
    kube_platform: on_kube.Platform,
    tenant: Tenant,
    notebook_secret: str,
    manifest: dict[str, Any],
    field: str,
) -> None:
    text = yaml.safe_dump(manifest).replace("NOTEBOOK", notebook_secret)
    message = assert_refused(kube_platform, tenant, yaml.safe_load(text), field)
    assert "platform" in message, message


@pytest.mark.parametrize(("manifest", "field"), _secret_references(DB_SECRET))
def test_a_members_job_cannot_read_a_secret_nobody_allowed(
    kube_platform: on_kube.Platform, tenant: Tenant, manifest: dict[str, Any], field: str
) -> None:
    message = assert_refused(kube_platform, tenant, manifest, field)
    assert "team admin" in message, message


def admitted(
    platform: on_kube.Platform, tenant: Tenant, manifest: dict[str, Any]
) -> dict[str, Any]:
    """The member's job goes through: its TFJob as made; then the job is deleted and its
    objects waited out (the next check starts from an empty namespace)."""
    kube, member, name = platform.kube, tenant.member, manifest["metadata"]["name"]
    made = member.ok(submit(member, tenant.name, manifest), 201)
    created: dict[str, Any] = wait_for("the TFJob", lambda: tfjob(kube, tenant.namespace, name), 30)
    member.ok(member.delete(f"/api/v1/jobs/{made['id']}"), 204)
    wait_for(
        f"the deleted job {name}'s objects to go",
        lambda: not any(name in o for o in in_namespace(kube, tenant.namespace)),
        60,
    )
    return created


@pytest.mark.parametrize(
    ("manifest", "field"),
    [
        pytest.param(
            job("as-deployer", worker={"serviceAccountName": SERVICE_ACCOUNT}),
            "spec.replicas.worker.serviceAccountName",
            id="service-account",
        ),
        pytest.param(
            job("quota", tenant={"quota": {"requests.cpu": "1000"}}),
            "spec.tenant",
            id="tenant-objects",
        ),
        pytest.param(
            job("board", tensorboard={"image": "evil.example/board:1"}),
            "spec.tensorboard.image",
            id="tensorboard-image",
        ),
        pytest.param(
            job("board-default", image="evil.example/train:1", tensorboard={}),
            "spec.tensorboard.image",
            id="tensorboard-of-the-jobs-image",
        ),
        pytest.param(
            job(
                "config",
                worker={
                    "env": {"C": {"configMapKeyRef": {"name": "kube-root-ca.crt", "key": "x"}}}
                },
            ),
            "spec.replicas.worker.env.C.configMapKeyRef.name",
            id="config-map",
        ),
        pytest.param(
            job("claim", worker={"volumes": [{"name": "d", "mountPath": "/d", "claimName": "x"}]}),
            "spec.replicas.worker.volumes[0].claimName",
            id="claim",
        ),
        pytest.param(
            job("critical", scheduling={"priorityClassName": "system-cluster-critical"}),
            "spec.scheduling.priorityClassName",
            id="priority-preempting-other-teams",
        ),
        pytest.param(
            # A team's own priority is a site admin's: its class is given by the server,
            # and naming another (a higher team's) is refused like any other class.
            job("jump", scheduling={"priorityClassName": "tfkube-priority-1000"}),
            "spec.scheduling.priorityClassName",
            id="priority-above-the-teams-own",
        ),
        pytest.param(
            job("squat", worker={"tolerations": [{"key": "dedicated", "operator": "Exists"}]}),
            "spec.replicas.worker.tolerations[0].key",
            id="toleration-of-anothers-pool",
        ),
    ],
)
def test_a_members_job_cannot_use_what_nobody_allowed(
    kube_platform: on_kube.Platform, tenant: Tenant, manifest: dict[str, Any], field: str
) -> None:
    assert_refused(kube_platform, tenant, manifest, field)


def test_a_team_admins_allowance_lets_the_named_secret_through(
    kube_platform: on_kube.Platform, tenant: Tenant, notebook_secret: str
) -> None:
    kube, member, admin = kube_platform.kube, tenant.member, tenant.admin
    path = f"/api/v1/teams/{tenant.name}/allowances"
    assert member.ok(member.get(path))["secrets"] == []
    # Members read the allowances, only admins change them.
    r = member.http.put(path, json={"secrets": [DB_SECRET]})
    assert r.status_code == 403, r.text
    # A platform credential can never be allowed, not even by a prefix.
    for entry in (notebook_secret, "notebook-*", "*"):
        r = admin.http.put(path, json={"secrets": [entry]})
        assert r.status_code == 422, (entry, r.text)
        assert r.json()["errors"][0]["field"] == "secrets[0]", r.json()
    allowed = admin.ok(admin.http.put(path, json={"secrets": [DB_SECRET]}))
    assert allowed["secrets"] == [DB_SECRET]
    manifest = job(
        "allowed",
        worker={
            "env": {"DB": {"secretKeyRef": {"name": DB_SECRET, "key": "url"}}},
            "annotations": {"tfkube.io/fake-duration": "600s"},
        },
    )
    made = member.ok(submit(member, tenant.name, manifest), 201)
    created = wait_for("the TFJob", lambda: tfjob(kube, tenant.namespace, "allowed"), 30)
    env = created["spec"]["replicas"]["worker"]["env"]
    assert env["DB"] == {"secretKeyRef": {"name": DB_SECRET, "key": "url", "optional": False}}
    member.ok(member.delete(f"/api/v1/jobs/{made['id']}"), 204)
    # The job's own objects (its code token's Secret) go with the TFJob by Kubernetes'
    # garbage collector, a moment after the delete: let it finish before the next count.
    wait_for(
        "the deleted job's objects to go",
        lambda: not any("allowed" in o for o in in_namespace(kube, tenant.namespace)),
        60,
    )
    # Allowed for the member does not reach the notebook's Secret.
    manifest = job(
        "still-not",
        worker={"env": {"T": {"secretKeyRef": {"name": notebook_secret, "key": "TFKUBE_TOKEN"}}}},
    )
    assert_refused(kube_platform, tenant, manifest, "spec.replicas.worker.env.T.secretKeyRef.name")
    # The team admin's own jobs may use the namespace's objects, never a platform credential.
    r = submit(admin, tenant.name, manifest)
    assert r.status_code == 422, r.text
    admin.ok(admin.http.put(path, json={}))


def test_priority_and_tolerations_are_a_site_admins_to_allow(
    kube_platform: on_kube.Platform, tenant: Tenant
) -> None:
    """A PriorityClass preempts other teams' pods, a toleration lands on nodes a taint
    keeps for others: a team admin can neither use them nor allow them; a site admin can
    allow them for the team, and then a member's job runs with them."""
    kube, admin, site = kube_platform.kube, tenant.admin, kube_platform.admin
    path = f"/api/v1/teams/{tenant.name}/allowances"
    for body in ({"priority_classes": ["system-cluster-critical"]}, {"toleration_keys": ["*"]}):
        r = admin.http.put(path, json=body)
        assert r.status_code == 403, (body, r.text)
    placed = {
        "scheduling": {"priorityClassName": "system-cluster-critical"},
        "worker": {
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
            "annotations": {"tfkube.io/fake-duration": "600s"},
        },
    }
    r = submit(admin, tenant.name, job("placed", **copy.deepcopy(placed)))
    assert r.status_code == 422, r.text
    assert {e["field"] for e in r.json()["errors"]} == {
        "spec.scheduling.priorityClassName",
        "spec.replicas.worker.tolerations[0].key",
    }
    assert tfjob(kube, tenant.namespace, "placed") is None
    allow = {"priority_classes": ["system-cluster-critical"], "toleration_keys": ["dedicated"]}
    site.ok(site.http.put(path, json=allow))
    try:
        created = admitted(kube_platform, tenant, job("placed", **copy.deepcopy(placed)))
        assert created["spec"]["scheduling"]["priorityClassName"] == "system-cluster-critical"
    finally:
        site.ok(site.http.put(path, json={}))


def test_a_scheduler_and_a_volcano_queue_are_a_site_admins_to_allow(
    kube_platform: on_kube.Platform, tenant: Tenant
) -> None:
    """A scheduler places and preempts pods by its own rules, for every team; a Volcano
    queue (cluster-scoped) is its owners' share of the cluster. Before, a member's job
    named either and went through (the TFJob was made, its pods sent to that scheduler or
    queue); now a member or team admin is refused, naming the field, with nothing made,
    and a site admin can allow them for the team."""
    kube, member, admin, site = kube_platform.kube, tenant.member, tenant.admin, kube_platform.admin
    path = f"/api/v1/teams/{tenant.name}/allowances"
    named = {"scheduling": {"schedulerName": "team-scheduler"}}
    assert_refused(kube_platform, tenant, job("sched", **named), "spec.scheduling.schedulerName")
    for body in ({"schedulers": ["team-scheduler"]}, {"volcano_queues": ["*"]}):
        r = admin.http.put(path, json=body)
        assert r.status_code == 403, (body, r.text)
    r = submit(admin, tenant.name, job("sched", **copy.deepcopy(named)))
    assert r.status_code == 422, r.text
    # A gang's own scheduler is one too, and Volcano's queue is checked beside it.
    queued = {"scheduling": {"gang": "Volcano", "queue": "other-teams-share"}}
    r = submit(member, tenant.name, job("queued", **queued))
    assert r.status_code == 422, r.text
    assert {e["field"] for e in r.json()["errors"]} == {
        "spec.scheduling.gang",
        "spec.scheduling.queue",
    }, r.json()
    assert tfjob(kube, tenant.namespace, "queued") is None
    # The cluster's default scheduler, named, stays free.
    default = {"scheduling": {"schedulerName": "default-scheduler"}}
    assert admitted(kube_platform, tenant, job("plain", **default))
    site.ok(site.http.put(path, json={"schedulers": ["team-*"]}))
    try:
        created = admitted(kube_platform, tenant, job("sched", **copy.deepcopy(named)))
        assert created["spec"]["scheduling"]["schedulerName"] == "team-scheduler"
    finally:
        site.ok(site.http.put(path, json={}))


def test_a_team_namespace_refuses_privileged_and_root_pods(
    kube_platform: on_kube.Platform, tenant: Tenant
) -> None:
    """Kubernetes' own Pod Security admission, in the namespace the server made: whatever
    creates a pod there (an operator, a controller, someone with kubectl), a privileged
    or root pod is refused; a pod as tfkube renders its workloads is admitted."""
    kube = kube_platform.kube
    labels = kube.core.read_namespace(tenant.namespace).metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"

    def pod(name: str, pod_security: dict[str, Any], container: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "securityContext": pod_security,
                "containers": [{"name": "c", "image": "busybox", **container}],
            },
        }

    restricted = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    non_root = {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    refused = {
        "privileged": pod("privileged", non_root, {"securityContext": {"privileged": True}}),
        "root": pod(
            "root",
            {"runAsUser": 0, "seccompProfile": {"type": "RuntimeDefault"}},
            {"securityContext": restricted},
        ),
        "host-path": pod("host-path", non_root, {"securityContext": restricted}),
    }
    refused["host-path"]["spec"]["volumes"] = [{"name": "h", "hostPath": {"path": "/etc"}}]
    for what, body in refused.items():
        with pytest.raises(ApiException) as caught:
            kube.core.create_namespaced_pod(tenant.namespace, body, dry_run="All")
        assert caught.value.status == 403, (what, caught.value.body)
        assert "violates PodSecurity" in caught.value.body, (what, caught.value.body)
    fine = pod("fine", non_root, {"securityContext": restricted})
    kube.core.create_namespaced_pod(tenant.namespace, fine, dry_run="All")


def test_every_rendered_workload_is_admitted_under_restricted(
    kube_platform: on_kube.Platform, tenant: Tenant, tmp_path: Path
) -> None:
    """The pod templates tfkube renders (a job using every option a member may use, its
    TensorBoard, both model server runtimes, a notebook), created as pods (dry run) in the
    team's namespace: Kubernetes' Pod Security admission admits every one."""
    from tfkube.render import (
        ModelServerSpec,
        NotebookSpec,
        RenderOptions,
        ServingRuntime,
        render_job,
        render_model_server,
        render_notebook,
    )
    from tfkube.spec import parse_job

    spec = job(
        "every",
        image="evil.example/train:1",
        tensorboard={"image": "tensorflow/tensorflow:2.21.0"},
        worker={
            "replicas": 2,
            "env": {"DB": {"secretKeyRef": {"name": DB_SECRET, "key": "url"}}},
            "volumes": [{"name": "scratch", "mountPath": "/scratch", "emptyDir": {}}],
            "initContainers": [{"name": "fetch", "image": "busybox", "command": ["true"]}],
            "sidecars": [{"name": "ship", "image": "busybox", "command": ["sleep", "1"]}],
        },
        runPolicy={"stallSeconds": 60},
    )
    spec["spec"]["replicas"]["ps"] = {"replicas": 1}
    spec["spec"]["code"] = {"source": "https://x.example/c.tar.gz"}
    parsed = parse_job(spec, "test")
    ns = tenant.namespace
    labels = kube_platform.kube.core.read_namespace(ns).metadata.labels or {}
    assert labels.get("pod-security.kubernetes.io/enforce") == "restricted"
    objects = render_job(parsed, RenderOptions(namespace=ns, managed=True))
    objects += render_model_server(ModelServerSpec("m", ns, parsed))
    objects += render_model_server(ModelServerSpec("n", ns, parsed, runtime=ServingRuntime.TFKUBE))
    objects += render_notebook(
        NotebookSpec("abc", ns, "u", tenant.name, "/proxy/notebook/abc/", "http://s", "j", "t")
    )
    workloads = [o for o in objects if o["kind"] in {"Job", "Deployment", "StatefulSet"}]
    assert len(workloads) == 6  # ps, worker, TensorBoard, two model servers, a notebook
    for workload in workloads:
        pod_spec = dict(workload["spec"]["template"]["spec"])
        for claim in workload["spec"].get("volumeClaimTemplates", []):  # what the
            # StatefulSet controller adds to its pods
            name = claim["metadata"]["name"]
            pod_spec["volumes"] = [
                *pod_spec.get("volumes", []),
                {"name": name, "persistentVolumeClaim": {"claimName": f"{name}-x-0"}},
            ]
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{workload['metadata']['name']}-{uuid.uuid4().hex[:4]}"},
            "spec": pod_spec,
        }
        kube_platform.kube.core.create_namespaced_pod(ns, body, dry_run="All")
