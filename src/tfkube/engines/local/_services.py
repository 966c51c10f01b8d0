"""The local engine's other workloads: model servers, notebooks and TensorBoards as
processes on loopback ports, each in its own session, known again by PID and start time
(after a restart of the server too), stopped as a whole by PID.

    model server  tfkube-modelserver (native; TFKUBE_MODEL_SERVER=python: python -m
                  tfkube.serving) --rest_api_port=<free port> --port=<another>
                  (REST and gRPC), with a secret only the server's proxy sends
                  (TFKUBE_SERVING_TOKEN), so the ports alone answer nothing; status = its
                  process + `GET /v1/models/<name>` (its gRPC door starts before REST)
    notebook      python -m jupyterlab below the proxy's base URL, in the user's home (the
                  team's artifacts unpacked read-only beside it), Jupyter's token on
    TensorBoard   python -m tensorboard.main --path_prefix=<the proxy's path>

One runner per kind (`tfkube.engines.Runner`). A handle is `{"pid", "started", "port"}`
(a model server's also `"grpc_port"`; and `"cgroup"` when confined). Every process gets a
minimal environment (an allow-list, never the server's own: a database URL may hold a
password).

Where the machine can isolate teams (`ServiceIsolation`), each process runs confined as
its team's OS user (`_sandbox`: bubblewrap, cgroups): a model server or TensorBoard sees
the job folder it reads (read-only), a notebook its home (read-write); none sees the
server's data dir or another team's folders. Confined processes are started from one
long-lived thread (the sandbox dies with the thread that started it, so a server that
dies leaves none behind) and stopped as a tree, then their cgroups are released.

Confined, each also runs in a network namespace of its own holding only loopback
(`_netns`, as a job's replicas): it reaches nothing on the host's loopback and nothing
there reaches it. Its relay (`_relay`, started beside it with the namespace's
descriptor) is the way in: a Unix socket per door in `RELAYS` (root's, 0700), which
`upstream` names (`Upstream.unix`, and `Upstream.grpc` as `unix:<path>`), so the proxy
connects there whatever the service; for a notebook also the way out to the server's API
(`api_route`, on its own loopback) and to the package index (`PackageAccess`: the
relay's package proxy, `_egress`, on 127.0.0.1:3128 inside, named by HTTPS_PROXY and
PIP_INDEX_URL in the notebook's environment, so `pip install --target` works). The
handle keeps the sockets and the relay's PID; `stop` ends both and removes the sockets.
Unconfined (the machine cannot isolate) services stay on the host's loopback ports, as
jobs stay on the host's network.

Decisions (`observe_model_server`, `service_env`) are pure functions.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import sys
import tarfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from tfkube import contract
from tfkube.engines._workloads import (
    Handle,
    Health,
    ModelServerWorkload,
    NotAvailable,
    NotebookWorkload,
    Tenant,
    TensorBoardWorkload,
    Upstream,
    WorkloadStatus,
)
from tfkube.engines.local import _egress, _netns
from tfkube.engines.local._cgroups import Limits, limits_of
from tfkube.engines.local._procs import (
    alive,
    free_ports,
    ref_data,
    ref_from,
    spawn,
    stop_tree,
    wait_port,
)
from tfkube.engines.local._sandbox import (
    confinement_for,
    launch,
    passed_environment,
    release,
    release_cgroup_named,
)
from tfkube.engines.local._store import ProcessRef
from tfkube.engines.local._tenants import TenantIdentity, hand_over
from tfkube.modelserver import chosen_kind, model_server_command

START_TIMEOUT = 120.0
"""How long JupyterLab or TensorBoard may take to answer on its port."""
SH = "/bin/sh"
NEWS_SETTINGS = "@jupyterlab/apputils-extension/notification.jupyterlab-settings"
"""JupyterLab's user setting for its announcements (below JUPYTERLAB_SETTINGS_DIR)."""
NO_NEWS = '{"fetchNews": "false", "checkForUpdates": false}'
COPY_ARTIFACTS = (
    'dest="$HOME/team-artifacts"; '
    'if [ -e "$dest" ]; then chmod -R u+w "$dest"; rm -rf "$dest"; fi; '
    'cp -R "$1" "$dest" && chmod -R a-w "$dest" '
    '|| echo "tfkube: the team artifacts could not be copied into $dest" >&2; '
    f'news="$JUPYTERLAB_SETTINGS_DIR/{NEWS_SETTINGS}"; '
    'if [ ! -e "$news" ]; then mkdir -p "${news%/*}" '
    f"&& echo '{NO_NEWS}' > \"$news\"; fi; "
    'shift; exec "$@"'
)
"""A notebook's first step, as its own user: a fresh read-only copy of the team's
artifacts in its home; JupyterLab's news neither fetched nor asked about (an offline
server: the question has no useful answer), unless the user chose otherwise; then
JupyterLab. (The server never writes inside a home: a link its user planted there would
point the server's writes anywhere.)"""
PASSED_ENV = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM", "SSL_CERT_FILE", "SSL_CERT_DIR")
"""What a workload keeps of the server's environment (an allow-list); LC_* too."""


