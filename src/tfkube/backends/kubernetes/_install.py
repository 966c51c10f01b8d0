"""`tfkube install`: apply the CRD, the operator's namespace, RBAC and Deployment to the
cluster of a kubeconfig. The objects come from `tfkube.render.install_manifests` (pure);
this module only sends them.

Server-side apply (field manager `tfkube-install`, conflicts forced) makes install
idempotent and an upgrade at the same time: running it again changes only what differs,
and fields other managers own (e.g. a replica count someone scaled) are left alone unless
we set them too. `dry_run=True` sends every object with `dryRun=All`, so the API server
validates and admits it without storing anything.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfkube.render import (
    CRD_NAME,
    OPERATOR_IMAGE,
    OPERATOR_NAMESPACE,
    install_manifests,
)

FIELD_MANAGER = "tfkube-install"


class InstallError(RuntimeError):
    """The cluster refused an object, or the CRD never became established."""


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


def api_client_from(kubeconfig: Path | None = None, context: str | None = None) -> Any:
    """An official `kubernetes` ApiClient for a kubeconfig (default: $KUBECONFIG or
    ~/.kube/config), or the in-cluster service account when there is no kubeconfig."""
    from kubernetes import config

    try:
        return config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig) if kubeconfig else None, context=context
        )
    except config.ConfigException:
        if kubeconfig is not None:
            raise
        config.load_incluster_config()  # type: ignore[no-untyped-call]
        from kubernetes import client

        return client.ApiClient()


def _message(exc: Any) -> str:
    import json

    try:
        return str(json.loads(exc.body).get("message", exc.body))
    except (TypeError, ValueError, AttributeError):
        return str(exc)


def install(
    api_client: Any,
    *,
    namespace: str = OPERATOR_NAMESPACE,
    image: str = OPERATOR_IMAGE,
    dry_run: bool = False,
    timeout: float = 60.0,
    progress: Callable[[Applied], None] = lambda _: None,
) -> list[Applied]:
    """Apply every install object in order; wait until the CRD is established.

    Raises InstallError naming the object the API server refused."""
    from kubernetes.client.exceptions import ApiException
    from kubernetes.dynamic import DynamicClient

    dynamic = DynamicClient(api_client)  # type: ignore[no-untyped-call]
    done: list[Applied] = []
    namespace_missing = False
    for obj in install_manifests(namespace, image):
        meta = obj["metadata"]
        kind, name, ns = obj["kind"], meta["name"], meta.get("namespace")
        resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=kind)
        if dry_run and ns is not None and namespace_missing:
            # A dry-run namespace is not stored, so nothing can be validated inside it.
            result = Applied(kind, name, ns, f"skipped: namespace {ns} does not exist yet")
            done.append(result)
            progress(result)
            continue
        try:
            resource.server_side_apply(
                body=obj,
                name=name,
                namespace=ns,
                field_manager=FIELD_MANAGER,
                force_conflicts=True,
                dry_run="All" if dry_run else None,
            )
        except ApiException as exc:
            refused = f"{kind} {name}: the API server refused it: {_message(exc)}"
            raise InstallError(refused) from None
        if kind == "Namespace" and dry_run:
            try:
                dynamic.resources.get(api_version="v1", kind="Namespace").get(name=name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                namespace_missing = True
        result = Applied(kind, name, ns, "validated" if dry_run else "applied")
        done.append(result)
        progress(result)
    if not dry_run:
        _wait_established(dynamic, timeout)
    return done


def _wait_established(dynamic: Any, timeout: float) -> None:
    crds = dynamic.resources.get(
        api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition"
    )
    deadline = time.monotonic() + timeout
    while True:
        conditions = crds.get(name=CRD_NAME).to_dict().get("status", {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return
        if time.monotonic() > deadline:
            raise InstallError(f"CRD {CRD_NAME} was not established within {timeout:.0f}s")
        time.sleep(0.2)
