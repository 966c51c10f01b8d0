"""`tfkube.Client`: the server's REST API from Python (httpx).

import tfkube
c = tfkube.Client("http://127.0.0.1:8470", token="tfk_...")   # or saved by `tfkube login`
code = c.upload("examples/mnist-between-graph", name="mnist")
job = c.submit(name="mnist", workers=2, ps=1, code="mnist")
for line in c.logs(job.id, "worker-0", follow=True): print(line)
c.wait(job.id); c.download(job.id, "checkpoint", "checkpoint")
server = c.serve(job.id)                      # TensorFlow Serving's REST API at server.url
c.predict(server.id, [[0.0] * 64])            # -> {"predictions": [...]}

Inside a notebook the server opened, `tfkube.Client()` needs no arguments: TFKUBE_URL,
TFKUBE_TOKEN and TFKUBE_TEAM are in its environment.
"""

from __future__ import annotations

import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from tfkube import contract
from tfkube.client._config import load_login
from tfkube.planner import settled
from tfkube.spec import FieldError, SpecError, TFJob, dump_job
from tfkube.wire import (
    ArtifactOut,
    ErrorBody,
    EventOut,
    JobList,
    JobOut,
    LogFile,
    ModelServerOut,
    NotebookOut,
    OutputFile,
    ScalarsOut,
    TeamOut,
    UsageOut,
    UserOut,
)

_SKIP = {"__pycache__", ".git", ".venv", ".mypy_cache", ".pytest_cache"}


class ServerError(RuntimeError):
    """The server said no; `status` is the HTTP status, `errors` the per-field problems."""

    def __init__(self, status: int, detail: str, errors: list[FieldError]) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.errors = errors

    @classmethod
    def of(cls, r: httpx.Response) -> ServerError:
        """An error answer: the server's `ErrorBody` (its text, when it is none)."""
        try:
            body = ErrorBody.model_validate_json(r.content)
        except ValidationError:
            return cls(r.status_code, r.text, [])
        return cls(
            r.status_code, body.detail, [FieldError(p.field, p.message) for p in body.errors]
        )


def pack_folder(folder: Path, dest: Path) -> None:
    """A folder as .tar.gz with its files at the top (what replicas unpack and run)."""

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if any(p in _SKIP for p in Path(info.name).parts) else info

    with tarfile.open(dest, "w:gz") as tar:
        for child in sorted(folder.iterdir()):
            tar.add(child, arcname=child.name, filter=keep)


def checked(r: httpx.Response) -> httpx.Response:
    """The answer, if it is a success; else ServerError with the API's detail and the
    fields it names (`ServerError.of`)."""
    if r.is_success:
        return r
    raise ServerError.of(r)


def token_by_password(
    url: str, name: str, password: str, label: str, setup_token: str | None = None
) -> str:
    """Sign in with a password (or create the first admin with a set-up token) and make a
    personal API token named `label`; the session is only used for this. Raises
    ServerError."""
    url = url.rstrip("/")
    # 60 s: set-up makes the default team, which may wait for its namespace to finish
    # being deleted (a reinstall; the Kubernetes engine's NAMESPACE_GONE_SECONDS).
    with httpx.Client(base_url=url, timeout=60) as http:
        if setup_token:
            body = {"token": setup_token, "name": name, "password": password}
            r = checked(http.post("/api/v1/setup", json=body))
        else:
            body = {"name": name, "password": password}
            r = checked(http.post("/api/v1/auth/login", json=body))
        headers = {"X-CSRF-Token": r.json()["csrf_token"], "Origin": url}
        made = checked(http.post("/api/v1/tokens", json={"name": label}, headers=headers))
        return str(made.json()["token"])


