"""The server's settings: what `tfkube server` takes on its command line."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tfkube import contract
from tfkube.engines import METADATA_ADDRESSES, EngineSettings
from tfkube.server.core.store import StoreConfig

DEFAULT_PORT = 8470


def default_data_dir() -> Path:
    """$TFKUBE_HOME/server, else ~/.tfkube/server."""
    return contract.home_dir() / "server"


@dataclass(frozen=True)
class ServerSettings:
    data_dir: Path = field(default_factory=default_data_dir)
    """Everything the server keeps: database (SQLite), blobs, the teams' jobs and outputs."""
    host: str = "127.0.0.1"
    """Loopback by default: put a TLS-terminating proxy in front to serve a network."""
    port: int = DEFAULT_PORT
    grpc_port: int | None = None
    """Where TensorFlow Serving's gRPC API is served through the server (on `host`), for
    the model servers a caller's API token may use (`api/grpc_proxy.py`); None: not."""
    engine: str = "local"
    """local (processes on this machine) or kubernetes (TFJobs in each team's namespace)."""
    database_url: str | None = None
    """None: SQLite in the data dir; `postgresql://user@host:port/db` for PostgreSQL."""
    public_url: str | None = None
    """How browsers reach the server (links, the Origin check); default http://host:port."""
    code_url: str | None = None
    """How replicas reach the server to fetch code; default the public URL (locally), the
    server's Service in a cluster."""
    kubeconfig: Path | None = None
    """Kubernetes engine: the kubeconfig (default: in-cluster, $KUBECONFIG)."""
    outputs_claim: str | None = None
    """Kubernetes engine: a ReadWriteMany claim name, present in every team namespace and
    mounted by the server at `<data-dir>/teams/<team>/outputs`, where jobs write their
    logs and summaries (see docs/kubernetes.md). None: logs come from the pod log API."""
    serving_runtime: str = "tensorflow-serving"
    """Kubernetes engine: the model server a request that names none gets (the stock
    TensorFlow Serving image, or tfkube's). The local engine always runs tfkube's."""
    service_network: str = "auto"
    """Kubernetes engine: how the server reaches model servers' Services for gRPC
    (`--kube-service-network`, `tfkube.engines.SERVICE_NETWORKS`): `auto` when it runs in
    the cluster; `cluster-ip` or `dns` for a server outside on a host that reaches the
    Service network; `none` never."""
    serving_max_replicas: int = 4
    """Kubernetes engine: the most replicas an autoscaled model server may have
    (`--serving-max-replicas`); a team's quota may allow fewer
    (`workloads.model_servers.autoscale_problems`)."""
    notebook_node_selector: Mapping[str, str] = field(default_factory=dict)
    """Kubernetes engine: the node labels notebooks' pods require
    (`--notebook-node-selector KEY=VALUE`); none: any node."""
    notebook_tolerations: tuple[Mapping[str, str], ...] = ()
    """Kubernetes engine: the taints notebooks' pods tolerate (`--notebook-toleration
    KEY[=VALUE][:EFFECT]`, as Kubernetes tolerations)."""
    ingress_from: tuple[str, ...] = ()
    """Kubernetes engine: CIDRs outside the pod network that may reach team pods
    (`--kube-ingress-from`); empty: the API servers' own addresses."""
    platform_namespace: str = "tfkube-system"
    """Kubernetes engine: tfkube's own namespace (`--kube-platform-namespace`)."""
    egress_deny: tuple[str, ...] = METADATA_ADDRESSES
    """Kubernetes engine: CIDRs team pods may not connect to (`--kube-egress-deny`)."""
    cpus: float | None = None
    """Local engine: CPUs jobs may request together (default: this machine's)."""
    memory: int | None = None
    """Local engine: bytes of memory jobs may request together (default: this machine's)."""
    workload_env: tuple[str, ...] = ()
    """Variables of the server's environment every workload gets too (an allow-list on top
    of PATH, LANG, LC_*, TZ and TLS settings): never the server's whole environment."""
    sync_seconds: float = 1.0
    """How often job status is read from the engine into the database."""
    session_hours: float = 12.0
    tensorboard_idle_seconds: float = 600.0
    """A job's TensorBoard is stopped after this long without a request."""
    notebook_idle_seconds: float = 3600.0
    """A notebook is stopped after this long without activity (no request through the
    proxy, no busy kernel, no open connection); opening it again starts it."""
    secure_cookies: bool = False
    """Mark cookies Secure (set when served over https)."""
    trusted_proxies: tuple[str, ...] = ()
    """Addresses or CIDRs of the proxies in front (`--trusted-proxy`): only a request from
    one of them has its `X-Forwarded-For`/`-Proto` read; none by default (the peer is
    the client)."""
    workload_url: str | None = None
    """Where TensorBoards and notebooks are served to browsers, each on its own name below
    a wildcard (`https://*.wl.example.com`, see `core/origins.py`). None: `*.localhost` on
    the server's port, for a dashboard reached on loopback."""
    allow_fetch_from: tuple[str, ...] = ()
    """Address ranges (CIDR) the server may fetch members' code URLs from although they
    are loopback, link-local or private (`core/fetch.py` refuses those otherwise)."""
    package_indexes: tuple[str, ...] = ()
    """Local engine: the package indexes a confined job's requirements.txt step may
    reach through its proxy (`--package-index`; the first one is uv's index); empty:
    PyPI (pypi.org and files.pythonhosted.org on 443)."""

    smtp_server: str | None = None
    """`HOST:PORT` of the SMTP server notifications are e-mailed through (`--smtp-server`;
    plain SMTP, no login: a relay that trusts this machine). None: no e-mail."""
    smtp_from: str = "tfkube@localhost"
    """The sender of those e-mails (`--smtp-from`)."""
    store: StoreConfig | None = None
    """Where artifacts' blobs live (`--store s3://bucket/prefix`, `core/store.py`); None:
    `<data-dir>/blobs`."""
    keep_local_days: float | None = None
    """With `--store`: days an ended job keeps its local outputs once archived
    (`--keep-local`); None: kept."""
    archive_retention_days: float | None = None
    """With `--store`: days a job's archive is kept (`--archive-retention`); None: forever."""
    retention_interval: float = 300.0
    """Seconds between two passes of the retention loop (`retention.py`)."""

    @property
    def engine_settings(self) -> EngineSettings:
        return EngineSettings(
            kind=self.engine,
            data_dir=self.data_dir,
            kubeconfig=self.kubeconfig,
            outputs_claim=self.outputs_claim,
            serving_runtime=self.serving_runtime,
            service_network=self.service_network,
            notebook_node_selector=self.notebook_node_selector,
            notebook_tolerations=self.notebook_tolerations,
            ingress_from=self.ingress_from,
            platform_namespace=self.platform_namespace,
            egress_deny=self.egress_deny,
            cpus=self.cpus,
            memory=self.memory,
            workload_env=self.workload_env,
            fetch_allowed=self.allow_fetch_from,
            package_indexes=self.package_indexes,
        )

    @property
    def base_url(self) -> str:
        if self.public_url:
            return self.public_url.rstrip("/")
        host = "127.0.0.1" if self.host in {"0.0.0.0", "::", ""} else self.host
        return f"http://{host}:{self.port}"

    @property
    def replica_url(self) -> str:
        return (self.code_url or self.base_url).rstrip("/")
