"""A trained model served by tfkube's model server in a real pod, the way a team does it.

The platform as a platform team runs it (test_server_kubernetes.py's set-up): `tfkube
install --server`'s RBAC, `tfkube server --engine kubernetes` as a process here with the
`tfkube-server` ServiceAccount's token, and `tfkube operator` for the team's namespace with
the operator's. Here the server listens on the real node's bridge address (198.19.N.1, a
network the harness made), so replicas on the node fetch their code from it. The team's
outputs claim is a hostPath volume on the real node, and the server sees the same folder
at `<data-dir>/teams/<team>/outputs` (what an administrator's mount of the claim gives).

Then, as a user: upload the between-graph example, submit it placed on the real node (its
label and taint, no CPU requests: 2 cores), it trains in real pods and exports a
SavedModel; `tfkube serve --engine server --runtime tfkube` starts tfkube's model server
in tfkube's image (built here by tools/kube/images.py, imported by the node) as a
Deployment placed like the job's replicas; held-out digits are POSTed to `:predict`
through the API server's service proxy and through the tfkube server's proxy, and the
answers are TensorFlow Serving's; `tfkube serving stop` removes its objects. Then
(issue 20 point 5) a model server rolls to another version under load: two clients, one
through the server's proxy and one in a pod through the Service's ClusterIP, see no failed
request while the answers switch versions. Last (issue 20 point 5 too), an autoscaled
model server scales with its load: clients in a pod drive its CPU past the target, the
HorizontalPodAutoscaler (reading metrics-server's pod metrics) adds a second replica,
and once they stop it goes back to one, no request failed. The job is trained once for
the module.

The stock `tensorflow/serving` image cannot be pulled or built here: that runtime is only
checked by server-side dry run (test_serving_dry_run.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from server._jupyter import run_cell
from server._server import (
    Api,
    ServerProc,
    api_for,
    first_admin,
    free_port,
    through_grpc,
    token_for,
)
from tfkube.engines.kubernetes import install
from tfkube.kube.errors import ApiError
from tfkube.kube.resources import CONFIG_MAP, DEPLOYMENT, HORIZONTAL_POD_AUTOSCALER, SERVICE
from tfkube.kube.rest import Kube
from tfkube.render import OPERATOR_IMAGE, OPERATOR_NAMESPACE, SERVER_NAME, ServerInstall
from tfkube.render._server import SERVER_DATA_CLAIM

from ._support import (
    REPO,
    KubeCluster,
    Operator,
    RealNode,
    create_shared_claim,
    placed_manifest,
    service_account_kubeconfig,
    upload_code,
    wait_for,
)

OUTPUTS = "team-outputs"
JOB = "digits"
JOB_TIMEOUT = 420.0
EXAMPLE = REPO / "examples" / "mnist-between-graph"


@dataclass
class NodeServer(ServerProc):
    """`tfkube server` listening on the real node's bridge address instead of loopback."""

    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@dataclass
class Team:
    name: str
    namespace: str
    member: Api
    server: NodeServer
    kube: KubeCluster
    node: RealNode
    env: dict[str, str]
    """A user's environment for the CLI: the server's URL, the member's token, the team."""
    admin: Api | None = None
    """The site admin (`/metrics`)."""
    grpc: str | None = None
    """`host:port` of the server's gRPC door (`--grpc-port`), when it has one."""