def service_env(
    server_env: Mapping[str, str], extra: Mapping[str, str], passed: tuple[str, ...] = ()
) -> dict[str, str]:
    """A workload's environment (pure): the allow-listed variables of the server's (and
    those the administrator `passed`), the Python tfkube runs with first on PATH, then
    `extra`."""
    allowed = {*PASSED_ENV, *passed}
    env = {k: v for k, v in server_env.items() if k in allowed or k.startswith("LC_")}
    python_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in (python_bin, env.get("PATH", "")) if p)
    env.update(extra)
    return env


RELAYS = Path("/run/tfkube-relays")
"""Where services' relays put their Unix sockets: root's, 0700, out of every sandbox's
sight; short, as a socket's path must be (a data dir can be deep). Each server has a
folder of its own below it (`relays_for`): two servers on one machine number their
workloads alike."""


def relays_for(data_dir: Path) -> Path:
    """The folder of one server's relay sockets: named by its data dir, short. Pure."""
    key = hashlib.sha256(os.fsencode(os.path.abspath(data_dir))).hexdigest()[:12]
    return RELAYS / key


SOCKET_PATH_MAX = 107
"""The longest path a Unix socket may have (sun_path, less its NUL)."""


@dataclass(frozen=True)
class ApiRoute:
    """How a service in a network namespace of its own reaches the server's API."""

    url: str
    """TFKUBE_URL inside: the same URL when its host is loopback, else
    `<scheme>://127.0.0.1:<port><path>`."""
    port: int
    """Where the relay listens inside (127.0.0.1) and the server listens outside."""
    host: str
    """The server's host as the URL names it (resolved by the engine, outside)."""


@dataclass(frozen=True)
class PackageAccess:
    """A notebook's way to the package index: the relay's package proxy (`_egress`)."""

    indexes: tuple[str, ...] = ()
    """The admin's `--package-index` URLs; empty: PyPI."""
    ranges: tuple[str, ...] = ()
    """`--allow-fetch-from`: ranges a default index's addresses may lie in."""


def api_route(server_url: str) -> ApiRoute:
    """Where a notebook in its own namespace finds the server's API (pure)."""
    parts = urlsplit(server_url)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ValueError(f"the server's URL {server_url!r} is not an http(s) URL")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname
    if host in {"127.0.0.1", "localhost"}:
        return ApiRoute(server_url, port, host)
    inside = urlunsplit((parts.scheme, f"127.0.0.1:{port}", parts.path, "", ""))
    return ApiRoute(inside, port, host)


def observe_model_server(alive_now: bool, answer: Mapping[str, Any] | None) -> WorkloadStatus:
    """A local model server from its process and its status answer (pure)."""
    if not alive_now:
        return WorkloadStatus(
            Health.FAILED, "the model server process exited; restarting it", exited=True
        )
    if answer is None:
        return WorkloadStatus(Health.STARTING, "loading TensorFlow")
    versions = answer.get("model_version_status") or []
    available = [int(v["version"]) for v in versions if v.get("state") == "AVAILABLE"]
    if available:
        return WorkloadStatus(Health.READY, version=max(available))
    failed = [v for v in versions if (v.get("status") or {}).get("error_code", "OK") != "OK"]
    if failed and not any(v.get("state") == "LOADING" for v in versions):
        message = (failed[0].get("status") or {}).get("error_message") or "loading failed"
        return WorkloadStatus(Health.FAILED, f"version {failed[0].get('version')}: {message}")
    return WorkloadStatus(Health.STARTING, "loading the model")


