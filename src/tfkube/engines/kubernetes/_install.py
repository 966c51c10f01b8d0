"""`tfkube install`: apply the CRD, the operator's namespace, RBAC and Deployment to the
cluster of a kubeconfig (with `--server`, the platform server's objects too). The objects
come from `tfkube.render.install_manifests` and `server_manifests` (pure); this module
only sends them.

Server-side apply (field manager `tfkube-install`, conflicts forced) makes install
idempotent and an upgrade at the same time: running it again changes only what differs,
and fields other managers own (e.g. a replica count someone scaled) are left alone unless
we set them too. `dry_run=True` sends every object with `dryRun=All`, so the API server
validates and admits it without storing anything.

With `--database postgres` the PostgreSQL password is generated here (`secrets`) and its
Secret created only when it does not exist (a create, not an apply: running install again
keeps the password the database was made with); it is never printed, and the Secret is
sent before the StatefulSet that mounts it.

Before anything is applied, install reads the cluster's StorageClasses (and the claims
the administrator named) and says what jobs and the server will get; what could never
work (the server's data claim on a cluster without a default StorageClass, a class that
does not exist) is refused with what to give instead (`_storage_check`).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tfkube.engines.kubernetes._storage_check import find_storage, plan_storage
from tfkube.kube.errors import AlreadyExists, ApiError, NotFound
from tfkube.kube.names import CRD_NAME
from tfkube.kube.resources import CRD, NAMESPACE, SECRET, STATEFUL_SET, resource_for
from tfkube.kube.rest import Kube
from tfkube.render import (
    OPERATOR_IMAGE,
    OPERATOR_NAMESPACE,
    POSTGRES_NAME,
    POSTGRES_SECRET,
    Placement,
    ServerInstall,
    StorageDefaults,
    datacache_url,
    install_manifests,
    postgres_secret,
    server_manifests,
)

FIELD_MANAGER = "tfkube-install"


class InstallError(RuntimeError):
    """The cluster refused an object, or the CRD never became established."""

    def __init__(self, message: str, cause: ApiError | None = None) -> None:
        super().__init__(message)
        self.cause = cause
        """The API server's refusal, typed (`Forbidden`, `Invalid` with its `causes`, ...);
        None when nothing was refused (the CRD was not established in time)."""

    @property
    def status(self) -> int | None:
        """The refusal's HTTP status, if the API server refused something."""
        return self.cause.status if self.cause is not None else None


@dataclass(frozen=True)
class Applied:
    kind: str
    name: str
    namespace: str | None
    outcome: str
    """`applied`, `validated` (dry run) or `skipped: <why>`."""

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}: {self.outcome}"