@contextlib.contextmanager
def node_platform(
    kube: KubeCluster,
    real_node: RealNode,
    operator_kubeconfig: Path,
    tmp: Path,
    outputs: bool,
    server_args: tuple[str, ...] = (),
    operator_env: dict[str, str] | None = None,
) -> Iterator[Team]:
    """The platform with its server listening on the real node's bridge, a team allowed on
    the node with a member and the operator, and the example uploaded as `mnist`.
    `outputs`: the team's outputs claim on a node folder the server sees (else none: the
    replicas ship what the server keeps); `server_args`: more of `tfkube server`'s."""
    outputs_claim = OUTPUTS if outputs else None
    # No StorageClass here: the server's data claim is one an administrator names (the
    # server runs here, so it is never made).
    install(
        kube.api_client,
        server=ServerInstall(outputs_claim=outputs_claim, data_claim=SERVER_DATA_CLAIM),
    )
    # The server runs here, not in its Deployment (whose pod would be a KWOK fake).
    with contextlib.suppress(ApiException):  # a module before removed it
        client.AppsV1Api(kube.api_client).delete_namespaced_deployment(
            SERVER_NAME, OPERATOR_NAMESPACE
        )
    kubeconfig = service_account_kubeconfig(
        kube, SERVER_NAME, OPERATOR_NAMESPACE, tmp / "server.kubeconfig"
    )
    port = free_port()
    code_url = f"http://{real_node.node_ip}:{port}"
    extra = ["--host", real_node.node_ip, "--engine", "kubernetes", "--kubeconfig",
             str(kubeconfig), "--code-url", code_url]  # fmt: skip
    if outputs_claim:
        extra += ["--outputs-claim", outputs_claim]
    extra += server_args
    server = NodeServer(
        tmp / "data",
        port,
        None,
        {**os.environ, "TFKUBE_HOME": str(tmp / "home")},
        extra=extra,
        host=real_node.node_ip,
    )
    server.start()
    name = f"t{uuid.uuid4().hex[:8]}"
    namespace = f"tfkube-{name}"
    operator: Operator | None = None
    admin: Api | None = None
    member: Api | None = None
    try:
        admin = first_admin(server)
        admin.new_team(name, {})  # no quota: the pods ask no CPU (2 cores)
        # The real node is a pool kept by a taint: a site admin lets the team's jobs on it.
        taints = sorted({t["key"] for t in real_node.TOLERATIONS})
        allowances = f"/api/v1/teams/{name}/allowances"
        admin.ok(admin.http.put(allowances, json={"toleration_keys": taints}))
        user = admin.new_user()
        admin.add_member(name, user, "member")
        member = api_for(server.url, user)
        if outputs:
            # The team's outputs claim, bound to a folder on the real node, which the server
            # sees at <data-dir>/teams/<team>/outputs (an administrator's mount of the
            # claim). The job's data is scratch space in its pods (it asks for no claim).
            real_node.bind(namespace, [OUTPUTS])
            create_shared_claim(kube, namespace, OUTPUTS)
            shared = real_node.volume(namespace, OUTPUTS)
            shared.mkdir(parents=True, exist_ok=True)
            seen_by_server = tmp / "data" / "teams" / name / "outputs"
            seen_by_server.parent.mkdir(parents=True, exist_ok=True)
            if seen_by_server.is_dir():  # made empty by the server: the mount goes over it
                seen_by_server.rmdir()
            seen_by_server.symlink_to(shared, target_is_directory=True)
        operator = Operator(
            kube, namespace, tmp / "operator.log", operator_kubeconfig, operator_env
        )
        operator.start()
        upload_code(member, name, "mnist", EXAMPLE)
        env = {**os.environ, "TFKUBE_URL": server.url, "TFKUBE_TOKEN": member.token,
               "TFKUBE_TEAM": name, "TFKUBE_HOME": str(tmp / "home")}  # fmt: skip
        yield Team(name, namespace, member, server, kube, real_node, env, admin)
    finally:
        try:
            if admin is not None:  # the server deletes each job's TFJob and outputs
                jobs = admin.get("/api/v1/jobs", params={"limit": 500}).json()["items"]
                for job in jobs:
                    admin.delete(f"/api/v1/jobs/{job['id']}")
        finally:
            for api in (member, admin):
                if api is not None:
                    api.close()
            server.stop()
            if operator is not None:
                operator.kill()
            delete_namespace(kube, namespace)
        errors = [
            line
            for line in server.log.read_text().splitlines()
            if "Traceback" in line or "ERROR" in line
        ]
        assert not errors, server.log.read_text()[-6000:]
        if operator is not None:
            assert not operator.errors(), operator.log.read_text()[-5000:]


@pytest.fixture(scope="module")
def team(
    kube_cluster: KubeCluster,
    real_node: RealNode,
    operator_kubeconfig: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Team]:
    tmp = tmp_path_factory.mktemp("node-serving")
    # The server's gRPC door too; it runs on this host, whose kube-proxy routes the
    # cluster's ClusterIPs (the real node's), so an operator tells it so.
    grpc_port = free_port()
    grpc = ("--grpc-port", str(grpc_port), "--kube-service-network", "cluster-ip")
    (taint,) = real_node.TOLERATIONS
    notebooks = (
        *[a for k, v in real_node.SELECTOR.items()
          for a in ("--notebook-node-selector", f"{k}={v}")],
        "--notebook-toleration", f"{taint['key']}:{taint['effect']}",
    )  # fmt: skip
    with node_platform(
        kube_cluster, real_node, operator_kubeconfig, tmp, outputs=True,
        server_args=(*grpc, *notebooks),
    ) as made:  # fmt: skip
        made.grpc = f"{real_node.node_ip}:{grpc_port}"
        yield made