def unpack_read_only(archive: Path, dest: Path) -> None:
    """An artifact's files under `dest`, read-only (tarfile's `data` filter: no links out,
    no devices, no absolute paths)."""
    partial = dest.with_name(f".{dest.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with tarfile.open(archive, "r:*") as tar:
        tar.extractall(partial, filter="data")
    for folder, dirs, files in os.walk(partial):
        for f in files:
            Path(folder, f).chmod(0o444)
        for d in dirs:
            Path(folder, d).chmod(0o555)
    if dest.exists():
        for folder, dirs, _ in os.walk(dest):  # make the old copy removable
            Path(folder).chmod(0o755)
            for d in dirs:
                Path(folder, d).chmod(0o755)
        shutil.rmtree(dest)
    partial.rename(dest)
    dest.chmod(0o555)


def _ref(handle: Handle) -> ProcessRef | None:
    return ref_from(handle.data)


def _port(handle: Handle) -> int:
    port = handle.data.get("port")
    if not port:
        raise NotAvailable("it is not running")
    return int(port)


def _socket(handle: Handle, door: str = "http") -> str | None:
    """The Unix socket of the workload's relay for `door` (None: it listens on the host's
    network)."""
    path = (handle.data.get("sockets") or {}).get(door)
    return str(path) if path else None


def _handle(ref: ProcessRef, port: int, extra: Mapping[str, Any] | None = None) -> Handle:
    return Handle({**ref_data(ref), "port": port, **(extra or {})})


@dataclass(frozen=True)
class ServiceIsolation:
    """How the local engine confines a team's services."""

    identity_of: Callable[[Tenant], TenantIdentity]
    """The team's OS identity (made once, kept by `_tenants`)."""
    hidden: tuple[str, ...]
    """Never visible: the server's data dir."""
    starter: ThreadPoolExecutor
    """One long-lived thread every confined process is started from."""
    relays: Path | None = None
    """Where services' relays put their Unix sockets (`RELAYS`, made 0700). None:
    services run on the host's network."""


class _Processes:
    """What every local runner shares: the environment it gives, starting a process
    (confined where the engine can), stopping it by PID."""

    def __init__(
        self,
        server_env: Mapping[str, str],
        workload_env: tuple[str, ...],
        isolation: ServiceIsolation | None = None,
    ) -> None:
        self.server_env = dict(server_env)
        self.workload_env = workload_env
        self.isolation = isolation

    def env(self, extra: Mapping[str, str]) -> dict[str, str]:
        return service_env(self.server_env, extra, self.workload_env)

    def launch(
        self,
        tenant: Tenant,
        name: str,
        argv: Sequence[str],
        extra: Mapping[str, str],
        *,
        cwd: Path | None = None,
        log: Path | None = None,
        read_only: Sequence[Path] = (),
        read_write: Sequence[Path] = (),
        limits: Limits | None = None,
        netns: int | None = None,
    ) -> tuple[ProcessRef, dict[str, Any]]:
        """Start `argv` for the tenant -> its reference and what its handle keeps besides.
        Confined: as the team's user, seeing the system, tfkube's Python and the folders
        named here only; `read_write` folders become the team's; in the network
        namespace `netns` if given."""
        if self.isolation is None:
            _, ref = spawn(argv, env=self.env(extra), cwd=cwd, log=log)
            return ref, {}
        iso = self.isolation
        identity = iso.identity_of(tenant)
        for folder in read_write:
            hand_over(folder, identity)
        cgroup = f"{identity.name}.{name}-{time.time_ns()}"
        confinement = confinement_for(
            identity,
            cgroup=cgroup,
            cwd=str(cwd or "/tmp"),
            home=str(cwd or "/tmp"),
            read_only=[str(p) for p in read_only],
            read_write=[str(p) for p in read_write],
            hidden=iso.hidden,
            env={**passed_environment(self.server_env, (*PASSED_ENV, *self.workload_env)), **extra},
            limits=limits,
            netns=netns,
        )

        def start() -> ProcessRef:
            with launch(argv, confinement) as begun:
                try:
                    # The sandbox's wrapper gets no environment of ours at all.
                    _, ref = spawn(begun.argv, env={}, log=log, pass_fds=begun.pass_fds)
                except OSError:
                    release(confinement)
                    raise
            return ref

        return iso.starter.submit(start).result(), {"cgroup": cgroup}

    def networked(self) -> bool:
        """Whether services get a network namespace of their own (where they are
        confined)."""
        return self.isolation is not None and self.isolation.relays is not None

    def launch_networked(
        self,
        tenant: Tenant,
        name: str,
        argv: Sequence[str],
        extra: Mapping[str, str],
        *,
        doors: Mapping[str, int],
        api: ApiRoute | None = None,
        packages: PackageAccess | None = None,
        **options: Any,
    ) -> tuple[ProcessRef, dict[str, Any]]:
        """`launch`, and where services are confined: in a network namespace of its own
        holding only loopback, listening inside on the ports of `doors` (`"http"`, and a
        model server's `"grpc"`), behind a relay (`_relay`) with a Unix socket per door
        (kept in the handle as `"sockets"`, with `"relay"`: its PID and start time);
        `api`: the relay offers the server's API inside too; `packages`: and the
        package-index proxy (`_egress`) on 127.0.0.1:`_egress.PORT` inside."""
        iso = self.isolation
        if iso is None or iso.relays is None:
            return self.launch(tenant, name, argv, extra, **options)
        for folder in (iso.relays.parent, iso.relays):
            folder.mkdir(mode=0o700, exist_ok=True)
            folder.chmod(0o700)
        sockets = {door: str(iso.relays / f"{name}.{door}.sock") for door in doors}
        for path in sockets.values():
            if len(os.fsencode(path)) > SOCKET_PATH_MAX:
                raise RuntimeError(
                    f"the relay socket {path} is longer than {SOCKET_PATH_MAX} bytes: "
                    "the relays' folder must be shorter"
                )
        relay_argv = [sys.executable, "-m", "tfkube.engines.local._relay"]
        relay_argv += [f"--forward={sockets[door]}={port}" for door, port in doors.items()]
        if api is not None:
            info = socket.getaddrinfo(api.host, api.port, type=socket.SOCK_STREAM)
            relay_argv += [
                f"--api-port={api.port}",
                f"--api-host={info[0][4][0]}",
                f"--api-to-port={api.port}",
            ]
        if packages is not None:
            relay_argv.append(f"--package-port={_egress.PORT}")
            relay_argv += [f"--index={url}" for url in packages.indexes]
            relay_argv += [f"--allow-range={net}" for net in packages.ranges]
        try:
            netns = _netns.create()
        except _netns.NetnsError as exc:
            raise RuntimeError(str(exc)) from None
        try:
            ref, data = self.launch(tenant, name, argv, extra, netns=netns, **options)
            try:
                _, relay = spawn(
                    [*relay_argv, f"--netns-fd={netns}", f"--watch={ref.pid}"],
                    env=self.env({}),
                    log=options.get("log"),  # the service's, if it keeps one
                    pass_fds=(netns,),
                )
            except OSError:
                self.stop(tenant, None, _handle(ref, doors["http"], data))
                raise
        finally:
            os.close(netns)
        relay_data = ref_data(relay)
        return ref, {**data, "sockets": sockets, "relay": relay_data}

    def wait_ready(self, handle: Handle, url: str, timeout: float) -> bool:
        """Until the service answers: on its port, or through its relay (any HTTP answer
        to `url`). False: it ended or time ran out."""
        ref = _ref(handle)
        assert ref is not None
        path = _socket(handle)
        if path is None:
            return wait_port(ref, _port(handle), timeout)
        transport = httpx.HTTPTransport(uds=path)
        with httpx.Client(transport=transport, timeout=2.0) as client:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if not self.running(handle):
                    return False
                with contextlib.suppress(httpx.HTTPError):
                    client.get(url)
                    return True
                time.sleep(0.2)
        return False

    @staticmethod
    def stop(tenant: Tenant, workload: object, handle: Handle) -> None:
        stop_tree(_ref(handle))
        relay = handle.data.get("relay")
        if relay:
            stop_tree(ref_from(relay))
        for path in (handle.data.get("sockets") or {}).values():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(str(path))
        cgroup = handle.data.get("cgroup")
        if cgroup:
            release_cgroup_named(str(cgroup))

    @staticmethod
    def running(handle: Handle) -> bool:
        """Its process, and its relay if it has one."""
        ref = _ref(handle)
        if ref is None or alive(ref) is None:
            return False
        relay = handle.data.get("relay")
        if not relay:
            return True
        return alive(ref_from(relay)) is not None


class LocalModelServers(_Processes):
    """tfkube's model server on a free loopback port, answering only its secret: the native
    one (`tfkube-modelserver`) where installed, else `python -m tfkube.serving`
    (`TFKUBE_MODEL_SERVER` in the server's environment chooses: `tfkube.modelserver`)."""

    def __init__(
        self,
        data_dir: Path,
        server_env: Mapping[str, str],
        workload_env: tuple[str, ...],
        isolation: ServiceIsolation | None = None,
    ) -> None:
        super().__init__(server_env, workload_env, isolation)
        self.data_dir = data_dir
        """Where model servers' output is kept (`serving/<id>.log`)."""

    def log(self, workload: ModelServerWorkload) -> Path:
        return self.data_dir / "serving" / f"{workload.id}.log"

    def start(self, tenant: Tenant, workload: ModelServerWorkload) -> Handle:
        port, grpc_port = free_ports(2)
        argv = [
            *model_server_command(chosen_kind(self.server_env)),
            f"--model_name={workload.name}",
            f"--model_base_path={workload.export_dir}",
            f"--rest_api_port={port}",
            f"--port={grpc_port}",
            "--file_system_poll_wait_seconds=2",
        ]
        if workload.version is not None:
            argv.append(f"--model_version={workload.version}")
        resources = workload.resources
        ref, extra = self.launch_networked(
            tenant,
            f"model-{workload.id}",
            argv,
            {contract.SERVING_TOKEN: workload.secret},
            doors={"http": port, "grpc": grpc_port},
            log=self.log(workload),
            read_only=[workload.export_dir],
            limits=limits_of(resources) if resources else None,
        )
        return _handle(ref, port, {**(extra or {}), "grpc_port": grpc_port})

    def status(
        self, tenant: Tenant, workload: ModelServerWorkload, handle: Handle
    ) -> WorkloadStatus:
        if not self.running(handle):
            return observe_model_server(False, None)
        return observe_model_server(True, self._probe(tenant, workload, handle))

    def _probe(
        self, tenant: Tenant, workload: ModelServerWorkload, handle: Handle
    ) -> dict[str, Any] | None:
        up = self.upstream(tenant, workload, handle)
        transport = None if up.unix is None else httpx.HTTPTransport(uds=up.unix)
        try:
            with httpx.Client(transport=transport, timeout=2) as client:
                r = client.get(f"{up.prefix}/v1/models/{workload.name}", headers=up.headers)
        except httpx.HTTPError:
            return None
        if r.status_code == 404 and "error" in r.text:
            return {"model_version_status": []}
        return dict(r.json()) if r.status_code == 200 else None

    @staticmethod
    def upstream(tenant: Tenant, workload: ModelServerWorkload, handle: Handle) -> Upstream:
        # A model server started before gRPC was offered has no gRPC port in its handle.
        grpc_port = handle.data.get("grpc_port")
        grpc_socket = _socket(handle, "grpc")
        grpc = f"127.0.0.1:{int(grpc_port)}" if grpc_port else None
        return Upstream(
            f"http://127.0.0.1:{_port(handle)}",
            {"Authorization": f"Bearer {workload.secret}"},
            grpc=f"unix:{grpc_socket}" if grpc_socket else grpc,
            grpc_metadata={"authorization": f"Bearer {workload.secret}"},
            no_grpc="the model server was started before gRPC was offered: stop it and "
            "serve it again",
            unix=_socket(handle),
        )


class LocalNotebooks(_Processes):
    """`python -m jupyterlab` below the proxy's base URL, in the user's home."""

    def __init__(
        self,
        homes: Callable[[Tenant, str], Path],
        staged: Callable[[Tenant], Path],
        server_env: Mapping[str, str],
        workload_env: tuple[str, ...],
        isolation: ServiceIsolation | None = None,
        packages: PackageAccess | None = None,
    ) -> None:
        super().__init__(server_env, workload_env, isolation)
        self.packages = packages or PackageAccess()
        """Where a confined notebook's `pip install` may fetch from."""
        self.homes = homes
        """(tenant, user) -> the notebook's home (JupyterLab's root; the user's own)."""
        self.staged = staged
        """tenant -> where the server unpacks the team's artifacts for its notebooks (the
        server's own folder: never a path inside a home, which its user controls)."""

    def _stage_artifacts(self, tenant: Tenant, workload: NotebookWorkload) -> Path:
        """The team's latest artifacts, unpacked read-only into the server's own folder
        (unchanged ones kept); the notebook copies them into its home as its own user."""
        root = self.staged(tenant)
        for artifact in workload.artifacts:
            dest = root / artifact.kind / artifact.name
            stamp = root / artifact.kind / f".{artifact.name}.sha256"
            if dest.is_dir() and stamp.is_file() and stamp.read_text() == artifact.sha256:
                continue
            try:
                unpack_read_only(artifact.blob, dest)
                stamp.write_text(artifact.sha256)
            except (OSError, tarfile.TarError) as exc:
                raise RuntimeError(f"unpacking {artifact.kind} {artifact.name}: {exc}") from None
        root.mkdir(parents=True, exist_ok=True)
        for folder in (root, *root.iterdir()):
            if folder.is_dir():
                folder.chmod(0o755)
        return root

    def start(self, tenant: Tenant, workload: NotebookWorkload) -> Handle:
        home = self.homes(tenant, workload.user)
        home.mkdir(parents=True, exist_ok=True)
        staged = self._stage_artifacts(tenant, workload)
        (port,) = free_ports(1)
        argv = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--ServerApp.base_url={workload.base_url}",
            f"--ServerApp.root_dir={home}",
            # No calls to the internet from this machine's notebooks.
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",
        ]
        if os.geteuid() == 0 and self.isolation is None:  # root unconfined (a container)
            argv.append("--allow-root")
        api = api_route(workload.server_url) if self.networked() else None
        env = {
            "HOME": str(home),
            "JUPYTERLAB_SETTINGS_DIR": str(home / ".jupyter" / "lab" / "user-settings"),
            contract.JUPYTER_TOKEN: workload.jupyter_token,
            contract.CLIENT_URL: api.url if api is not None else workload.server_url,
            contract.CLIENT_TOKEN: workload.client_token,
            contract.CLIENT_TEAM: tenant.name,
        }
        if api is not None:  # its own network: the package index through the relay
            parts = urlsplit(api.url)
            direct = [f"{parts.scheme}://{parts.netloc}"]  # its tfkube.Client: the relay's API
            env.update(_egress.package_env(self.packages.indexes, _egress.PORT, direct))
        log_file = home.parent / f".{home.name}-notebook.log"
        log_file.unlink(missing_ok=True)  # this start's output only
        ref, extra = self.launch_networked(
            tenant,
            f"notebook-{workload.id}",
            [SH, "-c", COPY_ARTIFACTS, "tfkube-notebook", str(staged), *argv],
            env,
            doors={"http": port},
            api=api,
            packages=self.packages if api is not None else None,
            cwd=home,
            log=log_file,
            read_only=[staged],
            read_write=[home],
        )
        handle = _handle(ref, port, extra)
        up = self.upstream(tenant, workload, handle)
        if not self.wait_ready(handle, f"{up.prefix}/api/status", START_TIMEOUT):
            self.stop(tenant, workload, handle)
            tail = log_file.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"JupyterLab did not start: {tail}")
        return handle

    def status(self, tenant: Tenant, workload: NotebookWorkload, handle: Handle) -> WorkloadStatus:
        if not self.running(handle):
            return WorkloadStatus(Health.FAILED, "its JupyterLab process exited", exited=True)
        return WorkloadStatus(Health.READY)

    @staticmethod
    def upstream(tenant: Tenant, workload: NotebookWorkload, handle: Handle) -> Upstream:
        return Upstream(
            f"http://127.0.0.1:{_port(handle)}{workload.base_url.rstrip('/')}",
            {"Authorization": f"token {workload.jupyter_token}"},
            unix=_socket(handle),
        )


