"""The Kubernetes engine as the platform server sees it (`tfkube.engines.Engine`): each
team is a namespace with its quota; its jobs are TFJobs (run by the operator), its model
servers and notebooks are objects in that namespace, its TensorBoards the jobs' own; the
proxy reaches them through the API server's service proxy.

Jobs keep their outputs on the team's outputs claim, under the job's name (`<claim>/<job>`,
mounted by the server at `<data dir>/teams/<team>/outputs`), when the server was given one;
else the server reads logs from pods while they exist. The cluster queues jobs and
enforces quotas, so the server does not (`capacity` is None)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tfkube.engines._base import Backend
from tfkube.engines._workloads import (
    Features,
    JobStorage,
    ModelServerWorkload,
    NotAvailable,
    NotebookWorkload,
    Runner,
    RunnersByKind,
    Tenant,
    TensorBoardWorkload,
)
from tfkube.engines.kubernetes._backend import KubernetesBackend
from tfkube.engines.kubernetes._install import apply_objects
from tfkube.engines.kubernetes._services import (
    KubeModelServers,
    KubeNotebooks,
    KubeTensorBoards,
    ServiceProxy,
)
from tfkube.kube.rest import api_client_from
from tfkube.render import ServingRuntime, parse_runtime, tenant_objects


class KubernetesEngine(RunnersByKind):
    name = "kubernetes"
    keeps_running = True
    """Pods outlive the server; the next one finds them by name."""
    features = Features(
        data_sets=False,
        tensorboard_on_demand=False,
        namespaces=True,
        replica_usage=True,
        polled_usage=True,
        data_sets_hint=(
            "uploaded data sets reach jobs on the local engine only; on Kubernetes give the "
            "job a claim holding the data (spec.storage.data.claimName)"
        ),
    )

    def __init__(
        self,
        data_dir: Path,
        kubeconfig: Path | None = None,
        outputs_claim: str | None = None,
        serving_runtime: str | None = None,
        api_client: Any = None,
    ) -> None:
        self.data_dir = data_dir
        self.kubeconfig = kubeconfig
        self.outputs_claim = outputs_claim
        self.serving_runtime = parse_runtime(serving_runtime, ServingRuntime.TENSORFLOW_SERVING)
        self._api = api_client
        self._runners: dict[type, Runner] | None = None
        self._backends: dict[str, KubernetesBackend] = {}
        self._lock = threading.Lock()

    def api_client(self) -> Any:
        with self._lock:
            if self._api is None:
                self._api = api_client_from(self.kubeconfig)
            return self._api

    def runners(self) -> Mapping[type, Runner]:
        """Made on first use, as the API client is."""
        if self._runners is None:
            api = self.api_client()
            proxy = ServiceProxy(api)
            self._runners = {
                ModelServerWorkload: KubeModelServers(api, proxy),
                NotebookWorkload: KubeNotebooks(api, proxy),
                TensorBoardWorkload: KubeTensorBoards(proxy),
            }
        return self._runners

    # -- tenants and jobs ---------------------------------------------------------------

    def prepare_tenant(self, tenant: Tenant) -> None:
        """The team's namespace and the ResourceQuota holding its quota (server-side
        apply, idempotent)."""
        objects = tenant_objects(tenant.namespace, tenant.quota, tenant.pod_security)
        apply_objects(self.api_client(), objects)

    def jobs(self, tenant: Tenant) -> Backend:
        api = self.api_client()
        with self._lock:
            found = self._backends.get(tenant.name)
            if found is None or found.namespace != tenant.namespace:
                found = KubernetesBackend(api_client=api, namespace=tenant.namespace)
                self._backends[tenant.name] = found
            return found

    def job_storage(self, tenant: Tenant, job_id: str, name: str) -> JobStorage:
        if self.outputs_claim is not None:
            # Kept outputs live under the job's name on the team's claim (its subPath).
            out = self.data_dir / "teams" / tenant.name / "outputs" / name
            return JobStorage(out, logs_claim=self.outputs_claim)
        # No shared folder: the replicas ship their logs, event files and result to the
        # server, which keeps them here, one folder per job (its id: names are reused).
        out = self.data_dir / "teams" / tenant.name / "shipped" / job_id
        return JobStorage(out, ship=True)

    def stage_data(self, tenant: Tenant, storage: JobStorage, archive: Path) -> None:
        raise NotAvailable(self.features.data_sets_hint)

    def capacity(self) -> None:
        return None

    def model_server_runtime(self, asked: str | None) -> str:
        return parse_runtime(asked, self.serving_runtime).value

    def close(self) -> None:
        with self._lock:
            if self._api is not None:
                self._api.close()
                self._api = None