def delete_namespace(kube: KubeCluster, namespace: str) -> None:
    try:
        kube.core.delete_namespace(namespace, propagation_policy="Background")
    except ApiException as exc:
        if exc.status != 404:
            raise


def held_out_digits(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The examples' test split (their documented seed): 64 pixels in [0, 1], labels."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = (x[order] / 16.0).astype(np.float32), y[order]
    return x[:n], y[:n]


def tfkube_cli(team: Team, *args: str, timeout: float = 300) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "tfkube", *args],
        capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO, env=team.env,
    )  # fmt: skip
    assert proc.returncode == 0, f"tfkube {' '.join(args)}: {proc.stdout}\n{proc.stderr}"
    return proc.stdout


def assert_tf_serving_predictions(answer: Any, n: int) -> list[int]:
    """TensorFlow Serving's row format for the examples' signature; returns the classes."""
    assert isinstance(answer, dict), answer
    assert set(answer) == {"predictions"}, answer
    predictions = answer["predictions"]
    assert len(predictions) == n
    classes = []
    for row in predictions:
        assert set(row) == {"classes", "probabilities"}, row
        probabilities = np.array(row["probabilities"], dtype=np.float64)
        assert probabilities.shape == (10,)
        assert ((probabilities >= 0) & (probabilities <= 1)).all(), row
        assert abs(probabilities.sum() - 1.0) < 1e-3, row
        assert row["classes"] == int(probabilities.argmax()), row
        classes.append(int(row["classes"]))
    return classes


def model_server_objects(kube: KubeCluster, ns: str) -> list[str]:
    k = Kube(kube.api_client)
    found = []
    for resource in (DEPLOYMENT, SERVICE, CONFIG_MAP):
        if k.get(resource, ns, f"{JOB}-serving") is not None:
            found.append(resource.kind)
    pods = kube.core.list_namespaced_pod(ns, label_selector="tfkube.io/component=model-server")
    return found + [f"Pod {p.metadata.name}" for p in pods.items]


@dataclass
class Trained:
    job: dict[str, Any]
    exported: list[Path]
    """The export folder's versions, oldest first (as the chief wrote them)."""
    seconds: float
    """From submit to the job's end."""


@pytest.fixture(scope="module")
def trained(team: Team) -> Trained:
    """The example trained in real pods once per module (CI time): its export is what
    every test here serves."""
    manifest = placed_manifest(team.node, EXAMPLE, JOB, ["--train_steps=300"])  # quickly
    t0 = time.monotonic()
    job = team.member.ok(
        team.member.post(f"/api/v1/teams/{team.name}/jobs", json={"manifest": manifest}),
        201,
    )

    def finished() -> dict[str, Any] | None:
        seen = team.member.ok(team.member.get(f"/api/v1/jobs/{job['id']}"))
        return seen if seen["phase"] in ("Succeeded", "Failed") else None

    final = wait_for(f"job {JOB} to finish", finished, JOB_TIMEOUT, 1.0)
    assert final["phase"] == "Succeeded", final
    exported = sorted(
        (p for p in (team.node.volume(team.namespace, OUTPUTS) / JOB / "export").iterdir()
         if p.name.isdigit()),
        key=lambda p: int(p.name),
    )  # fmt: skip
    assert exported, "the chief exported a SavedModel"
    return Trained(job, exported, time.monotonic() - t0)