def _path(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return resource_for(obj["apiVersion"], obj["kind"]).url(meta.get("namespace"), meta["name"])


def _apply(kube: Kube, obj: dict[str, Any], dry_run: bool) -> None:
    kind, name = obj["kind"], obj["metadata"]["name"]
    query = {"fieldManager": FIELD_MANAGER, "force": "true"}
    if dry_run:
        query["dryRun"] = "All"
    try:
        kube.request(
            "PATCH",
            _path(obj),
            body=obj,
            query=query,
            content_type="application/apply-patch+yaml",  # JSON is YAML
        )
    except ApiError as exc:
        message = f"{kind} {name}: the API server refused it: {exc.message}"
        raise InstallError(message, exc) from exc


def install(
    api_client: Any,
    *,
    namespace: str = OPERATOR_NAMESPACE,
    image: str = OPERATOR_IMAGE,
    dry_run: bool = False,
    timeout: float = 60.0,
    progress: Callable[[Applied], None] = lambda _: None,
    server: ServerInstall | None = None,
    storage: StorageDefaults | None = None,
    say: Callable[[str], None] = lambda _: None,
    placement: Placement | None = None,
) -> list[Applied]:
    """Apply every install object in order (with `server`, the platform server's too:
    `tfkube install --server`); wait until the CRD is established. `storage` is what the
    operator gives jobs that name no logs storage; what jobs and the server get is told
    to `say` first. `placement` is the operator's node selector and tolerations (the
    server's are `server.placement`).

    Raises InstallError naming the object the API server refused, or, before anything is
    applied, the storage that cannot work as asked."""
    kube = Kube(api_client)
    plan = plan_storage(find_storage(kube, namespace, server), namespace, server, storage)
    if plan.refusals:
        raise InstallError("nothing was installed: " + "; ".join(plan.refusals))
    for note in plan.notes:
        say(f"storage: {note}")
    done: list[Applied] = []
    namespace_missing = False
    cache = datacache_url(namespace) if server is not None and server.data_cache else None
    objects = install_manifests(namespace, image, storage, placement, cache)
    if server is not None:
        objects += server_manifests(namespace, image, server)
    for obj in objects:
        meta = obj["metadata"]
        kind, name, ns = obj["kind"], meta["name"], meta.get("namespace")
        if dry_run and ns is not None and namespace_missing:
            # A dry-run namespace is not stored, so nothing can be validated inside it.
            result = Applied(kind, name, ns, f"skipped: namespace {ns} does not exist yet")
            done.append(result)
            progress(result)
            continue
        if STATEFUL_SET.describes(obj) and name == POSTGRES_NAME:
            result = _ensure_postgres_secret(kube, ns or namespace, dry_run)
            done.append(result)
            progress(result)
        _apply(kube, obj, dry_run)
        if NAMESPACE.describes(obj) and dry_run and kube.get(NAMESPACE, None, name) is None:
            namespace_missing = True
        result = Applied(kind, name, ns, "validated" if dry_run else "applied")
        done.append(result)
        progress(result)
    if not dry_run:
        _wait_established(kube, timeout)
    return done


def _ensure_postgres_secret(kube: Kube, namespace: str, dry_run: bool) -> Applied:
    """Create the Secret with PostgreSQL's password unless it exists (never overwritten:
    the database keeps the password it was made with until the Secret is changed)."""
    secret = postgres_secret(namespace, secrets.token_urlsafe(32))
    query = {"fieldManager": FIELD_MANAGER}
    if dry_run:
        query["dryRun"] = "All"
    try:
        made = kube.request(
            "POST", SECRET.url(namespace), body=secret, query=query, allow=(AlreadyExists,)
        )
    except ApiError as exc:
        message = f"Secret {POSTGRES_SECRET}: the API server refused it: {exc.message}"
        raise InstallError(message, exc) from exc
    if made is None:
        outcome = "kept (it exists: the password is not changed)"
    else:
        outcome = "validated" if dry_run else "created with a generated password"
    return Applied("Secret", POSTGRES_SECRET, namespace, outcome)


def _wait_established(kube: Kube, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        crd = kube.get(CRD, None, CRD_NAME)
        conditions = ((crd or {}).get("status") or {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return
        if time.monotonic() > deadline:
            raise InstallError(f"CRD {CRD_NAME} was not established within {timeout:.0f}s")
        time.sleep(0.2)


def apply_objects(api_client: Any, objects: list[dict[str, Any]], dry_run: bool = False) -> None:
    """Server-side apply plain objects in order (idempotent), e.g. a team's namespace and
    quota for the tfkube server. Raises InstallError naming the refused object."""
    kube = Kube(api_client)
    for obj in objects:
        _apply(kube, obj, dry_run)


def delete_objects(api_client: Any, objects: list[dict[str, Any]]) -> None:
    """Delete plain objects by name, in reverse order (gone already is fine); what a
    `Foreground` delete leaves (a StatefulSet's claims) stays."""
    kube = Kube(api_client)
    for obj in reversed(objects):
        kube.request(
            "DELETE", _path(obj), body={"propagationPolicy": "Background"}, allow=(NotFound,)
        )
