"""`tfkube install --server --database postgres|external`: PostgreSQL's objects and the
server's database settings, rendered purely; the storage check for PostgreSQL's claim; the
image name tools/kube/images.py builds. The API server checks the same objects in
tests/cluster/test_render_dry_run.py; tests/cluster/test_real_node_postgres.py runs them."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import yaml

from tfkube.engines.kubernetes._storage_check import StorageFindings, plan_storage
from tfkube.kube.pod_security import template_violations
from tfkube.render import (
    POSTGRES_IMAGE,
    POSTGRES_SECRET,
    Placement,
    ServerInstall,
    dump_yaml,
    postgres_secret,
    server_manifests,
)
from tfkube.render._postgres import PGDATA, START, WAIT_FOR_DATABASE, postgres_url

PG = ServerInstall(database="postgres")


def _one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, (kind, name)
    return found[0]


def _server_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(_one(objects, "Deployment", "tfkube-server")["spec"]["template"]["spec"])


def test_objects_and_order():
    objects = server_manifests("ops", "img:1", PG)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("ServiceAccount", "tfkube-server"),
        ("ClusterRole", "tfkube-server"),
        ("ClusterRoleBinding", "tfkube-server"),
        ("PersistentVolumeClaim", "tfkube-server-data"),  # uploads and keys stay on a claim
        ("ServiceAccount", "tfkube-postgres"),
        ("Service", "tfkube-postgres"),
        ("NetworkPolicy", "tfkube-postgres"),
        ("StatefulSet", "tfkube-postgres"),
        ("Deployment", "tfkube-server"),
        ("Service", "tfkube-server"),
    ]
    # No Secret is rendered: install generates the password and creates it once.
    assert "Secret" not in [o["kind"] for o in objects]
    assert "&id" not in dump_yaml(objects)
    assert objects == server_manifests("ops", "img:1", PG)


def test_only_the_servers_pods_may_connect_to_postgres():
    """The password gates a login; the policy keeps every other pod (a team's) from
    trying: PostgreSQL's pods accept only the server's, on 5432."""
    objects = server_manifests("ops", "img:1", PG)
    policy = _one(objects, "NetworkPolicy", "tfkube-postgres")
    database = _one(objects, "StatefulSet", "tfkube-postgres")
    server = _one(objects, "Deployment", "tfkube-server")
    assert (
        policy["spec"]["podSelector"]["matchLabels"] == database["spec"]["selector"]["matchLabels"]
    )
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    (peer,) = rule["from"]
    labels = server["spec"]["template"]["metadata"]["labels"]
    assert peer["podSelector"]["matchLabels"].items() <= labels.items()
    assert rule["ports"] == [{"protocol": "TCP", "port": 5432}]


def test_postgres_runs_least_privileged_on_its_claim():
    objects = server_manifests("ops", "img:1", PG)
    sts = _one(objects, "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    assert template_violations(sts) == []  # Pod Security `restricted`
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == "tfkube-postgres"
    assert _one(objects, "ServiceAccount", "tfkube-postgres")["automountServiceAccountToken"] is (
        False
    )
    assert pod["securityContext"]["runAsUser"] == 999
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["image"] == POSTGRES_IMAGE
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["readinessProbe"]["exec"]["command"][0] == "pg_isready"
    assert container["lifecycle"]["preStop"]["exec"]["command"][:3] == [
        "pg_ctl",
        "stop",
        "--mode=fast",
    ]
    # The password is a mounted file, never an environment variable of PostgreSQL's.
    assert [e["name"] for e in container["env"]] == ["PGDATA"]
    assert {"name": "password", "mountPath": "/etc/tfkube-postgres", "readOnly": True} in (
        container["volumeMounts"]
    )
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["password"]["secret"]["secretName"] == POSTGRES_SECRET
    # Its data on the StatefulSet's claim (the default class), one writer.
    (template,) = sts["spec"]["volumeClaimTemplates"]
    assert template["metadata"]["name"] == "data"
    assert template["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert template["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert "storageClassName" not in template["spec"]
    assert "data" not in volumes
    # Reached by the headless Service's name (only while Ready).
    service = _one(objects, "Service", "tfkube-postgres")
    assert service["spec"]["clusterIP"] == "None"
    assert sts["spec"]["serviceName"] == "tfkube-postgres"
    assert service["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]


def test_an_administrators_claim_class_size_image_and_placement():
    options = ServerInstall(
        database="postgres",
        storage_class="fast",
        database_size="3Gi",
        postgres_image="registry.example.com/pg:15",
        placement=Placement({"pool": "platform"}, ({"key": "pool", "operator": "Exists"},)),
    )
    sts = _one(server_manifests("ops", "img", options), "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "registry.example.com/pg:15"
    assert pod["nodeSelector"] == {"pool": "platform"}
    assert pod["tolerations"] == [{"key": "pool", "operator": "Exists"}]
    (template,) = sts["spec"]["volumeClaimTemplates"]
    assert template["spec"]["storageClassName"] == "fast"
    assert template["spec"]["resources"]["requests"]["storage"] == "3Gi"

    named = ServerInstall(database="postgres", database_claim="pg-data")
    sts = _one(server_manifests("ops", "img", named), "StatefulSet")
    assert "volumeClaimTemplates" not in sts["spec"]
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"] == {"name": "data", "persistentVolumeClaim": {"claimName": "pg-data"}}


def test_the_server_waits_for_postgres_and_holds_no_password_in_its_spec():
    objects = server_manifests("ops", "img:1", PG)
    pod = _server_pod(objects)
    assert template_violations(_one(objects, "Deployment")) == []
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["TFKUBE_DATABASE_URL"] == {
        "name": "TFKUBE_DATABASE_URL",
        "value": "postgresql://tfkube@tfkube-postgres.ops.svc:5432/tfkube",
    }
    assert env["PGPASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": POSTGRES_SECRET,
        "key": "password",
    }
    (init,) = pod["initContainers"]
    assert init["name"] == "wait-for-database"
    assert init["image"] == "img:1"
    assert init["command"] == ["python3", "-c", WAIT_FOR_DATABASE]
    assert init["env"] == pod["containers"][0]["env"]
    assert init["securityContext"]["readOnlyRootFilesystem"] is True
    compile(WAIT_FOR_DATABASE, "wait-for-database", "exec")  # valid Python


def test_external_requires_its_secret_and_sqlite_keeps_the_optional_one():
    external = _server_pod(server_manifests("ops", "img", ServerInstall(database="external")))
    (env,) = [e for e in external["containers"][0]["env"] if e["name"] == "TFKUBE_DATABASE_URL"]
    assert env["valueFrom"]["secretKeyRef"] == {"name": "tfkube-server-database", "key": "url"}
    assert [c["name"] for c in external["initContainers"]] == ["wait-for-database"]
    kinds = [o["kind"] for o in server_manifests("ops", "img", ServerInstall(database="external"))]
    assert "StatefulSet" not in kinds

    sqlite = _server_pod(server_manifests("ops", "img"))
    assert "initContainers" not in sqlite
    (env,) = [e for e in sqlite["containers"][0]["env"] if e["name"] == "TFKUBE_DATABASE_URL"]
    assert env["valueFrom"]["secretKeyRef"]["optional"] is True


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"database": "mysql"}, "--database 'mysql': give one of sqlite, postgres, external"),
        ({"database_claim": "x"}, "--database-claim goes with --database postgres"),
        ({"database": "external", "database_claim": "x"}, "goes with --database postgres"),
    ],
)
def test_bad_database_options_are_refused(kwargs, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        ServerInstall(**kwargs)


def test_the_secret_install_creates_and_the_url():
    secret = postgres_secret("ops", "s3cret")
    assert secret["metadata"] == {
        "name": "tfkube-postgres",
        "namespace": "ops",
        "labels": secret["metadata"]["labels"],
    }
    assert secret["stringData"] == {"password": "s3cret"}
    assert "s3cret" not in postgres_url("ops")


def test_start_script_refuses_a_password_it_cannot_quote_and_inits_once():
    assert "initdb" in START
    assert '[ ! -s "$PGDATA/PG_VERSION" ]' in START  # an existing cluster is kept
    assert "ALTER ROLE tfkube PASSWORD" in START  # set from the Secret at every start
    assert "--auth-host=reject" in START  # TCP only for the role tfkube, database tfkube
    assert "host tfkube tfkube all scram-sha-256" in START
    assert PGDATA.startswith("/var/lib/postgresql/data/")


@pytest.mark.parametrize(
    ("found", "options", "words", "refused"),
    [
        pytest.param(
            StorageFindings(classes=()), PG,
            "no default StorageClass, so PostgreSQL's claim data-tfkube-postgres-0 would never "
            "be bound", True, id="bare-refused",
        ),
        pytest.param(
            StorageFindings(classes=(), claims={"pg": None}),
            ServerInstall(database="postgres", database_claim="pg", data_claim="d"),
            "warning: the claim pg in namespace ops (its data) does not exist yet: "
            "PostgreSQL's pod waits (Pending)", False, id="named-missing",
        ),
        pytest.param(
            StorageFindings(classes=(), claims={"pg": "Bound"}),
            ServerInstall(database="postgres", database_claim="pg", data_claim="d"),
            "PostgreSQL mounts its data from the claim pg in namespace ops (Bound)", False,
            id="named-bound",
        ),
        pytest.param(
            StorageFindings(classes=("std",), default_classes=("std",)), PG,
            "PostgreSQL keeps its data on a new claim data-tfkube-postgres-0 (10Gi) of the "
            "default StorageClass std", False, id="default-class",
        ),
        pytest.param(
            StorageFindings(classes=()), ServerInstall(database="external", data_claim="d"),
            "connects to the PostgreSQL named by the Secret tfkube-server-database", False,
            id="external",
        ),
    ],
)  # fmt: skip
def test_storage_check_for_postgres(found, options, words, refused):
    plan = plan_storage(found, "ops", options)
    said = " ".join(plan.refusals if refused else plan.notes)
    assert words in said, said
    assert bool(plan.refusals) is refused


def test_cli_prints_postgres_and_how_to_make_its_secret(tmp_path):
    argv = [sys.executable, "-m", "tfkube", "install", "--server", "-n", "ml"]
    proc = subprocess.run(
        [*argv, "--database", "postgres", "--print"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("# Before applying: PostgreSQL's password")
    assert "kubectl -n ml create secret generic tfkube-postgres" in proc.stdout
    objects = list(yaml.safe_load_all(proc.stdout))
    assert ("StatefulSet", "tfkube-postgres") in [
        (o["kind"], o["metadata"]["name"]) for o in objects
    ]
    assert "Secret" not in [o["kind"] for o in objects]
    written = subprocess.run(
        [*argv, "--database", "postgres", "--write-manifests", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert written.returncode == 0, written.stderr
    text = (tmp_path / "server.yaml").read_text()
    assert "create secret generic tfkube-postgres" in text
    image = _server_pod(objects)["containers"][0]["image"]
    assert list(yaml.safe_load_all(text)) == server_manifests("ml", image, PG)
    refused = subprocess.run(
        [*argv, "--database", "mysql", "--print"], capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2
    assert "give one of sqlite, postgres, external" in refused.stderr


def test_the_image_built_here_is_the_one_the_renderer_names():
    from cluster._support import load_cluster_module  # tests/cluster (stdlib tools loader)

    images = load_cluster_module()._sibling("images")
    assert images.POSTGRES_NAME == POSTGRES_IMAGE
    assert images.POSTGRES_UID == 999
    assert images.POSTGRES["env"]["PGDATA"] == PGDATA