def test_tfkube_model_server_answers_in_a_real_pod(team: Team, trained: Trained) -> None:
    kube, ns, node = team.kube, team.namespace, team.node
    t0 = time.monotonic()
    exported, trained_s = trained.exported, trained.seconds

    out = tfkube_cli(team, "serve", JOB, "--engine", "server", "--runtime", "tfkube")
    assert f"model server {JOB}: Ready" in out, out
    served = time.monotonic() - t0

    # tfkube's model server, in tfkube's image, non-root, on the real node
    (pod,) = kube.core.list_namespaced_pod(
        ns, label_selector="tfkube.io/component=model-server"
    ).items
    assert pod.spec.node_name == node.name
    (container,) = pod.spec.containers
    assert container.image == OPERATOR_IMAGE
    assert container.command == ["tfkube-modelserver"]  # the native one, as locally
    assert container.security_context.read_only_root_filesystem is True
    assert pod.status.container_statuses[0].ready

    x, y = held_out_digits(32)
    body = {"instances": x.tolist()}
    # Through the API server's service proxy (nothing dials a pod IP from the host).
    proxy = SERVICE.url(ns, f"{JOB}-serving:http", "proxy") + f"/v1/models/{JOB}"
    k = Kube(kube.api_client)
    status = k.request("GET", proxy)
    (version,) = status["model_version_status"]
    assert version["state"] == "AVAILABLE", status
    assert int(version["version"]) == int(exported[-1].name)
    classes = assert_tf_serving_predictions(k.request("POST", f"{proxy}:predict", body=body), 32)
    # Through the tfkube server's proxy, as a client of the team (its token).
    (listed,) = [s for s in team.member.ok(team.member.get("/api/v1/model-servers"))
                 if s["name"] == JOB]  # fmt: skip
    assert listed["status"] == "Ready", listed
    answer = team.member.http.post(f"{listed['url']}:predict", json=body)
    assert answer.status_code == 200, answer.text
    assert assert_tf_serving_predictions(answer.json(), 32) == classes
    wrong = team.member.http.post(f"{listed['url']}:predict", json={"instances": [[1.0, 2.0]]})
    assert wrong.status_code == 400, wrong.text
    assert set(wrong.json()) == {"error"}
    accuracy = float(np.mean(np.array(classes) == y))
    # gRPC through the tfkube server's door (issue 20 point 1), as a client of the team:
    # TensorFlow Serving's own client; the server dials the Service's ClusterIP.
    t1 = time.monotonic()
    assert grpc_as_a_member(team, listed["id"], x, int(exported[-1].name)) == classes
    grpc_s = time.monotonic() - t1
    print(f"\nreal node: {JOB} trained and exported {trained_s:.0f}s after submit; tfkube's "
          f"model server Ready {served:.0f}s after `tfkube serve`; accuracy on 32 held-out "
          f"digits after 300 steps: {accuracy:.2f}; the same classes through the server's "
          f"gRPC door (Predict, GetModelStatus, refusals: {grpc_s:.1f}s)")  # fmt: skip

    tfkube_cli(team, "serving", "stop", JOB)
    try:
        wait_for("the model server's objects and pod gone",
                 lambda: not model_server_objects(kube, ns), 120, 1.0)  # fmt: skip
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {model_server_objects(kube, ns)}") from None
    try:
        k.request("GET", proxy, timeout=10)
    except ApiError:
        pass
    else:
        pytest.fail("the stopped model server still answers")


def grpc_as_a_member(team: Team, server_id: str, x: np.ndarray, version: int) -> list[int]:
    """Predict and GetModelStatus with the `tensorflow-serving-api` package's own stubs
    through the tfkube server's gRPC door, with a member's token and the model server's id
    as metadata -> the classes predicted for `x` (`server.through_grpc`: another team's
    member is told the model server does not exist; no token or a bad one is refused)."""
    assert team.grpc is not None
    assert team.admin is not None
    admin = team.admin
    other = admin.new_team()  # another team, with a member of its own
    try:
        stranger = admin.new_user()
        admin.add_member(other, stranger, "member")
        args = (server_id, JOB, team.member.token, token_for(team.server.url, stranger), x)
        return [int(c) for c in through_grpc(team.grpc, *args, version=version)]
    finally:
        delete_namespace(team.kube, f"tfkube-{other}")


def copy_as_version(src: Path, version: int) -> Path:
    """The export copied as another version, owned like the original (the pods' user reads
    it): a second SavedModel with no second training (CI time)."""
    target = src.parent / str(version)
    partial = src.parent / f".partial-{version}"
    shutil.copytree(src, partial)
    st = src.stat()
    for path in [partial, *partial.rglob("*")]:
        os.chown(path, st.st_uid, st.st_gid)
    partial.rename(target)  # whole, as the example's own export appears
    return target


@dataclass
class Load:
    """A client sending held-out digits through the tfkube server's proxy without pause,
    asking the model's status between predictions (which version answered)."""

    url: str
    token: str
    body: dict[str, Any]
    requests: int = 0
    failures: list[str] = field(default_factory=list)
    versions: list[tuple[float, int]] = field(default_factory=list)
    """(time, version) each time the status answered a version other than the last."""
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(headers=headers, timeout=30) as http:
            while not self.stop.is_set():
                for method, url in (("POST", f"{self.url}:predict"), ("GET", self.url)):
                    self.requests += 1
                    try:
                        r = http.request(method, url, json=self.body if method == "POST" else None)
                    except httpx.HTTPError as exc:
                        self.failures.append(f"{method}: {exc!r}")
                        continue
                    if r.status_code != 200:
                        self.failures.append(f"{method} {r.status_code}: {r.text[:200]}")
                        continue
                    if method == "GET":
                        (status,) = r.json()["model_version_status"]
                        version = int(status["version"])
                        if not self.versions or self.versions[-1][1] != version:
                            self.versions.append((time.monotonic(), version))


