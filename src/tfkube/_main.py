"""The `tfkube` program: the CLI's commands plus `tfkube server`.

The CLI (`tfkube.cli`) and the server (`tfkube.server`) are independent layers (neither
imports the other: an import-linter contract); this module, above both, joins them into
one command line.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tfkube import contract
from tfkube.cli import app, fail, run_service

if TYPE_CHECKING:
    from tfkube.server.core.store import StoreConfig


@app.command("server")
def server_command(
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8470,
    grpc_port: Annotated[
        int | None,
        typer.Option(
            "--grpc-port",
            help="Also serve TensorFlow Serving's gRPC API for the teams' model servers on "
            "this port (metadata: authorization: Bearer <API token>, tfkube-model-server: "
            "<id>). Default: not served.",
        ),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="Where the server keeps its state (~/.tfkube/server)."),
    ] = None,
    engine: Annotated[
        str, typer.Option("--engine", help="Where jobs run: local or kubernetes.")
    ] = "local",
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            envvar=contract.DATABASE_URL,
            help="postgresql://user@host:port/db (default: SQLite in the data dir).",
        ),
    ] = None,
    public_url: Annotated[
        str | None, typer.Option("--public-url", help="How browsers reach this server.")
    ] = None,
    code_url: Annotated[
        str | None,
        typer.Option("--code-url", help="How replicas reach this server to fetch their code."),
    ] = None,
    kubeconfig: Annotated[
        Path | None, typer.Option("--kubeconfig", help="Kubernetes engine: kubeconfig file.")
    ] = None,
    outputs_claim: Annotated[
        str | None,
        typer.Option(
            "--outputs-claim",
            help="Kubernetes engine: the RWX claim (in every team namespace) jobs write to.",
        ),
    ] = None,
    serving_runtime: Annotated[
        str,
        typer.Option(
            "--serving-runtime",
            help="Kubernetes engine: the model server a request names none of: "
            "tensorflow-serving (the stock image) or tfkube (tfkube's, in tfkube's image).",
        ),
    ] = "tensorflow-serving",
    kube_service_network: Annotated[
        str,
        typer.Option(
            "--kube-service-network",
            help="Kubernetes engine: how the server reaches model servers' Services for "
            "gRPC (--grpc-port): auto (their DNS names when the server runs in the "
            "cluster, else not), cluster-ip (a host that routes the Service network, e.g. "
            "a node with kube-proxy), dns (a host resolving the cluster's names) or none.",
        ),
    ] = "auto",
    serving_max_replicas: Annotated[
        int,
        typer.Option(
            "--serving-max-replicas",
            min=1,
            max=100,
            help="Kubernetes engine: the most replicas an autoscaled model server may ask "
            "for (its maxReplicas; a team's quota may allow fewer).",
        ),
    ] = 4,
    notebook_node_selector: Annotated[
        list[str] | None,
        typer.Option(
            "--notebook-node-selector",
            help="Kubernetes engine: KEY=VALUE (repeatable), the nodes notebooks run on.",
        ),
    ] = None,
    notebook_toleration: Annotated[
        list[str] | None,
        typer.Option(
            "--notebook-toleration",
            help="Kubernetes engine: KEY[=VALUE][:EFFECT] (repeatable), a taint notebooks "
            "tolerate, e.g. a node pool kept for them.",
        ),
    ] = None,
    kube_ingress_from: Annotated[
        list[str] | None,
        typer.Option(
            "--kube-ingress-from",
            help="Kubernetes engine: CIDR (repeatable) outside the pod network that may open "
            "connections to team pods, besides the team's own pods and tfkube's namespace: "
            "where the API server's service proxy connects from (default: the API servers' "
            "own addresses, the `kubernetes` Service's endpoints).",
        ),
    ] = None,
    kube_egress_deny: Annotated[
        list[str] | None,
        typer.Option(
            "--kube-egress-deny",
            help="Kubernetes engine: CIDR (repeatable) team pods may not open connections "
            "to, e.g. a cloud's metadata service, which hands out the node's credentials "
            "(default: 169.254.169.254/32 and fd00:ec2::254/128; `none`: egress is not "
            "limited).",
        ),
    ] = None,
    kube_platform_namespace: Annotated[
        str,
        typer.Option(
            "--kube-platform-namespace",
            help="Kubernetes engine: tfkube's own namespace (where `tfkube install` put the "
            "operator and the server); its pods may reach team pods.",
        ),
    ] = "tfkube-system",
    cpus: Annotated[
        float | None, typer.Option("--cpus", help="Local engine: CPUs jobs may use together.")
    ] = None,
    workload_env: Annotated[
        list[str] | None,
        typer.Option(
            "--workload-env",
            help="A variable of the server's environment that every workload (job replica, "
            "notebook, model server, TensorBoard) gets too (repeatable; default: none beyond "
            "PATH, LANG, LC_*, TZ and TLS settings).",
        ),
    ] = None,
    notebook_idle_minutes: Annotated[
        float,
        typer.Option(
            "--notebook-idle-minutes",
            min=0.05,
            help="Stop a notebook after this long without activity (opening it starts it again).",
        ),
    ] = 60.0,
    trusted_proxy: Annotated[
        list[str] | None,
        typer.Option(
            "--trusted-proxy",
            help="A proxy in front of the server (address or CIDR; repeat for several): "
            "only its X-Forwarded-For/-Proto are read. Default: none (the peer is the client).",
        ),
    ] = None,
    workload_url: Annotated[
        str | None,
        typer.Option(
            "--workload-url",
            help="Where browsers get TensorBoards and notebooks, each on its own name: a "
            "wildcard URL such as https://*.wl.example.com (default: *.localhost on this "
            "port, for a dashboard opened on loopback).",
        ),
    ] = None,
    allow_fetch_from: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-fetch-from",
            help="An address range (CIDR) the server may fetch members' code URLs from "
            "although it is loopback, link-local or private (repeatable).",
        ),
    ] = None,
    package_index: Annotated[
        list[str] | None,
        typer.Option(
            "--package-index",
            help="Local engine: a package index URL (PEP 503 simple API) a confined job's "
            "requirements.txt installs from, the only host and port its install step may "
            "reach (repeatable; the first is the index, the others e.g. where it keeps its "
            "files). Default: PyPI (pypi.org and files.pythonhosted.org on 443).",
        ),
    ] = None,
    smtp_server: Annotated[
        str | None,
        typer.Option(
            "--smtp-server",
            help="HOST:PORT of an SMTP relay to e-mail job notifications through "
            "(plain SMTP, no login). Without it notifications go to webhooks only.",
        ),
    ] = None,
    smtp_from: Annotated[
        str, typer.Option("--smtp-from", help="The sender of notification e-mails.")
    ] = "tfkube@localhost",
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            help="s3://bucket/prefix: keep artifacts in this S3-compatible bucket (it must "
            "exist) instead of under --data-dir. Credentials: --store-credentials or "
            "TFKUBE_STORE_ACCESS_KEY_ID/TFKUBE_STORE_SECRET_ACCESS_KEY.",
        ),
    ] = None,
    store_endpoint: Annotated[
        str | None,
        typer.Option(
            "--store-endpoint",
            help="The S3-compatible store's URL (default: AWS S3).",
        ),
    ] = None,
    store_region: Annotated[
        str | None, typer.Option("--store-region", help="The store's region (us-east-1).")
    ] = None,
    store_credentials: Annotated[
        Path | None,
        typer.Option(
            "--store-credentials",
            help="A file (keep it 0600) with the lines 'access_key_id = ...' and "
            "'secret_access_key = ...' for --store.",
        ),
    ] = None,
    keep_local: Annotated[
        str | None,
        typer.Option(
            "--keep-local",
            metavar="DAYS",
            help="With --store: days an ended job keeps its local logs and outputs once "
            "archived (then they are read back from the archive; 0: at once). Default: kept.",
        ),
    ] = None,
    archive_retention: Annotated[
        str | None,
        typer.Option(
            "--archive-retention",
            metavar="DAYS",
            help="With --store: days an ended job's archive is kept. Default: forever.",
        ),
    ] = None,
    retention_interval: Annotated[
        float,
        typer.Option(
            "--retention-interval",
            hidden=True,
            help="Seconds between two passes of the retention loop.",
        ),
    ] = 300.0,
) -> None:
    """Run the platform server: REST API, accounts and teams, artifacts, kept logs.

    Ctrl-C, SIGTERM or SIGHUP shut it down cleanly (exit 0): on the local engine the
    TensorBoards, notebooks and model servers it runs here are stopped (model servers start
    again with it); jobs keep running and are followed again at its next start."""
    try:
        from tfkube.server import ServerSettings, serve
        from tfkube.server.core.config import default_data_dir
    except ImportError as exc:
        raise fail(f"{exc}; install the extra: pip install 'tfkube[server]'") from None
    from tfkube.render import (
        ServingRuntime,
        TenantNetwork,
        parse_egress_deny,
        parse_node_selector,
        parse_runtime,
        parse_toleration,
    )

    if engine not in {"local", "kubernetes"}:
        raise fail(f"unknown engine {engine!r}; choose local or kubernetes")
    try:
        runtime = parse_runtime(serving_runtime, ServingRuntime.TENSORFLOW_SERVING)
    except ValueError as exc:
        raise fail(f"--serving-runtime: {exc}") from None
    try:
        notebook_nodes = parse_node_selector(
            notebook_node_selector or [], "--notebook-node-selector"
        )
        notebook_taints = tuple(
            parse_toleration(t, "--notebook-toleration") for t in notebook_toleration or []
        )
    except ValueError as exc:
        raise fail(str(exc)) from None
    from tfkube.engines import parse_service_network
    from tfkube.netguard import index_target
    from tfkube.server.core.forwarded import parse_networks
    from tfkube.server.core.origins import parse_workload_url
    from tfkube.server.notifications import parse_smtp

    checks: list[tuple[str, Callable[[], object]]] = [
        ("--kube-service-network", lambda: parse_service_network(kube_service_network)),
        ("--kube-ingress-from", lambda: TenantNetwork(sources=tuple(kube_ingress_from or ()))),
        ("--kube-platform-namespace", lambda: TenantNetwork(kube_platform_namespace)),
        (
            "--kube-egress-deny",
            lambda: TenantNetwork(denied=parse_egress_deny(kube_egress_deny)),
        ),
        ("--trusted-proxy", lambda: parse_networks(trusted_proxy or [])),
        ("--allow-fetch-from", lambda: parse_networks(allow_fetch_from or [])),
        ("--package-index", lambda: [index_target(u) for u in package_index or []]),
        ("--workload-url", lambda: workload_url and parse_workload_url(workload_url)),
        ("--smtp-server", lambda: smtp_server and parse_smtp(smtp_server)),
    ]
    for option, check in checks:
        try:
            check()
        except ValueError as exc:
            raise fail(f"{option}: {exc}") from None
    from tfkube.server.outputs.archive import parse_days

    try:
        keep_local_days = parse_days("--keep-local", keep_local)
        archive_days = parse_days("--archive-retention", archive_retention)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if store is None and (keep_local_days is not None or archive_days is not None):
        raise fail(
            "--keep-local and --archive-retention apply to archives in --store s3://...; "
            "add --store or drop them"
        )
    if retention_interval <= 0:
        raise fail("--retention-interval: give a number of seconds above 0")
    store_config = _store_config(
        store, store_endpoint, store_region, store_credentials, tuple(workload_env or ())
    )
    settings = ServerSettings(
        store=store_config,
        keep_local_days=keep_local_days,
        archive_retention_days=archive_days,
        retention_interval=retention_interval,
        data_dir=(data_dir or default_data_dir()).resolve(),
        host=host,
        port=port,
        grpc_port=grpc_port,
        engine=engine,
        database_url=database_url,
        public_url=public_url,
        code_url=code_url,
        kubeconfig=kubeconfig,
        outputs_claim=outputs_claim,
        serving_runtime=runtime.value,
        service_network=kube_service_network,
        serving_max_replicas=serving_max_replicas,
        notebook_node_selector=notebook_nodes,
        notebook_tolerations=notebook_taints,
        ingress_from=tuple(kube_ingress_from or ()),
        platform_namespace=kube_platform_namespace,
        egress_deny=parse_egress_deny(kube_egress_deny),
        cpus=cpus,
        workload_env=tuple(workload_env or ()),
        notebook_idle_seconds=notebook_idle_minutes * 60,
        trusted_proxies=tuple(trusted_proxy or ()),
        workload_url=workload_url,
        allow_fetch_from=tuple(allow_fetch_from or ()),
        package_indexes=tuple(package_index or ()),
        smtp_server=smtp_server,
        smtp_from=smtp_from,
    )
    from tfkube.server.core.db import SchemaTooNew

    try:
        run_service(lambda: serve(settings))
    except SchemaTooNew as exc:
        raise fail(str(exc), code=1) from None


def _store_config(
    url: str | None,
    endpoint: str | None,
    region: str | None,
    credentials: Path | None,
    workload_env: tuple[str, ...],
) -> StoreConfig | None:
    """`--store` and its options, checked against the store itself (the bucket exists,
    the credentials may write): refused here, the server does not start."""
    import os

    from tfkube.server.core.store import StoreConfigError, refused_workload_env, store_config
    from tfkube.server.s3blobs import StoreUnavailable, check_store

    if url is None:
        if endpoint or region or credentials:
            raise fail(
                "--store-endpoint, --store-region and --store-credentials go with "
                "--store s3://bucket/prefix; add it or drop them"
            )
        return None
    try:
        text = None
        if credentials is not None:
            try:
                text = credentials.read_text()
            except OSError as exc:
                raise StoreConfigError(
                    f"--store-credentials: cannot read {credentials}: {exc.strerror}"
                ) from None
        config = store_config(url, endpoint, region, text, os.environ)
        refused = refused_workload_env(workload_env)
        if refused:
            raise StoreConfigError(refused)
        check_store(config)
    except (StoreConfigError, StoreUnavailable) as exc:
        raise fail(str(exc)) from None
    return config


def main(argv: list[str] | None = None) -> None:
    app(args=argv)