class LocalTensorBoards(_Processes):
    """`python -m tensorboard.main` with the proxy's path as its prefix."""

    def start(self, tenant: Tenant, workload: TensorBoardWorkload) -> Handle:
        (port,) = free_ports(1)
        argv = [
            sys.executable,
            "-m",
            "tensorboard.main",
            f"--logdir={workload.logdir}",
            "--host=127.0.0.1",
            f"--port={port}",
            f"--path_prefix={workload.base_url}",
            "--reload_interval=5",
        ]
        ref, extra = self.launch_networked(
            tenant,
            f"tensorboard-{workload.job_id}",
            argv,
            {},
            doors={"http": port},
            read_only=[workload.logdir],
        )
        handle = _handle(ref, port, extra)
        up = self.upstream(tenant, workload, handle)
        if not self.wait_ready(handle, f"{up.prefix}/", START_TIMEOUT):
            self.stop(tenant, workload, handle)
            raise RuntimeError("TensorBoard did not start in time (or exited at start)")
        return handle

    def status(
        self, tenant: Tenant, workload: TensorBoardWorkload, handle: Handle
    ) -> WorkloadStatus:
        if not self.running(handle):
            return WorkloadStatus(Health.FAILED, "its TensorBoard process exited", exited=True)
        return WorkloadStatus(Health.READY)

    @staticmethod
    def upstream(tenant: Tenant, workload: TensorBoardWorkload, handle: Handle) -> Upstream:
        return Upstream(
            f"http://127.0.0.1:{_port(handle)}{workload.base_url}", unix=_socket(handle)
        )