ADMITTED = textwrap.dedent(
    """
    def admitted(url):
        # A new pod's address joins the NetworkPolicy's sets a moment after it starts (the
        # network plugin syncs on pod events): its first connections can be refused. The
        # load counts from its first answer on.
        import time, urllib.request
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    r.read()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    """
)
"""Waits, uncounted, for a load script's first answer (`admitted(url)`): put before it."""

IN_CLUSTER_LOAD = ADMITTED + textwrap.dedent(
    """
    import json, sys, time, urllib.request
    base, body, new = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
    requests, failures, versions, since_new = 0, [], [], None
    admitted(base)
    t_end = time.monotonic() + 400
    while time.monotonic() < t_end:
        for data in (body, None):
            url = base + (":predict" if data else "")
            requests += 1
            try:
                with urllib.request.urlopen(url, data=data, timeout=30) as r:
                    answer = json.loads(r.read())
            except Exception as exc:
                failures.append(repr(exc))
                continue
            if data is None:
                version = int(answer["model_version_status"][0]["version"])
                if not versions or versions[-1] != version:
                    versions.append(version)
                    print("version", version, flush=True)
                if version != new:
                    since_new = None
                elif since_new is None:
                    since_new = time.monotonic()
        if since_new is not None and time.monotonic() - since_new > 20:
            break
    print(json.dumps({"requests": requests, "failures": failures[:5],
                      "failed": len(failures), "versions": versions}))
    """
)
"""A client in a pod: through the Service's ClusterIP (kube-proxy's rules, not the API
server's proxy) without pause, until the new version alone answered for 20 s."""


