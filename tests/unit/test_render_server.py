"""`tfkube install --server`: the server's objects, rendered purely (the real API server
checks them in tests/cluster/test_render_dry_run.py and the RBAC at work in
tests/cluster/test_server_kubernetes.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
import yaml

from tfkube.render import (
    OPERATOR_IMAGE,
    SERVER_NAME,
    Placement,
    ServerInstall,
    dump_yaml,
    install_manifests,
    parse_node_selector,
    parse_toleration,
    server_manifests,
)
from tfkube.render._server import SERVER_RULES  # render's own unit test: its RBAC rules


def _one(objects: list[dict], kind: str) -> dict:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, kind
    return found[0]


def _container(objects: list[dict]) -> dict:
    return _one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def test_objects_and_order():
    objects = server_manifests("tfkube-system", "img:1")
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("ServiceAccount", "tfkube-server"),
        ("ClusterRole", "tfkube-server"),
        ("ClusterRoleBinding", "tfkube-server"),
        ("PersistentVolumeClaim", "tfkube-server-data"),
        ("Deployment", "tfkube-server"),
        ("Service", "tfkube-server"),
    ]
    for obj in objects:
        if obj["kind"] not in {"ClusterRole", "ClusterRoleBinding"}:
            assert obj["metadata"]["namespace"] == "tfkube-system"
        assert obj["metadata"]["labels"]["app.kubernetes.io/component"] == "server"


def test_the_server_runs_the_kubernetes_engine_on_its_claim():
    objects = server_manifests("ops", "img:1")
    container = _container(objects)
    assert container["image"] == "img:1"
    command = container["command"]
    assert command[:4] == ["tfkube", "server", "--engine", "kubernetes"]
    flags = dict(zip(command[2::2], command[3::2], strict=True))
    assert flags["--host"] == "0.0.0.0"
    assert flags["--data-dir"] == "/var/lib/tfkube"
    # Replicas in every team namespace fetch their code through the Service's DNS name.
    assert flags["--code-url"] == "http://tfkube-server.ops.svc:8470"
    # Its gRPC door, which dials the model servers' Services by name (in the cluster).
    assert flags["--grpc-port"] == "8500"
    assert "--kube-service-network" not in flags  # auto: the DNS names, in a pod
    # Team namespaces admit this namespace's pods (`TenantNetwork`); the API servers' own
    # addresses unless the administrator named others.
    assert flags["--kube-platform-namespace"] == "ops"
    assert "--kube-ingress-from" not in flags
    assert {"name": "grpc", "containerPort": 8500, "protocol": "TCP"} in container["ports"]
    assert "--outputs-claim" not in flags
    assert container["volumeMounts"][0] == {"name": "data", "mountPath": "/var/lib/tfkube"}
    pod = _one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "tfkube-server"
    assert pod["volumes"][0]["persistentVolumeClaim"] == {"claimName": "tfkube-server-data"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["fsGroup"] == 65532
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    # PostgreSQL from an optional Secret: the URL (and its password) never in the spec.
    env = {e["name"]: e for e in container["env"]}
    ref = env["TFKUBE_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "tfkube-server-database", "key": "url", "optional": True}
    assert _one(objects, "Deployment")["spec"]["strategy"] == {"type": "Recreate"}
    service = _one(objects, "Service")
    assert [(p["name"], p["port"]) for p in service["spec"]["ports"]] == [
        ("http", 8470),
        ("grpc", 8500),
    ]
    assert (
        service["spec"]["selector"]
        == _one(objects, "Deployment")["spec"]["selector"]["matchLabels"]
    )


@pytest.mark.parametrize(
    ("options", "claim_spec"),
    [
        (ServerInstall(), {"storage": "20Gi", "class": None}),
        (
            ServerInstall(storage_class="fast", storage_size="5Gi"),
            {"storage": "5Gi", "class": "fast"},
        ),
    ],
)
def test_data_claim(options, claim_spec):
    claim = _one(server_manifests("ops", "img", options), "PersistentVolumeClaim")
    assert claim["spec"]["resources"]["requests"]["storage"] == claim_spec["storage"]
    assert claim["spec"].get("storageClassName") == claim_spec["class"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_outputs_claim_is_mounted_where_the_server_reads_team_outputs():
    objects = server_manifests(
        "ops", "img", ServerInstall(outputs_claim="shared", public_url="https://tf.example")
    )
    container = _container(objects)
    command = container["command"]
    assert command[command.index("--outputs-claim") + 1] == "shared"
    assert command[command.index("--public-url") + 1] == "https://tf.example"
    # The server reads team T's outputs at <data-dir>/teams/T/outputs (the Kubernetes
    # engine's job_storage).
    assert {"name": "outputs", "mountPath": "/var/lib/tfkube/teams"} in container["volumeMounts"]
    pod = _one(objects, "Deployment")["spec"]["template"]["spec"]
    assert {"name": "outputs", "persistentVolumeClaim": {"claimName": "shared"}} in pod["volumes"]


def test_outputs_mount_matches_the_servers_layout(tmp_path):
    from tfkube.engines import Tenant
    from tfkube.engines.kubernetes import KubernetesEngine

    engine = KubernetesEngine(tmp_path / "data", outputs_claim="shared", api_client=object())
    outputs = engine.job_storage(Tenant("vision", "tfkube-vision"), "1", "mnist").output_dir
    objects = server_manifests("ops", "img", ServerInstall(outputs_claim="shared"))
    mount = next(m for m in _container(objects)["volumeMounts"] if m["name"] == "outputs")
    data = next(m for m in _container(objects)["volumeMounts"] if m["name"] == "data")
    relative = outputs.parent.relative_to(tmp_path / "data")
    assert mount["mountPath"] == f"{data['mountPath']}/{relative.parts[0]}"


# What the server does in a cluster, as (API group, resource, verb): KubernetesBackend's
# submit/get/list/logs/events/stop/delete, the team's namespace and quota (server-side
# apply), the TensorBoard proxy. A new call needs a new row here and a rule.
NEEDED = [
    ("", "namespaces", "create"),
    ("", "namespaces", "patch"),
    ("", "resourcequotas", "create"),
    ("", "resourcequotas", "patch"),
    ("", "limitranges", "create"),
    ("", "limitranges", "patch"),
    ("tfkube.io", "tfjobs", "create"),
    ("tfkube.io", "tfjobs", "get"),
    ("tfkube.io", "tfjobs", "list"),
    ("tfkube.io", "tfjobs", "patch"),
    ("tfkube.io", "tfjobs", "delete"),
    ("", "secrets", "create"),
    ("", "secrets", "update"),
    ("", "secrets", "patch"),
    ("", "secrets", "delete"),
    ("batch", "jobs", "list"),
    ("", "pods", "list"),
    ("", "pods/log", "get"),
    ("", "events", "list"),
    ("", "nodes", "get"),
    ("", "services/proxy", "get"),
    ("", "services/proxy", "create"),
    ("", "services/proxy", "update"),  # a notebook saves with PUT
    ("apps", "deployments", "create"),  # model servers
    ("apps", "deployments", "patch"),
    ("apps", "deployments", "get"),
    ("apps", "deployments", "delete"),
    ("apps", "statefulsets", "patch"),  # notebooks
    ("apps", "statefulsets", "delete"),
    ("", "services", "patch"),
    ("", "services", "get"),  # a model server's ClusterIP, dialed for gRPC
    ("networking.k8s.io", "networkpolicies", "create"),  # a team namespace's
    ("networking.k8s.io", "networkpolicies", "patch"),
    ("discovery.k8s.io", "endpointslices", "list"),  # the API servers' addresses
    ("", "configmaps", "patch"),
    ("scheduling.k8s.io", "priorityclasses", "create"),  # a team's priority
    ("scheduling.k8s.io", "priorityclasses", "patch"),
    ("autoscaling", "horizontalpodautoscalers", "create"),  # an autoscaled model server
    ("autoscaling", "horizontalpodautoscalers", "patch"),
    ("autoscaling", "horizontalpodautoscalers", "get"),
    ("autoscaling", "horizontalpodautoscalers", "delete"),
]


def _granted(rules) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


@pytest.mark.parametrize("need", NEEDED, ids="/".join)
def test_rbac_grants_what_the_server_does(need):
    assert need in _granted(SERVER_RULES)


@pytest.mark.parametrize(
    "refused",
    [
        ("", "secrets", "get"),  # it writes code tokens; it never reads anyone's Secrets
        ("", "secrets", "list"),
        ("", "pods", "delete"),  # stopping is the operator's (through the TFJob)
        ("", "pods/exec", "create"),
        ("", "namespaces", "delete"),
        ("rbac.authorization.k8s.io", "rolebindings", "create"),
        ("", "persistentvolumeclaims", "delete"),  # a notebook's home outlives it
        ("scheduling.k8s.io", "priorityclasses", "delete"),
        ("apps", "deployments/scale", "update"),  # the autoscaler scales, not the server
        ("apps", "deployments/finalizers", "update"),  # owned without blockOwnerDeletion
        ("autoscaling", "horizontalpodautoscalers", "list"),
        ("networking.k8s.io", "networkpolicies", "delete"),  # a team's stays with it
        ("discovery.k8s.io", "endpointslices", "patch"),
    ],
    ids="/".join,
)
def test_rbac_grants_nothing_more(refused):
    assert refused not in _granted(SERVER_RULES)
    assert all("*" not in r["verbs"] and "*" not in r["resources"] for r in SERVER_RULES)


def test_rendering_is_deterministic_and_shares_nothing():
    first = server_manifests("ops", "img", ServerInstall(outputs_claim="c"))
    assert first == server_manifests("ops", "img", ServerInstall(outputs_claim="c"))
    # No object shared between two places (YAML would print anchors for it).
    assert "&id" not in dump_yaml(first)


def test_cli_prints_the_server_objects_after_the_operators():
    proc = subprocess.run(
        [sys.executable, "-m", "tfkube", "install", "--server", "--print", "-n", "ml"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    objects = list(yaml.safe_load_all(proc.stdout))
    expected = install_manifests("ml", OPERATOR_IMAGE)
    assert objects[: len(expected)] == expected
    assert [o["kind"] for o in objects[len(expected) :]] == [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "PersistentVolumeClaim",
        "Deployment",
        "Service",
    ]


def _install_server(*flags: str) -> subprocess.CompletedProcess[str]:
    """`tfkube install --server --print` with `flags`."""
    return subprocess.run(
        [sys.executable, "-m", "tfkube", "install", "--server", "--print", *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _flag_values(command: list[str], flag: str) -> list[str]:
    return [command[i + 1] for i, word in enumerate(command) if word == flag]


def test_ingress_sources_reach_the_server_as_its_flags_and_a_bad_one_is_refused():
    objects = server_manifests(
        "ops", "img", ServerInstall(ingress_from=("198.19.0.1/32", "198.19.32.0/30"))
    )
    command = _container(objects)["command"]
    assert _flag_values(command, "--kube-ingress-from") == ["198.19.0.1/32", "198.19.32.0/30"]
    proc = _install_server("--ingress-from", "198.19.0.0/33")
    assert proc.returncode == 2, proc.stderr
    assert "--ingress-from: '198.19.0.0/33' is not an address or a CIDR" in proc.stderr


def test_egress_deny_reaches_the_server_as_its_flags_and_a_bad_one_is_refused():
    def flags(install: ServerInstall) -> list[str]:
        command = _container(server_manifests("ops", "img", install))["command"]
        return _flag_values(command, "--kube-egress-deny")

    assert flags(ServerInstall()) == []  # the server's default: the metadata services
    assert flags(ServerInstall(egress_deny=())) == ["none"]
    assert flags(ServerInstall(egress_deny=("198.19.250.1/32",))) == ["198.19.250.1/32"]
    proc = _install_server("--egress-deny", "0.0.0.0/0")
    assert proc.returncode == 2, proc.stderr
    assert "--egress-deny: '0.0.0.0/0' denies every address" in proc.stderr
    proc = _install_server("--egress-deny", "none")
    assert proc.returncode == 0, proc.stderr
    (server,) = [
        o
        for o in yaml.safe_load_all(proc.stdout)
        if o and o["kind"] == "Deployment" and o["metadata"]["name"] == SERVER_NAME
    ]
    command = server["spec"]["template"]["spec"]["containers"][0]["command"]
    assert _flag_values(command, "--kube-egress-deny") == ["none"]


def test_cli_server_options_need_server():
    proc = subprocess.run(
        [sys.executable, "-m", "tfkube", "install", "--print", "--outputs-claim", "x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "--server" in proc.stderr


def test_the_image_has_what_the_server_and_the_operator_import():
    """deploy/Dockerfile builds the one image both Deployments (and a notebook's pod) run
    (no Docker here to build it): it must install the extras `tfkube server`, `tfkube
    operator`, `jupyter lab` and `python -m tfkube.serving` need."""
    import re
    from pathlib import Path

    dockerfile = (Path(__file__).resolve().parents[2] / "deploy" / "Dockerfile").read_text()
    installed = re.findall(r'"tfkube\[([a-z,]+)\]"', dockerfile)
    built = re.findall(r'"\.\[([a-z,]+)\]"', dockerfile)
    assert installed
    assert built
    for extras in (installed[0], built[0]):
        assert {"kubernetes", "server", "notebook", "serving"} <= set(extras.split(","))


def test_placement_puts_the_operator_and_the_server_on_the_chosen_nodes() -> None:
    """`--node-selector` and `--toleration` reach both Deployments' pods; without them
    neither pod spec names a node selector or a toleration."""
    placement = Placement(
        node_selector=parse_node_selector(["pool=platform"]),
        tolerations=(parse_toleration("pool=platform:NoSchedule"), parse_toleration("gpu")),
    )
    operator = _one(install_manifests(placement=placement), "Deployment")
    server = _one(server_manifests("ns", OPERATOR_IMAGE, ServerInstall(placement=placement)),
                  "Deployment")  # fmt: skip
    for deployment in (operator, server):
        pod = deployment["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"pool": "platform"}
        assert pod["tolerations"] == [
            {"key": "pool", "operator": "Equal", "value": "platform", "effect": "NoSchedule"},
            {"key": "gpu", "operator": "Exists"},
        ]
    for deployment in (
        _one(install_manifests(), "Deployment"),
        _one(server_manifests("ns", OPERATOR_IMAGE), "Deployment"),
    ):
        pod = deployment["spec"]["template"]["spec"]
        assert "nodeSelector" not in pod
        assert "tolerations" not in pod


@pytest.mark.parametrize(
    ("call", "value", "names"),
    [
        (lambda v: parse_node_selector([v]), "pool", "--node-selector 'pool'"),
        (lambda v: parse_node_selector([v]), "=x", "--node-selector '=x'"),
        (parse_toleration, "pool=x:Sometimes", "--toleration 'pool=x:Sometimes'"),
        (parse_toleration, ":NoSchedule", "--toleration ':NoSchedule'"),
    ],
)
def test_bad_placement_flags_are_refused_naming_the_flag_and_the_form(
    call: Any, value: str, names: str
) -> None:
    with pytest.raises(ValueError, match="give KEY") as caught:
        call(value)
    assert names in str(caught.value)


def test_notebook_placement_reaches_the_server_as_its_flags() -> None:
    """`tfkube install --server --notebook-node-selector --notebook-toleration` passes
    them to `tfkube server`, which reads them back as they were given; the server's own
    pod is not placed by them."""
    notebooks = Placement(
        node_selector={"pool": "notebooks"},
        tolerations=(parse_toleration("pool=nb:NoSchedule"), parse_toleration("gpu")),
    )
    flags = notebooks.flags("--notebook-node-selector", "--notebook-toleration")
    assert flags == ["--notebook-node-selector", "pool=notebooks",
                     "--notebook-toleration", "pool=nb:NoSchedule",
                     "--notebook-toleration", "gpu"]  # fmt: skip
    assert parse_node_selector([flags[1]]) == notebooks.node_selector
    assert tuple(parse_toleration(t) for t in flags[3::2]) == notebooks.tolerations
    deployment = _one(
        server_manifests("ns", OPERATOR_IMAGE, ServerInstall(notebook_placement=notebooks)),
        "Deployment",
    )
    pod = deployment["spec"]["template"]["spec"]
    assert pod["containers"][0]["command"][-6:] == flags
    assert "nodeSelector" not in pod
    assert "tolerations" not in pod
    plain = _one(server_manifests("ns", OPERATOR_IMAGE), "Deployment")
    (container,) = plain["spec"]["template"]["spec"]["containers"]
    assert "--notebook-toleration" not in container["command"]


def test_tfkubes_pods_get_their_service_account_token_explicitly() -> None:
    """The operator and the server reach the API server with their ServiceAccount's token
    from a projected volume at the in-cluster path (automount off): the same on a cluster
    whose ServiceAccount admission plugin is off (the test cluster's)."""
    for deployment in (
        _one(install_manifests(), "Deployment"),
        _one(server_manifests("ns", OPERATOR_IMAGE), "Deployment"),
    ):
        pod = deployment["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
        (volume,) = [v for v in pod["volumes"] if "projected" in v]
        sources = volume["projected"]["sources"]
        assert sources[0]["serviceAccountToken"]["path"] == "token"
        assert sources[1]["configMap"]["name"] == "kube-root-ca.crt"
        (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
        assert mount == {
            "name": volume["name"],
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            "readOnly": True,
        }


def test_cli_places_both_pods_and_refuses_a_malformed_toleration() -> None:
    argv = [sys.executable, "-m", "tfkube", "install", "--server", "--print"]
    placed = ["--node-selector", "pool=platform", "--toleration", "pool:NoSchedule"]
    proc = subprocess.run([*argv, *placed], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    pods = [o["spec"]["template"]["spec"] for o in yaml.safe_load_all(proc.stdout)
            if o["kind"] == "Deployment"]  # fmt: skip
    assert len(pods) == 2
    for pod in pods:
        assert pod["nodeSelector"] == {"pool": "platform"}
        assert pod["tolerations"] == [{"key": "pool", "operator": "Exists", "effect": "NoSchedule"}]
    bad = subprocess.run(
        [*argv, "--toleration", "pool:Always"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2
    assert "--toleration 'pool:Always'" in bad.stderr
    assert "NoSchedule" in bad.stderr
    notebooks = ["--notebook-node-selector", "pool=nb", "--notebook-toleration", "pool=nb"]
    proc = subprocess.run([*argv, *notebooks], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    (server,) = [o for o in yaml.safe_load_all(proc.stdout)
                 if o["kind"] == "Deployment" and o["metadata"]["name"] == SERVER_NAME]  # fmt: skip
    assert server["spec"]["template"]["spec"]["containers"][0]["command"][-4:] == notebooks
    alone = subprocess.run(
        [*argv[:4], "--print", *notebooks[:2]], capture_output=True, text=True, timeout=60
    )
    assert alone.returncode == 2
    assert "go with --server" in alone.stderr


@pytest.mark.parametrize(
    ("flag", "value"), [("--notebook-toleration", "pool:Often"), ("--notebook-node-selector", "x")]
)
def test_the_server_refuses_a_malformed_notebook_placement(
    flag: str, value: str, tmp_path: Any
) -> None:
    env = {**os.environ, "TFKUBE_HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "tfkube", "server", flag, value],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert f"{flag} {value!r}: give KEY" in " ".join(proc.stderr.split())
