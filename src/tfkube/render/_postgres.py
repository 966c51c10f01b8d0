"""PostgreSQL for the platform server in a cluster: what `tfkube install --server --database
postgres` adds (pure).

    ServiceAccount  tfkube-postgres   no RBAC, no token mounted: it never calls the API
    Service         tfkube-postgres   headless (the StatefulSet's), :5432; its DNS name
                                      resolves only while the pod is Ready (pg_isready)
    NetworkPolicy   tfkube-postgres   only the server's pods reach it, on 5432 (`clients`)
    StatefulSet     tfkube-postgres   one replica of POSTGRES_IMAGE, data on a claim (its
                                      template's `data-tfkube-postgres-0`, or the
                                      administrator's `database_claim`)

The Secret `tfkube-postgres` (key `password`: the `tfkube` role's password) is not
rendered here: `tfkube install` generates the password and creates the Secret only when
it does not exist yet (an install run again keeps it), so no password is ever in printed
or written manifests. The server reads it as `PGPASSWORD` (a secretKeyRef, which libpq
reads) with a URL that holds no password; the PostgreSQL pod reads it from a mounted file.

The pod's start-up script (`START`, in the manifest rather than in the image, so any image
with PostgreSQL's programs on PATH and a `postgres` user of uid 999 can run it, as the
Docker Library's `postgres` images are made; not tried here, nothing can be pulled): on
an empty claim `initdb` (peer auth on the socket for the `postgres` superuser: `kubectl
exec` for backups; SCRAM over TCP for the role `tfkube` and its database `tfkube` only),
then at every start the role's password is set from the Secret (single-user mode, nothing
listening), so changing the Secret and restarting the pods rotates it; then `postgres` in
the foreground with its socket in /tmp (the root file system is read-only). A preStop hook
asks it for a fast shutdown (`pg_ctl stop -m fast`), so a deleted pod shuts down cleanly
even though its clients (the server's pool) keep connections open (the SIGTERM that
follows alone would wait for them: a "smart" shutdown).
"""

from __future__ import annotations

from typing import Any

from tfkube.kube.names import LABEL_MANAGED_BY, MANAGED_BY

POSTGRES_NAME = "tfkube-postgres"
POSTGRES_IMAGE = "ghcr.io/tfkube/postgres:15-bookworm"
"""Built here by tools/kube/images.py (Debian bookworm's postgresql-15); an image with
PostgreSQL's programs on PATH and a `postgres` user of uid 999 can replace it
(`--postgres-image`)."""
POSTGRES_PORT = 5432
POSTGRES_UID = 999
POSTGRES_SECRET = "tfkube-postgres"
POSTGRES_SECRET_KEY = "password"
POSTGRES_USER = "tfkube"
POSTGRES_DATABASE = "tfkube"
POSTGRES_DATA = "/var/lib/postgresql/data"
PGDATA = f"{POSTGRES_DATA}/pgdata"
"""A folder inside the claim: PostgreSQL wants its data folder owned by it with mode 0700,
which a volume's root (owned by root, or lost+found beside it) may not be."""
PASSWORD_DIR = "/etc/tfkube-postgres"
DEFAULT_DATABASE_SIZE = "10Gi"

START = f"""set -eu
umask 077
pw=$(cat {PASSWORD_DIR}/{POSTGRES_SECRET_KEY})
case "$pw" in
  ''|*\\'*|*\\\\*) echo "tfkube-postgres: the Secret's password is empty or has a quote or \
backslash" >&2; exit 1;;
esac
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  echo "tfkube-postgres: a new database cluster in $PGDATA"
  initdb --pgdata="$PGDATA" --username=postgres --auth-local=peer --auth-host=reject \
--encoding=UTF8 --locale=C.UTF-8 --no-instructions
  echo "host {POSTGRES_DATABASE} {POSTGRES_USER} all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  printf 'CREATE ROLE {POSTGRES_USER} LOGIN;\\nCREATE DATABASE {POSTGRES_DATABASE} OWNER \
{POSTGRES_USER};\\n' | postgres --single -D "$PGDATA" postgres >/dev/null
fi
printf "ALTER ROLE {POSTGRES_USER} PASSWORD '%s';\\n" "$pw" \
| postgres --single -D "$PGDATA" postgres >/dev/null
unset pw
echo "tfkube-postgres: starting"
exec postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/tmp
"""
"""The container's `sh -c` script (see the module docstring)."""


def postgres_host(namespace: str) -> str:
    return f"{POSTGRES_NAME}.{namespace}.svc"


def postgres_url(namespace: str) -> str:
    """The server's database URL: no password (libpq reads `PGPASSWORD`)."""
    return (
        f"postgresql://{POSTGRES_USER}@{postgres_host(namespace)}:{POSTGRES_PORT}/"
        f"{POSTGRES_DATABASE}"
    )


def _labels() -> dict[str, str]:
    return {LABEL_MANAGED_BY: MANAGED_BY, **_selector()}


def _selector() -> dict[str, str]:
    return {"app.kubernetes.io/name": "tfkube", "app.kubernetes.io/component": "database"}