def client_pod(name: str, argv: list[str]) -> dict[str, Any]:
    """A pod on the real node in the team's namespace (Pod Security restricted)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": dict(RealNode.SELECTOR),
            "tolerations": list(RealNode.TOLERATIONS),
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "securityContext": {
                "runAsUser": 65532,
                "runAsNonRoot": True,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "main",
                    "image": OPERATOR_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": argv,
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def model_server_pods(kube: KubeCluster, ns: str) -> list[Any]:
    return list(
        kube.core.list_namespaced_pod(ns, label_selector="tfkube.io/component=model-server").items
    )


def test_a_version_roll_under_load_fails_no_request(team: Team, trained: Trained) -> None:
    """Issue 20 point 5: `PATCH /api/v1/model-servers/<id> {version}` rolls tfkube's
    model server in a real pod to another version while a client keeps sending: every
    request answers 200, and the answers switch from the old version to the new one."""
    kube, ns = team.kube, team.namespace
    old = int(trained.exported[-1].name)
    new = old + 1
    if not (trained.exported[-1].parent / str(new)).exists():
        copy_as_version(trained.exported[-1], new)
    member = team.member
    server = member.ok(
        member.post(
            f"/api/v1/jobs/{trained.job['id']}/model-servers",
            json={"version": old, "runtime": "tfkube", "name": "roll"},
        ),
        201,
    )

    def ready() -> dict[str, Any] | None:
        seen = member.ok(member.get(f"/api/v1/model-servers/{server['id']}"))
        return seen if seen["status"] == "Ready" else None

    wait_for("the model server ready", ready, 300, 1.0)
    (first,) = model_server_pods(kube, ns)
    assert first.metadata.annotations["tfkube.io/model-version"] == str(old)

    x, _ = held_out_digits(8)
    body = {"instances": x.tolist()}
    # Inside the cluster: through the Service's ClusterIP (kube-proxy), the way a client
    # pod calls it; it stops itself 20 s after the new version alone answers.
    service = f"http://roll-serving.{ns}.svc.cluster.local:8501/v1/models/roll"
    argv = ["python3", "-c", IN_CLUSTER_LOAD, service, json.dumps(body), str(new)]
    kube.core.create_namespaced_pod(ns, client_pod("roll-client", argv))

    def client_sending() -> bool:
        try:
            return "version" in (kube.core.read_namespaced_pod_log("roll-client", ns) or "")
        except ApiException:
            return False

    wait_for("the in-cluster client answered", client_sending, 180, 0.5)
    load = Load(server["url"], member.token, body)
    thread = threading.Thread(target=load.run, name="roll-load", daemon=True)
    thread.start()
    try:
        wait_for("requests answered by the old version", lambda: load.requests >= 20, 60, 0.2)
        before = load.requests
        t0 = time.monotonic()
        rolled = member.ok(
            member.patch(f"/api/v1/model-servers/{server['id']}", json={"version": new})
        )
        assert rolled["version"] == new, rolled

        def done() -> Any:
            pods = model_server_pods(kube, ns)
            if len(pods) != 1 or pods[0].metadata.name == first.metadata.name:
                return None
            return pods[0] if pods[0].status.container_statuses[0].ready else None

        second = wait_for("the old pod gone and the new one ready", done, 300, 0.5)
        rolled_s = time.monotonic() - t0
        during = load.requests - before
        time.sleep(3)  # and a little after: the new pod alone
    finally:
        load.stop.set()
        thread.join(60)
    assert not thread.is_alive()
    assert second.metadata.annotations["tfkube.io/model-version"] == str(new)
    assert load.failures == [], f"{len(load.failures)} of {load.requests}: {load.failures[:5]}"
    seen = [v for _, v in load.versions]
    assert seen[0] == old, load.versions
    assert seen[-1] == new, load.versions
    switched = next(t for t, v in load.versions if v == new) - t0
    last_old = max(t for t, v in load.versions if v == old) - t0
    assert last_old < rolled_s, load.versions  # once the old pod is gone, only the new
    done = wait_for("the in-cluster client done",
                    lambda: pod_done(kube, ns, "roll-client"), 420, 1.0)  # fmt: skip
    log = kube.core.read_namespaced_pod_log("roll-client", ns)
    assert done.status.phase == "Succeeded", log
    inside = json.loads(log.strip().splitlines()[-1])
    assert inside["failed"] == 0, inside
    assert inside["versions"][0] == old, inside
    assert inside["versions"][-1] == new, inside
    print(f"\nreal node: a roll from version {old} to {new} under load: through the "
          f"server's proxy {load.requests} requests, 0 failed, {during} of them during the "
          f"roll ({rolled_s:.1f}s from PATCH to the old pod gone; {new} answered first "
          f"{switched:.1f}s and {old} last {last_old:.1f}s after the PATCH, "
          f"{len(seen) - 1} switches while both pods were ready); through the ClusterIP "
          f"from a pod {inside['requests']} requests, 0 failed, "
          f"{len(inside['versions']) - 1} switches, ending on {new}")  # fmt: skip

    # Unknown versions are refused by name, the server unchanged.
    bad = member.patch(f"/api/v1/model-servers/{server['id']}", json={"version": 999999})
    assert bad.status_code == 422, bad.text
    assert "version" in bad.text
    member.ok(member.post(f"/api/v1/model-servers/{server['id']}/stop"))


def pod_done(kube: KubeCluster, ns: str, name: str) -> Any:
    found = kube.core.read_namespaced_pod(name, ns)
    return found if found.status.phase in ("Succeeded", "Failed") else None


SCALE_LOAD = ADMITTED + textwrap.dedent(
    """
    import http.server, json, sys, threading, urllib.request
    url, body = sys.argv[1] + ":predict", sys.argv[2].encode()
    counts = {"requests": 0, "failed": 0, "errors": []}
    admitted(sys.argv[1])
    lock, stop = threading.Lock(), threading.Event()
    def send():
        while not stop.is_set():
            try:
                with urllib.request.urlopen(url, data=body, timeout=30) as r:
                    r.read()
                error = None
            except Exception as exc:
                error = repr(exc)
            with lock:
                counts["requests"] += 1
                if error:
                    counts["failed"] += 1
                    counts["errors"] = (counts["errors"] + [error])[:5]
    senders = [threading.Thread(target=send) for _ in range(4)]
    for t in senders:
        t.start()
    limit = threading.Timer(600, stop.set)  # never a load without end
    limit.daemon = True
    limit.start()
    class Control(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.answer()
        def do_POST(self):
            stop.set()
            for t in senders:
                t.join()
            self.answer()
            threading.Thread(target=server.shutdown).start()
        def answer(self):
            with lock:
                data = json.dumps(counts).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        def log_message(self, *args):
            pass
    server = http.server.ThreadingHTTPServer(("", 8080), Control)
    server.serve_forever()
    server.server_close()
    """
)
"""A load in a pod: four clients sending predictions through the Service's ClusterIP
(kube-proxy's rules) without pause, and on port 8080 their counts (GET) or their end
(POST: stop sending, then the final counts; the process exits)."""


def scaled_pods(kube: KubeCluster, ns: str, name: str) -> list[Any]:
    """One model server's pods (another test's may still be terminating)."""
    selector = f"tfkube.io/model-server={name}"
    return list(kube.core.list_namespaced_pod(ns, label_selector=selector).items)


def ready_pods(pods: list[Any]) -> list[Any]:
    return [
        p
        for p in pods
        if p.metadata.deletion_timestamp is None
        and p.status.container_statuses
        and p.status.container_statuses[0].ready
    ]


def autoscaling_seen(kube: KubeCluster, ns: str, name: str) -> str:
    """What decides the replicas, for a failure's message: the autoscaler's status (its
    conditions and the metrics it read), metrics-server's answer for the pods, the
    autoscaler's and the Deployment's events, the pods."""
    k = Kube(kube.api_client)
    hpa = k.get(HORIZONTAL_POD_AUTOSCALER, ns, f"{name}-serving")
    try:
        found = k.request(
            "GET",
            f"/apis/metrics.k8s.io/v1beta1/namespaces/{ns}/pods",
            query={"labelSelector": f"tfkube.io/model-server={name}"},
        )
        metrics: Any = {
            item["metadata"]["name"]: (item["timestamp"], [c["usage"] for c in item["containers"]])
            for item in found["items"]
        }
    except ApiError as exc:
        metrics = f"no answer: {exc}"
    events = kube.core.list_namespaced_event(
        ns, field_selector=f"involvedObject.name={name}-serving"
    ).items
    said = [f"{e.involved_object.kind} {e.reason}: {e.message}" for e in events][-12:]
    pods = [
        (p.metadata.name, p.status.phase, bool(ready_pods([p])), p.metadata.deletion_timestamp)
        for p in scaled_pods(kube, ns, name)
    ]
    return (
        f"the autoscaler's status: {(hpa or {}).get('status')}; metrics-server's pod "
        f"metrics: {metrics}; events: {said}; pods (name, phase, ready, deleted): {pods}"
    )


def test_an_autoscaled_model_server_scales_with_its_load(team: Team, trained: Trained) -> None:
    """Issue 20 point 5: tfkube's model server served with `autoscale` (1 to 2 replicas at
    20% of a 500m CPU request, scale-down after 10 s of low load) gets a
    HorizontalPodAutoscaler; clients in a pod sending predictions through the Service's
    ClusterIP drive its CPU past the target, the autoscaler (kube-controller-manager's,
    reading metrics-server's pod metrics) adds a second pod and both answer; once the
    clients stop, it goes back to one. No request of theirs fails."""
    kube, ns, member = team.kube, team.namespace, team.member
    name = "scaled"
    asked = {
        "minReplicas": 1,
        "maxReplicas": 2,
        "targetCPUUtilization": 20,
        "scaleDownStabilizationSeconds": 10,
    }
    server = member.ok(
        member.post(
            f"/api/v1/jobs/{trained.job['id']}/model-servers",
            json={"runtime": "tfkube", "name": name, "cpu": "500m", "autoscale": asked},
        ),
        201,
    )
    url = f"/api/v1/model-servers/{server['id']}"
    k = Kube(kube.api_client)

    def shown(replicas: int) -> dict[str, Any] | None:
        """The API's view once it shows `replicas` ready and wanted."""
        seen = member.ok(member.get(url))
        wanted = (seen["status"], seen["replicas"], seen["desired_replicas"])
        return seen if wanted == ("Ready", replicas, replicas) else None

    def waited(what: str, check: Any, timeout: float) -> Any:
        try:
            return wait_for(what, check, timeout, 1.0)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; {autoscaling_seen(kube, ns, name)}") from None

    waited("the model server ready with one replica", lambda: shown(1), 300)

    x, _ = held_out_digits(32)
    body = {"instances": x.tolist()}
    service = f"http://{name}-serving.{ns}.svc.cluster.local:8501/v1/models/{name}"
    argv = ["python3", "-c", SCALE_LOAD, service, json.dumps(body)]
    kube.core.create_namespaced_pod(ns, client_pod("scale-client", argv))
    control = f"/api/v1/namespaces/{ns}/pods/scale-client:8080/proxy/"

    def counts() -> dict[str, Any] | None:
        try:
            return dict(k.request("GET", control, timeout=10))
        except ApiError:  # not started yet
            return None

    def answered() -> bool:
        seen = counts()
        return seen is not None and seen["requests"] > seen["failed"]

    waited("the clients' first answers", answered, 180)
    t0 = time.monotonic()

    def two_ready() -> list[Any] | None:
        ready = ready_pods(scaled_pods(kube, ns, name))
        return ready if len(ready) == 2 else None

    try:
        two = wait_for("a second replica ready under load", two_ready, 240, 1.0)
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}; the clients: {counts()}; {autoscaling_seen(kube, ns, name)}"
        ) from None
    up_s = time.monotonic() - t0
    hpa = k.get(HORIZONTAL_POD_AUTOSCALER, ns, f"{name}-serving") or {}
    read = (hpa.get("status") or {}).get("currentMetrics") or []
    utilization = [m["resource"]["current"].get("averageUtilization") for m in read]
    waited("the API showing two replicas", lambda: shown(2), 60)
    for pod in two:  # each answers, through the API server's pod proxy
        at = f"/api/v1/namespaces/{ns}/pods/{pod.metadata.name}:8501/proxy"
        assert_tf_serving_predictions(k.request("POST", f"{at}/v1/models/{name}:predict",
                                                body=body), 32)  # fmt: skip
    final = dict(k.request("POST", control, timeout=90))  # the load's end, all clients joined
    t1 = time.monotonic()
    assert final["failed"] == 0, final

    def back_to_one() -> list[Any] | None:
        pods = scaled_pods(kube, ns, name)
        return pods if len(pods) == 1 and len(ready_pods(pods)) == 1 else None

    waited("back to one replica once the load stopped (the other pod gone)", back_to_one, 240)
    down_s = time.monotonic() - t1
    waited("the API showing one replica", lambda: shown(1), 60)
    print(f"\nreal node: autoscaled model server (1-2 replicas at 20% of 500m): a second "
          f"replica ready {up_s:.0f}s after the load began (the autoscaler then read "
          f"{utilization} %); back to one {down_s:.0f}s after it stopped (scale-down window "
          f"10 s); {final['requests']} requests through the ClusterIP, 0 failed")  # fmt: skip

    member.ok(member.post(f"{url}/stop"))

    def gone() -> bool:
        objects = [k.get(r, ns, f"{name}-serving") for r in (DEPLOYMENT, HORIZONTAL_POD_AUTOSCALER)]
        return objects == [None, None] and not scaled_pods(kube, ns, name)

    wait_for("its Deployment, autoscaler and pods gone", gone, 120, 1.0)


