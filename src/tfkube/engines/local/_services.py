"""The local engine's other workloads: model servers, notebooks and TensorBoards as
processes on loopback ports, each in its own session, known again by PID and start time
(after a restart of the server too), stopped as a whole by PID.

    model server  python -m tfkube.serving --rest_api_port=<free port>, with a secret only
                  the server's proxy sends (TFKUBE_SERVING_TOKEN), so the port alone
                  answers nothing; status = its process + `GET /v1/models/<name>`
    notebook      python -m jupyterlab below the proxy's base URL, in the user's home (the
                  team's artifacts unpacked read-only beside it), Jupyter's token on
    TensorBoard   python -m tensorboard.main --path_prefix=<the proxy's path>

One runner per kind (`tfkube.engines.Runner`). A handle is `{"pid", "started", "port"}`.
Every process gets a minimal environment (an allow-list, never the server's own: a database
URL may hold a password).

Decisions (`observe_model_server`, `service_env`) are pure functions.
"""

from __future__ import annotations

import os
import shutil
import sys
import tarfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

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
from tfkube.engines.local._procs import alive, free_ports, spawn, stop_tree, wait_port
from tfkube.engines.local._store import ProcessRef

START_TIMEOUT = 120.0
"""How long JupyterLab or TensorBoard may take to answer on its port."""
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
    data = handle.data
    if not data.get("pid"):
        return None
    return ProcessRef(pid=int(data["pid"]), create_time=float(data.get("started") or 0.0))


def _port(handle: Handle) -> int:
    port = handle.data.get("port")
    if not port:
        raise NotAvailable("it is not running")
    return int(port)


def _handle(ref: ProcessRef, port: int) -> Handle:
    return Handle({"pid": ref.pid, "started": ref.create_time, "port": port})


class _Processes:
    """What every local runner shares: the environment it gives, stopping by PID."""

    def __init__(self, server_env: Mapping[str, str], workload_env: tuple[str, ...]) -> None:
        self.server_env = dict(server_env)
        self.workload_env = workload_env

    def env(self, extra: Mapping[str, str]) -> dict[str, str]:
        return service_env(self.server_env, extra, self.workload_env)

    @staticmethod
    def stop(tenant: Tenant, workload: object, handle: Handle) -> None:
        stop_tree(_ref(handle))

    @staticmethod
    def running(handle: Handle) -> bool:
        ref = _ref(handle)
        return ref is not None and alive(ref) is not None


class LocalModelServers(_Processes):
    """`python -m tfkube.serving` on a free loopback port, answering only its secret."""

    def __init__(
        self, data_dir: Path, server_env: Mapping[str, str], workload_env: tuple[str, ...]
    ) -> None:
        super().__init__(server_env, workload_env)
        self.data_dir = data_dir
        """Where model servers' output is kept (`serving/<id>.log`)."""

    def log(self, workload: ModelServerWorkload) -> Path:
        return self.data_dir / "serving" / f"{workload.id}.log"

    def start(self, tenant: Tenant, workload: ModelServerWorkload) -> Handle:
        (port,) = free_ports(1)
        argv = [
            sys.executable,
            "-m",
            "tfkube.serving",
            f"--model_name={workload.name}",
            f"--model_base_path={workload.export_dir}",
            f"--rest_api_port={port}",
            "--file_system_poll_wait_seconds=2",
        ]
        if workload.version is not None:
            argv.append(f"--model_version={workload.version}")
        env = self.env({contract.SERVING_TOKEN: workload.secret})
        _, ref = spawn(argv, env=env, log=self.log(workload))
        return _handle(ref, port)

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
        try:
            r = httpx.get(f"{up.prefix}/v1/models/{workload.name}", headers=up.headers, timeout=2)
        except httpx.HTTPError:
            return None
        if r.status_code == 404 and "error" in r.text:
            return {"model_version_status": []}
        return dict(r.json()) if r.status_code == 200 else None

    @staticmethod
    def upstream(tenant: Tenant, workload: ModelServerWorkload, handle: Handle) -> Upstream:
        return Upstream(
            f"http://127.0.0.1:{_port(handle)}",
            {"Authorization": f"Bearer {workload.secret}"},
        )


class LocalNotebooks(_Processes):
    """`python -m jupyterlab` below the proxy's base URL, in the user's home."""

    def __init__(
        self,
        homes: Callable[[Tenant, str], Path],
        server_env: Mapping[str, str],
        workload_env: tuple[str, ...],
    ) -> None:
        super().__init__(server_env, workload_env)
        self.homes = homes
        """(tenant, user) -> the notebook's home (JupyterLab's root)."""

    @staticmethod
    def _unpack_artifacts(home: Path, workload: NotebookWorkload) -> None:
        """The team's latest artifacts, read-only in the home (unchanged ones kept)."""
        root = home / "team-artifacts"
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

    def start(self, tenant: Tenant, workload: NotebookWorkload) -> Handle:
        home = self.homes(tenant, workload.user)
        home.mkdir(parents=True, exist_ok=True)
        self._unpack_artifacts(home, workload)
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
        if os.geteuid() == 0:  # a server run as root (a container, CI) runs its notebooks so
            argv.append("--allow-root")
        env = self.env(
            {
                "HOME": str(home),
                "JUPYTER_TOKEN": workload.jupyter_token,
                contract.CLIENT_URL: workload.server_url,
                contract.CLIENT_TOKEN: workload.client_token,
                contract.CLIENT_TEAM: tenant.name,
            },
        )
        log_file = home / ".tfkube-notebook.log"
        log_file.unlink(missing_ok=True)  # this start's output only
        _, ref = spawn(argv, env=env, cwd=home, log=log_file)
        if not wait_port(ref, port, START_TIMEOUT):
            stop_tree(ref)
            tail = log_file.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"JupyterLab did not start: {tail}")
        return _handle(ref, port)

    def status(self, tenant: Tenant, workload: NotebookWorkload, handle: Handle) -> WorkloadStatus:
        if not self.running(handle):
            return WorkloadStatus(Health.FAILED, "its JupyterLab process exited", exited=True)
        return WorkloadStatus(Health.READY)

    @staticmethod
    def upstream(tenant: Tenant, workload: NotebookWorkload, handle: Handle) -> Upstream:
        return Upstream(
            f"http://127.0.0.1:{_port(handle)}{workload.base_url.rstrip('/')}",
            {"Authorization": f"token {workload.jupyter_token}"},
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
        _, ref = spawn(argv, env=self.env({}))
        if not wait_port(ref, port, START_TIMEOUT):
            stop_tree(ref)
            raise RuntimeError("TensorBoard did not start in time (or exited at start)")
        return _handle(ref, port)

    def status(
        self, tenant: Tenant, workload: TensorBoardWorkload, handle: Handle
    ) -> WorkloadStatus:
        if not self.running(handle):
            return WorkloadStatus(Health.FAILED, "its TensorBoard process exited", exited=True)
        return WorkloadStatus(Health.READY)

    @staticmethod
    def upstream(tenant: Tenant, workload: TensorBoardWorkload, handle: Handle) -> Upstream:
        return Upstream(f"http://127.0.0.1:{_port(handle)}{workload.base_url}")
