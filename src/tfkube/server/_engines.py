"""One backend per team: the server reaches jobs only through the `Backend` interface.

- local: `LocalBackend(home=<data-dir>/teams/<team>/engine)`, so teams may reuse job
  names and each team's jobs live in their own folder;
- kubernetes: `KubernetesBackend(namespace=<the team's namespace>)`; the namespace and
  its ResourceQuota (the team's quota) are created when the team is.

Backends are cheap objects, cached per team.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from tfkube.engines import Backend
from tfkube.kube.names import (
    GROUP,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    PLURAL,
    TENANT_OBJECTS,
)
from tfkube.kube.rest import Endpoint
from tfkube.server.core.config import ServerSettings
from tfkube.server.core.tables import Team

DEFAULT_REQUEST = {"cpu": "500m", "memory": "512Mi"}
"""What a container that asks for nothing is counted as in a team namespace with a quota
(a LimitRange default): Kubernetes refuses a pod without requests where a quota counts
them. Half a core, as the local queue counts it (`_admission.DEFAULT_REPLICA_CPU`)."""


def quota_hard(quota: dict[str, Any]) -> dict[str, str]:
    """A team's quota as a ResourceQuota's `hard` (pure). Requests only: a quota on limits
    would force a limit on every container, and a default memory limit kills training
    that needs more; requests are what the scheduler reserves, so they are what is shared."""
    hard: dict[str, str] = {}
    if quota.get("cpu") is not None:
        hard["requests.cpu"] = f"{quota['cpu']:g}"
    if quota.get("memory") is not None:
        hard["requests.memory"] = str(int(quota["memory"]))
    if quota.get("gpu") is not None:
        hard["requests.nvidia.com/gpu"] = str(int(quota["gpu"]))
    if quota.get("jobs") is not None:
        hard[f"count/{PLURAL}.{GROUP}"] = str(int(quota["jobs"]))
    return hard


def tenant_objects(namespace: str, quota: dict[str, Any]) -> list[dict[str, Any]]:
    """A team's namespace and its quota, with default requests where the quota counts
    CPU or memory (pure)."""
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: "tenant"}
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}}
    ]
    hard = quota_hard(quota)
    meta = {"name": TENANT_OBJECTS, "namespace": namespace, "labels": labels}
    if hard:
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": dict(meta),
                "spec": {"hard": hard},
            }
        )
    if "requests.cpu" in hard or "requests.memory" in hard:
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "LimitRange",
                "metadata": dict(meta),
                "spec": {
                    "limits": [{"type": "Container", "defaultRequest": dict(DEFAULT_REQUEST)}]
                },
            }
        )
    return objects


class Engines:
    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.kind = settings.engine
        self._cache: dict[str, Backend] = {}
        self._lock = threading.Lock()
        self._api: Any = None
        self._endpoint: Endpoint | None = None
        if self.kind not in {"local", "kubernetes"}:
            raise ValueError(f"unknown engine {self.kind!r}; choose local or kubernetes")

    def team_root(self, team: str) -> Path:
        return self.settings.data_dir / "teams" / team

    def outputs(self, team: str) -> Path:
        """Where the team's jobs write logs, summaries and checkpoints (as the server sees it)."""
        return self.team_root(team) / "outputs"

    def api_client(self) -> Any:
        if self._api is None:
            from tfkube.engines.kubernetes import api_client_from

            self._api = api_client_from(self.settings.kubeconfig)
        return self._api

    def endpoint(self) -> Endpoint:
        """The API server for the proxy (TLS context made once)."""
        if self._endpoint is None:
            self._endpoint = Endpoint.of(self.api_client())
        return self._endpoint

    def backend(self, team: str, namespace: str) -> Backend:
        with self._lock:
            found = self._cache.get(team)
            if found is not None:
                return found
            backend: Backend
            if self.kind == "local":
                from tfkube.engines.local import LocalBackend

                backend = LocalBackend(home=self.team_root(team) / "engine")
            else:
                from tfkube.engines.kubernetes import KubernetesBackend

                backend = KubernetesBackend(api_client=self.api_client(), namespace=namespace)
            self._cache[team] = backend
            return backend

    def prepare_team(self, team: Team) -> None:
        """Make a (new or changed) team ready: its folders locally; in a cluster its
        namespace and the ResourceQuota holding its quota (server-side apply, idempotent)."""
        if self.kind == "local":
            self.outputs(team.name).mkdir(parents=True, exist_ok=True)
            return
        from tfkube.engines.kubernetes import apply_objects

        apply_objects(self.api_client(), tenant_objects(team.namespace, team.quota or {}))

    def close(self) -> None:
        if self._api is not None:
            self._api.close()
            self._api = None