def test_a_notebooks_kernel_runs_through_the_api_servers_proxy(team: Team) -> None:
    """A server outside the cluster reaches a notebook's pod through the API server's
    service proxy (a headless Service has no ClusterIP), which keeps the Authorization
    header and drops the query of a WebSocket upgrade: Jupyter's token cannot ride on a
    kernel's channel (403 until 2026-12-03). The server signs in to Jupyter once and sends
    its login cookie: a cell runs in the notebook's pod through the server's proxy, and
    the cookie never reaches the member's browser."""
    notebook = team.member.ok(team.member.post(f"/api/v1/teams/{team.name}/notebook"))
    nid = notebook["id"]
    base = f"/proxy/notebook/{nid}"
    team.node.bind(team.namespace, [f"home-notebook-{nid}-0"])
    try:

        def jupyter_status() -> httpx.Response | None:
            r = team.member.get(f"{base}/api/status")
            return r if r.status_code == 200 else None

        status = wait_for("JupyterLab through the API server's proxy", jupyter_status, 300, 1.0)
        assert "set-cookie" not in status.headers, status.headers  # Jupyter's stays here
        t0 = time.monotonic()
        kernel = team.member.post(f"{base}/api/kernels", json={"name": "python3"})
        assert kernel.status_code == 201, kernel.text
        kid = kernel.json()["id"]
        ws = f"{team.server.url.replace('http', 'ws', 1)}{base}/api/kernels/{kid}/channels"
        code = "import os; print('kernel in', os.uname()[1])"
        said = run_cell(ws, team.member.token, code, 120)
        assert f"kernel in notebook-{nid}-0" in said, said
        took = time.monotonic() - t0
        print(f"\noutside the cluster: a cell ran in the notebook's pod through the API "
              f"server's proxy {took:.1f}s after the kernel was asked for")  # fmt: skip
    finally:
        team.member.post(f"/api/v1/notebooks/{nid}/stop")