def postgres_secret(namespace: str, password: str) -> dict[str, Any]:
    """The Secret install creates once (never printed: `password` is generated then)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": POSTGRES_SECRET, "namespace": namespace, "labels": _labels()},
        "type": "Opaque",
        "stringData": {POSTGRES_SECRET_KEY: password},
    }


def postgres_secret_command(namespace: str) -> str:
    """How an administrator makes the Secret by hand (applying printed manifests)."""
    return (
        f"kubectl -n {namespace} create secret generic {POSTGRES_SECRET} "
        f'--from-literal={POSTGRES_SECRET_KEY}="$(openssl rand -hex 24)"'
    )


def _statefulset(
    namespace: str,
    image: str,
    claim: str | None,
    storage_class: str | None,
    size: str,
    pod_fields: dict[str, Any],
) -> dict[str, Any]:
    mounts = [
        {"name": "data", "mountPath": POSTGRES_DATA},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "password", "mountPath": PASSWORD_DIR, "readOnly": True},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "tmp", "emptyDir": {}},
        {
            "name": "password",
            "secret": {
                "secretName": POSTGRES_SECRET,
                "items": [{"key": POSTGRES_SECRET_KEY, "path": POSTGRES_SECRET_KEY}],
                "defaultMode": 0o440,
            },
        },
    ]
    spec: dict[str, Any] = {
        "serviceName": POSTGRES_NAME,
        "replicas": 1,
        "selector": {"matchLabels": _selector()},
        "template": {
            "metadata": {"labels": _labels()},
            "spec": {
                "serviceAccountName": POSTGRES_NAME,
                "automountServiceAccountToken": False,
                "enableServiceLinks": False,
                **pod_fields,
                "terminationGracePeriodSeconds": 60,
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": POSTGRES_UID,
                    "runAsGroup": POSTGRES_UID,
                    "fsGroup": POSTGRES_UID,  # the claim (and the Secret's file) readable
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "containers": [
                    {
                        "name": "postgres",
                        "image": image,
                        "command": ["sh", "-c", START],
                        "env": [{"name": "PGDATA", "value": PGDATA}],
                        "ports": [
                            {"name": "postgres", "containerPort": POSTGRES_PORT, "protocol": "TCP"}
                        ],
                        "readinessProbe": {
                            "exec": {
                                "command": [
                                    "pg_isready",
                                    "--quiet",
                                    "--host=/tmp",
                                    f"--port={POSTGRES_PORT}",
                                ]
                            },
                            "periodSeconds": 5,
                            "failureThreshold": 3,
                        },
                        "lifecycle": {
                            "preStop": {
                                "exec": {
                                    "command": [
                                        "pg_ctl",
                                        "stop",
                                        "--mode=fast",
                                        # The signal only: waiting here would outlive the
                                        # container (PID 1 is postgres) and fail the hook.
                                        "--no-wait",
                                        f"--pgdata={PGDATA}",
                                    ]
                                }
                            }
                        },
                        "resources": {
                            "requests": {"cpu": "100m", "memory": "256Mi"},
                            "limits": {"memory": "1Gi"},
                        },
                        "securityContext": {
                            "allowPrivilegeEscalation": False,
                            "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]},
                        },
                        "volumeMounts": mounts,
                    }
                ],
                "volumes": volumes,
            },
        },
    }
    if claim:
        volumes.insert(0, {"name": "data", "persistentVolumeClaim": {"claimName": claim}})
    else:
        claim_spec: dict[str, Any] = {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": size}},
        }
        if storage_class is not None:
            claim_spec["storageClassName"] = storage_class
        spec["volumeClaimTemplates"] = [
            {"metadata": {"name": "data", "labels": _labels()}, "spec": claim_spec}
        ]
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": POSTGRES_NAME, "namespace": namespace, "labels": _labels()},
        "spec": spec,
    }


def database_claim_name(claim: str | None) -> str:
    """The claim PostgreSQL's data is on (its StatefulSet's template's, unless named)."""
    return claim or f"data-{POSTGRES_NAME}-0"


def postgres_manifests(
    namespace: str,
    image: str = POSTGRES_IMAGE,
    claim: str | None = None,
    storage_class: str | None = None,
    size: str = DEFAULT_DATABASE_SIZE,
    pod_fields: dict[str, Any] | None = None,
    clients: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """PostgreSQL's ServiceAccount, headless Service, NetworkPolicy and StatefulSet, in
    the order to apply them (the Secret is install's: `postgres_secret`). The policy lets
    only the pods labelled `clients` (the server's) open a connection: the password still
    gates a login, and no other pod of the cluster, a team's above all, gets to try it."""
    labels = _labels()
    allowed = [{"podSelector": {"matchLabels": dict(clients)}}] if clients else []
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": POSTGRES_NAME, "namespace": namespace, "labels": labels},
            "automountServiceAccountToken": False,
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": POSTGRES_NAME, "namespace": namespace, "labels": labels},
            "spec": {
                "clusterIP": "None",
                "selector": _selector(),
                "ports": [
                    {
                        "name": "postgres",
                        "port": POSTGRES_PORT,
                        "targetPort": "postgres",
                        "protocol": "TCP",
                    }
                ],
            },
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": POSTGRES_NAME, "namespace": namespace, "labels": labels},
            "spec": {
                "podSelector": {"matchLabels": _selector()},
                "policyTypes": ["Ingress"],
                "ingress": [
                    {
                        "from": allowed,
                        "ports": [{"protocol": "TCP", "port": POSTGRES_PORT}],
                    }
                ]
                if allowed
                else [],
            },
        },
        _statefulset(namespace, image, claim, storage_class, size, pod_fields or {}),
    ]


WAIT_FOR_DATABASE = """import os, sys, time
import psycopg
url = os.environ["TFKUBE_DATABASE_URL"]
said = None
while True:
    try:
        psycopg.connect(url, connect_timeout=5).close()
        print("the database answers", flush=True)
        sys.exit(0)
    except psycopg.Error as exc:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if why != said:
            print(f"waiting for the database: {why}", flush=True)
            said = why
        time.sleep(2)
"""
"""The server pod's init container (tfkube's image has psycopg): connect and log in as the
server will (so a wrong password shows here, in words), every 2 s until it works; the
server then starts and runs the migrations."""
