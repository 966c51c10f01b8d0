"""What a user submits -> the TFJob the engine runs. Pure.

Two ways in, one way out:
- the original platform's four fields (`tfkube.spec.JobForm`, the CLI's quick form too:
  name, workers, PS, code artifact, plus the optional ones the dashboard's advanced
  section offers) -> `artifact_job`;
- a full TFJob (or Kubeflow TFJob) document -> `tfkube.spec.parse_job`.
Either way `place_job` then pins the job to the server: the code becomes the artifact's
URL on this server with its sha256, and the shared folders become the server's own
(per job), so a user can never point a job at an arbitrary folder of the server's machine.

Errors are `SpecError`s whose fields are the form's own (`name`, `workers`, `ps`, `code`)
or the document's dotted paths, in the CLI's wording.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tfkube.spec import FieldError, JobForm, TFJob, form_job

ARTIFACT_SCHEME = "artifact:"
_REF = re.compile(r"^(?P<name>[a-z0-9]([-a-z0-9_.]{0,62}[a-z0-9])?)(?::(?P<version>[1-9][0-9]*))?$")
_SHA = re.compile(r"^sha256:(?P<sha>[0-9a-f]{64})$")


@dataclass(frozen=True)
class ArtifactRef:
    """A reference to an uploaded artifact of the submitting team."""

    name: str | None = None
    version: int | None = None
    """None: the latest version."""
    sha256: str | None = None


def parse_ref(text: str) -> ArtifactRef | None:
    """`NAME`, `NAME:VERSION`, `sha256:HEX`, each optionally prefixed by `artifact:`; None
    when the text is not an artifact reference (an http(s) URL, a folder)."""
    body = text.removeprefix(ARTIFACT_SCHEME)
    if m := _SHA.match(body):
        return ArtifactRef(sha256=m.group("sha"))
    if body.startswith(("http://", "https://")):
        return None
    if m := _REF.match(body):
        version = m.group("version")
        return ArtifactRef(name=m.group("name"), version=int(version) if version else None)
    return None


def artifact_job(form: JobForm) -> TFJob:
    """The TFJob of the server's form (`tfkube.spec.form_job`, the CLI's quick form too):
    its code is the team's artifact the form names, `place_job` pins it. Raises SpecError
    naming the form's fields."""
    return form_job(form.model_copy(update={"code": ARTIFACT_SCHEME + form.code}))


def server_problems(job: TFJob, data_sources: bool = True) -> list[FieldError]:
    """Fields a job submitted to the server may not set: the server chooses the folders
    on its own machine (a user naming one could read or overwrite the server's files).
    A data source must name the team's secret its store's credentials are in (the
    server's own never serve a team's job), and needs an engine that stages it
    (`data_sources`: the local engine)."""
    problems = []
    for which in ("data", "logs"):
        volume = getattr(job.spec.storage, which)
        if volume.path is not None:
            problems.append(
                FieldError(
                    f"spec.storage.{which}.path",
                    "the server chooses the job's folders; remove path (outputs are listed "
                    "and downloaded through the server)",
                )
            )
    data = job.spec.storage.data
    if data.source is not None and not data_sources:
        problems.append(
            FieldError(
                "spec.storage.data.source",
                "this server's engine does not stage data sources yet (the local engine "
                "does); upload the data as a data set, or use a claim",
            )
        )
    elif data.source is not None and data.credentials is None:
        problems.append(
            FieldError(
                "spec.storage.data.credentials",
                "name the team's secret that holds the store's credentials (a team admin "
                "stores it: the team's secrets)",
            )
        )
    return problems


def place_job(
    job: TFJob,
    *,
    code_url: str | None,
    code_sha256: str | None,
    data_dir: str | None,
    log_dir: str | None,
    logs_claim: str | None = None,
) -> TFJob:
    """Pin a job to the server: its code is the artifact at `code_url` (verified by
    sha256), its folders are the server's (locally) or a claim the server reads (cluster).
    The job is not parsed again: what changes are the server's own values."""
    spec = job.spec
    changes: dict[str, object] = {}
    if code_url is not None and spec.code is not None:
        changes["code"] = spec.code.model_copy(update={"source": code_url, "sha256": code_sha256})
    data, logs = spec.storage.data, spec.storage.logs
    if data_dir is not None and data.source is None:
        # A data source is staged by the engine into the job's own data folder.
        data = data.model_copy(update={"path": data_dir})
    if log_dir is not None:
        logs = logs.model_copy(update={"path": log_dir})
    if logs_claim is not None:
        logs = logs.model_copy(update={"claim_name": logs_claim})
    changes["storage"] = spec.storage.model_copy(update={"data": data, "logs": logs})
    return job.model_copy(update={"spec": spec.model_copy(update=changes)})