class Client:
    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        team: str | None = None,
        timeout: float = 60.0,
    ) -> None:
        """`url`/`token`/`team` default to what `tfkube login` saved (or $TFKUBE_URL,
        $TFKUBE_TOKEN, $TFKUBE_TEAM)."""
        saved = load_login()
        url = url or (saved.url if saved else None)
        token = token or (saved.token if saved else None)
        if not url or not token:
            raise ValueError("no server: pass url and token, or run `tfkube login URL` first")
        self.url = url.rstrip("/")
        self.team = team or (saved.team if saved and saved.url.rstrip("/") == self.url else None)
        self.http = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout
        )

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- plumbing -----------------------------------------------------------------------

    @staticmethod
    def _check(r: httpx.Response) -> httpx.Response:
        return checked(r)

    def _json(self, method: str, path: str, **kw: Any) -> Any:
        r = self._check(self.http.request(method, path, **kw))
        return r.json() if r.content else None

    def _team(self, team: str | None) -> str:
        chosen = team or self.team
        if chosen is None:
            teams = self.teams()
            if len(teams) != 1:
                raise ValueError("name the team (team=...): you are in " + str(len(teams)))
            chosen = self.team = teams[0].name
        return chosen

    # -- accounts -----------------------------------------------------------------------

    def me(self) -> UserOut:
        return UserOut.model_validate(self._json("GET", "/api/v1/users/me"))

    def teams(self) -> list[TeamOut]:
        return [TeamOut.model_validate(t) for t in self._json("GET", "/api/v1/teams")]

    # -- artifacts ----------------------------------------------------------------------

    def upload(
        self,
        path: str | Path,
        name: str,
        *,
        team: str | None = None,
        kind: str = "code",
        entrypoint: str = contract.DEFAULT_ENTRYPOINT,
    ) -> ArtifactOut:
        """Upload a folder (packed here) or a .tar.gz/.zip; streamed from disk."""
        source = Path(path)
        params = {"name": name, "kind": kind, "entrypoint": entrypoint}
        with tempfile.TemporaryDirectory(prefix="tfkube-upload-") as tmp:
            if source.is_dir():
                archive = Path(tmp) / "upload.tar.gz"
                pack_folder(source, archive)
            else:
                archive = source
            params["filename"] = archive.name
            with archive.open("rb") as f:
                data = self._json(
                    "POST",
                    f"/api/v1/teams/{self._team(team)}/artifacts",
                    params=params,
                    content=iter(lambda: f.read(1 << 20), b""),
                    headers={"Content-Type": "application/octet-stream"},
                )
        return ArtifactOut.model_validate(data)

    def artifacts(self, *, team: str | None = None, name: str | None = None) -> list[ArtifactOut]:
        params = {k: v for k, v in (("team", team), ("name", name)) if v}
        return [
            ArtifactOut.model_validate(a)
            for a in self._json("GET", "/api/v1/artifacts", params=params)
        ]

    # -- jobs ---------------------------------------------------------------------------

    def submit(
        self,
        job: TFJob | str | dict[str, Any] | None = None,
        *,
        team: str | None = None,
        **form: Any,
    ) -> JobOut:
        """Submit a TFJob (object, YAML text or mapping) or the four fields
        (`name`, `workers`, `ps`, `code` + optional advanced ones). Raises SpecError with
        the server's per-field errors."""
        if job is None:
            body: dict[str, Any] = form
        elif isinstance(job, TFJob):
            body = {"manifest": dump_job(job)}
        else:
            body = {"manifest": job}
        try:
            data = self._json("POST", f"/api/v1/teams/{self._team(team)}/jobs", json=body)
        except ServerError as exc:
            if exc.status == 422:
                raise SpecError(exc.errors or [FieldError("(request)", str(exc))], "job") from None
            raise
        return JobOut.model_validate(data)

    def jobs(
        self,
        *,
        team: str | None = None,
        phase: str | None = None,
        name: str | None = None,
        owner: str | None = None,
        limit: int = 500,
    ) -> list[JobOut]:
        params = {
            k: v
            for k, v in (("team", team), ("phase", phase), ("name", name), ("owner", owner))
            if v
        }
        data = JobList.model_validate(
            self._json("GET", "/api/v1/jobs", params={**params, "limit": limit})
        )
        return data.items

    def get(self, job_id: str) -> JobOut:
        return JobOut.model_validate(self._json("GET", f"/api/v1/jobs/{job_id}"))

    def find(self, name: str, *, team: str | None = None) -> JobOut | None:
        """The newest job of that name in the team."""
        found = self.jobs(team=self._team(team), name=name, limit=1)
        return self.get(found[0].id) if found else None

    def stop(self, job_id: str) -> JobOut:
        return JobOut.model_validate(self._json("POST", f"/api/v1/jobs/{job_id}/stop"))

    def scale(self, job_id: str, workers: int) -> JobOut:
        """Run the job with `workers` workers from now on (asynchronous PS training)."""
        return JobOut.model_validate(
            self._json("POST", f"/api/v1/jobs/{job_id}/scale", json={"workers": workers})
        )

    def delete(self, job_id: str) -> None:
        self._json("DELETE", f"/api/v1/jobs/{job_id}")

    def copy(self, job_id: str, name: str | None = None) -> JobOut:
        return JobOut.model_validate(
            self._json("POST", f"/api/v1/jobs/{job_id}/copy", json={"name": name} if name else {})
        )

    def events(self, job_id: str) -> list[EventOut]:
        return [
            EventOut.model_validate(e) for e in self._json("GET", f"/api/v1/jobs/{job_id}/events")
        ]

    def wait(self, job_id: str, timeout: float | None = None, poll: float = 1.0) -> JobOut:
        """Until the job finished and nothing of it runs."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.get(job_id)
            if not job.queued and settled(job.phase, job.replicas or []):
                return job
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {job.name} is still {job.phase}")
            time.sleep(poll)

    def log_files(self, job_id: str) -> list[LogFile]:
        return [LogFile.model_validate(f) for f in self._json("GET", f"/api/v1/jobs/{job_id}/logs")]

    def logs(
        self, job_id: str, replica: str, *, follow: bool = False, attempt: int | None = None
    ) -> Iterator[str]:
        """Lines of one replica's log (the latest start unless `attempt`); with `follow`
        until the job ended."""
        params: dict[str, Any] = {"follow": "true" if follow else "false"}
        if attempt is not None:
            params["attempt"] = attempt
        with self.http.stream(
            "GET", f"/api/v1/jobs/{job_id}/logs/{replica}", params=params, timeout=None
        ) as r:
            if not r.is_success:
                r.read()
                self._check(r)
            yield from r.iter_lines()

    def scalars(self, job_id: str) -> ScalarsOut:
        return ScalarsOut.model_validate(self._json("GET", f"/api/v1/jobs/{job_id}/scalars"))

    def usage(self, job_id: str) -> UsageOut:
        """Each replica's CPU and memory over time (`available` False, with the reason, on
        an engine that does not record it)."""
        return UsageOut.model_validate(self._json("GET", f"/api/v1/jobs/{job_id}/usage"))

    def outputs(self, job_id: str, path: str = "") -> list[OutputFile]:
        data = self._json("GET", f"/api/v1/jobs/{job_id}/outputs", params={"path": path})
        return [OutputFile.model_validate(f) for f in data]

    def download(self, job_id: str, path: str, dest: str | Path) -> Path:
        """One output file (or a folder, as .tar.gz) to `dest`."""
        target = Path(dest)
        with self.http.stream("GET", f"/api/v1/jobs/{job_id}/outputs/{path}", timeout=None) as r:
            if not r.is_success:
                r.read()
                self._check(r)
            with target.open("wb") as out:
                for chunk in r.iter_bytes():
                    out.write(chunk)
        return target

    # -- serving ------------------------------------------------------------------------

    def exports(self, job_id: str) -> list[int]:
        """The model versions the job exported (`$TFKUBE_EXPORT_DIR/<version>`)."""
        return list(self.get(job_id).exports or [])

    def serve(
        self,
        job_id: str,
        *,
        name: str | None = None,
        version: int | None = None,
        cpu: str | None = None,
        memory: str | None = None,
        runtime: str | None = None,
        autoscale: dict[str, Any] | None = None,
    ) -> ModelServerOut:
        """A model server for the job's latest export (or `version`): TensorFlow Serving's
        REST API at the answer's `url`; on Kubernetes `runtime` picks the stock
        `tensorflow-serving` or `tfkube`'s model server (default: the server's), and
        `autoscale` (`{"minReplicas", "maxReplicas", "targetCPUUtilization",
        "scaleDownStabilizationSeconds"}`) lets its replicas follow its CPU load. Raises
        SpecError (nothing exported, no such version, a bad name, runtime or autoscaling)
        or ServerError (409: the name is taken)."""
        asked = (("name", name), ("version", version), ("cpu", cpu), ("memory", memory))
        more = (("runtime", runtime), ("autoscale", autoscale))
        body = {k: v for k, v in (*asked, *more) if v is not None}
        try:
            data = self._json("POST", f"/api/v1/jobs/{job_id}/model-servers", json=body)
        except ServerError as exc:
            if exc.status == 422:
                raise SpecError(
                    exc.errors or [FieldError("(request)", str(exc))], "serve"
                ) from None
            raise
        return ModelServerOut.model_validate(data)

    def model_servers(
        self, *, team: str | None = None, job_id: str | None = None, stopped: bool = False
    ) -> list[ModelServerOut]:
        params: dict[str, Any] = {k: v for k, v in (("team", team), ("job", job_id)) if v}
        if stopped:
            params["stopped"] = "true"
        data = self._json("GET", "/api/v1/model-servers", params=params)
        return [ModelServerOut.model_validate(m) for m in data]

    def model_server(self, server_id: str) -> ModelServerOut:
        return ModelServerOut.model_validate(
            self._json("GET", f"/api/v1/model-servers/{server_id}")
        )

    def roll_model_server(self, server_id: str, version: int | None) -> ModelServerOut:
        """Serve `version` from now on (None: the latest); on Kubernetes with no gap.
        Raises SpecError (no such export, a stopped server) or ServerError."""
        path = f"/api/v1/model-servers/{server_id}"
        try:
            data = self._json("PATCH", path, json={"version": version})
        except ServerError as exc:
            if exc.status == 422:
                raise SpecError(exc.errors or [FieldError("(request)", str(exc))], "roll") from None
            raise
        return ModelServerOut.model_validate(data)

    def stop_model_server(self, server_id: str) -> ModelServerOut:
        data = self._json("POST", f"/api/v1/model-servers/{server_id}/stop")
        return ModelServerOut.model_validate(data)

    def wait_ready(
        self, server_id: str, timeout: float = 180.0, poll: float = 0.5
    ) -> ModelServerOut:
        """Until the model server answers with a version (raises TimeoutError)."""
        deadline = time.monotonic() + timeout
        while True:
            server = self.model_server(server_id)
            if server.status == "Ready":
                return server
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"model server {server.name} is {server.status}: {server.message}"
                )
            time.sleep(poll)

    def predict(
        self,
        server_id: str,
        instances: list[Any],
        *,
        version: int | None = None,
        signature_name: str | None = None,
    ) -> dict[str, Any]:
        """POST `{"instances": ...}` to the model server (through the proxy) and return
        TensorFlow Serving's answer; an error answer raises ServerError with its message."""
        server = self.model_server(server_id)
        url = server.url + (f"/versions/{version}" if version is not None else "") + ":predict"
        body: dict[str, Any] = {"instances": instances}
        if signature_name:
            body["signature_name"] = signature_name
        r = self.http.post(url, json=body)
        data = r.json()
        if not r.is_success:
            raise ServerError(r.status_code, str(data.get("error", data)), [])
        return dict(data)

    # -- notebooks ------------------------------------------------------------------------

    def notebook(self, *, team: str | None = None) -> NotebookOut:
        """Start (or find) your JupyterLab server in the team; open its `url`."""
        data = self._json("POST", f"/api/v1/teams/{self._team(team)}/notebook")
        return NotebookOut.model_validate(data)

    def notebooks(self) -> list[NotebookOut]:
        return [NotebookOut.model_validate(n) for n in self._json("GET", "/api/v1/notebooks")]

    def stop_notebook(self, notebook_id: str) -> NotebookOut:
        data = self._json("POST", f"/api/v1/notebooks/{notebook_id}/stop")
        return NotebookOut.model_validate(data)

    def download_artifact(self, artifact_id: str, dest: str | Path) -> Path:
        """An uploaded artifact's archive (.tar.gz) to `dest`."""
        target = Path(dest)
        with self.http.stream(
            "GET", f"/api/v1/artifacts/{artifact_id}/download", timeout=None
        ) as r:
            if not r.is_success:
                r.read()
                self._check(r)
            with target.open("wb") as out:
                for chunk in r.iter_bytes():
                    out.write(chunk)
        return target
