"""`ServerBackend`: the `Backend` interface over the server's REST API, so the CLI's
commands (`submit`, `list`, `status`, `logs`, `delete`, with `--engine server`) work
against a tfkube server as they do against the local and Kubernetes engines.

A job names a local code folder? It is uploaded first (an artifact named after the job;
the same bytes are stored once) and the job is submitted pinned to that version."""

from __future__ import annotations

import builtins
import time
from collections.abc import Iterator
from pathlib import Path

from tfkube.client._client import Client, ServerError
from tfkube.engines import (
    Credentials,
    DataFrom,
    JobEvent,
    JobExists,
    JobNotFound,
    JobView,
    ShipTo,
    UsageUnavailable,
)
from tfkube.planner import JobPhase
from tfkube.spec import FieldError, SpecError, TFJob, parse_job
from tfkube.wire import JobOut


def job_view(job: JobOut) -> JobView:
    """The server's JSON -> the engine-neutral view (pure). Its replicas are the same
    records the engine made (`tfkube.planner.Replica`): nothing to convert."""
    try:
        phase = JobPhase(job.phase)
    except ValueError:
        phase = JobPhase.PENDING
    return JobView(
        name=job.name,
        phase=phase,
        restarts=job.restarts,
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        reason=job.reason,
        message=job.message,
        replicas=tuple(job.replicas or ()),
        extra={
            "engine": "server",
            "team": job.team,
            "id": job.id,
            **({"exports": ", ".join(str(v) for v in job.exports)} if job.exports else {}),
        },
        preemptions=job.preemptions,
        disruptions=job.disruptions,
        result=job.result,
    )


class ServerBackend:
    def __init__(self, client: Client, team: str | None = None) -> None:
        self.client = client
        self.team = client._team(team)

    def _find(self, name: str) -> JobOut:
        found = self.client.find(name, team=self.team)
        if found is None:
            raise JobNotFound(name)
        return found

    def submit(
        self,
        job: TFJob,
        base_dir: Path,
        *,
        code_token: str | None = None,
        data_credentials: Credentials | None = None,
        ship: ShipTo | None = None,
        data_from: DataFrom | None = None,
    ) -> JobView:
        """`data_credentials`, `ship` and `data_from` go unused: a server's job reads with
        its team's secret (`spec.storage.data.credentials`), and the server decides what is
        shipped and where data comes from."""
        code = job.spec.code
        if (
            code is not None
            and not code.is_url
            and not code.source.startswith(("artifact:", "sha256:"))
        ):
            folder = (base_dir / code.source).resolve()
            if not folder.is_dir():
                raise SpecError(
                    [FieldError("spec.code.source", f"{folder} is not a folder to upload")],
                    f"job {job.name!r}",
                )
            artifact = self.client.upload(
                folder, job.name, team=self.team, entrypoint=code.entrypoint
            )
            raw = job.model_dump(mode="json", by_alias=True, exclude_none=True)
            raw["spec"]["code"]["source"] = f"artifact:{artifact.name}:{artifact.version}"
            job = parse_job(raw, f"job {job.name!r}")
        try:
            return job_view(self.client.submit(job, team=self.team))
        except ServerError as exc:
            if exc.status == 409:
                raise JobExists(str(exc)) from None
            raise

    def get(self, name: str) -> JobView:
        return job_view(self._find(name))

    def list(self) -> builtins.list[JobView]:
        return [job_view(j) for j in self.client.jobs(team=self.team)]

    def logs(self, name: str, replica: str | None = None, follow: bool = False) -> Iterator[str]:
        job = self._find(name)
        keys = [r.key for r in job.replicas or []]
        if replica is not None and replica not in keys:
            raise ValueError(
                f"job {name!r} has no replica {replica!r}; its replicas are {', '.join(keys)}"
            )
        if replica is not None:
            yield from self.client.logs(job.id, replica, follow=follow)
            return
        have = {f.replica for f in self.client.log_files(job.id)}
        for key in keys:
            if key in have:
                for line in self.client.logs(job.id, key):
                    yield f"[{key}] {line}"

    def events(self, name: str) -> builtins.list[JobEvent]:
        return [
            JobEvent(time=e.time, message=e.message, replica=e.replica)
            for e in self.client.events(self._find(name).id)
        ]

    def delete(self, name: str) -> JobView:
        job = self._find(name)
        self.client.delete(job.id)
        return job_view(job)

    def stop(self, name: str) -> JobView:
        return job_view(self.client.stop(self._find(name).id))

    def usage(self, name: str) -> dict[str, tuple[float, float, int]]:
        raise UsageUnavailable("the server keeps each replica's usage: GET /api/v1/jobs/{id}/usage")

    def scale(self, name: str, workers: int) -> JobView:
        """The server's resize (`POST /api/v1/jobs/{id}/scale`); its refusals name the
        field (a 422 becomes a SpecError, as the CLI shows it)."""
        try:
            return job_view(self.client.scale(self._find(name).id, workers))
        except ServerError as exc:
            if exc.status == 422 and exc.errors:
                raise SpecError(exc.errors, f"scaling job {name!r}") from None
            raise

    def wait(self, name: str, timeout: float | None = None) -> JobView:
        deadline = None if timeout is None else time.monotonic() + timeout
        job = self._find(name)
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        return job_view(self.client.wait(job.id, left))
