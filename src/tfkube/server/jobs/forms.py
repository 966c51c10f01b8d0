"""What a user submits -> the TFJob the engine runs. Pure.

Two ways in, one way out:
- the original platform's four fields (`JobForm`: name, workers, PS, code artifact, plus
  a few optional ones the dashboard's advanced section offers) -> `form_job`;
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
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tfkube.spec import FieldError, RestartPolicy, SpecError, TFJob, parse_job

ARTIFACT_SCHEME = "artifact:"
_REF = re.compile(r"^(?P<name>[a-z0-9]([-a-z0-9_.]{0,62}[a-z0-9])?)(?::(?P<version>[1-9][0-9]*))?$")
_SHA = re.compile(r"^sha256:(?P<sha>[0-9a-f]{64})$")


class JobForm(BaseModel):
    """The four fields (and the optional advanced ones) of a job submitted by form."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    name: str
    """The job's name (a DNS label of at most 40 characters)."""
    workers: int = Field(ge=1, le=100_000)
    """How many workers."""
    ps: int = Field(0, ge=0, le=100_000)
    """How many parameter servers (0 for none)."""
    code: str
    """The code artifact: `NAME` (latest version), `NAME:VERSION` or `sha256:HEX`."""
    entrypoint: str = "run.sh"
    """The script in the code to run."""
    args: list[str] = []
    """Extra arguments for every worker (and the chief)."""
    chief: bool = False
    """Add a chief (TF2 ParameterServerStrategy's coordinator)."""
    evaluator: bool = False
    """Add an evaluator."""
    cpu: str | None = None
    """CPU per worker, e.g. "1" or "500m"."""
    memory: str | None = None
    """Memory per worker, e.g. "2Gi"."""
    gpu: int = Field(0, ge=0, le=16)
    """GPUs per worker."""
    restart_policy: RestartPolicy = RestartPolicy.ON_FAILURE
    """Never, OnFailure or ExitCode."""
    deadline_seconds: int | None = Field(None, gt=0)
    """Fail the job when it has run this long."""
    tensorboard: bool = False
    """A TensorBoard for the job (on Kubernetes a Deployment; locally on demand anyway)."""

    @field_validator("code")
    @classmethod
    def _code_given(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("choose the code to run (upload its folder first if it is not listed)")
        return value.strip()


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


_FORM_FIELDS = (  # the most specific first: the first one contained in a path wins
    ("metadata.name", "name"),
    ("resources.cpu", "cpu"),
    ("resources.memory", "memory"),
    ("resources.gpu", "gpu"),
    ("spec.replicas.worker", "workers"),
    ("spec.replicas.ps", "ps"),
    ("spec.code.entrypoint", "entrypoint"),
    ("spec.code", "code"),
    ("spec.runPolicy.activeDeadlineSeconds", "deadline_seconds"),
)


def form_job(form: JobForm) -> TFJob:
    """The TFJob a form describes (code left as the form's reference; `place_job` pins it).
    Raises SpecError naming the form's fields."""
    worker: dict[str, Any] = {"replicas": form.workers}
    resources = {
        k: v for k, v in (("cpu", form.cpu), ("memory", form.memory), ("gpu", form.gpu)) if v
    }
    if resources:
        worker["resources"] = resources
    if form.args:
        worker["args"] = list(form.args)
    replicas: dict[str, Any] = {"worker": worker}
    if form.ps:
        replicas["ps"] = {"replicas": form.ps}
    if form.chief:
        replicas["chief"] = {"replicas": 1, **({"args": list(form.args)} if form.args else {})}
    if form.evaluator:
        replicas["evaluator"] = {"replicas": 1}
    run_policy: dict[str, Any] = {"restartPolicy": form.restart_policy.value}
    if form.deadline_seconds:
        run_policy["activeDeadlineSeconds"] = form.deadline_seconds
    raw: dict[str, Any] = {
        "apiVersion": "tfkube.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": form.name},
        "spec": {
            "replicas": replicas,
            "code": {"source": ARTIFACT_SCHEME + form.code, "entrypoint": form.entrypoint},
            "runPolicy": run_policy,
        },
    }
    if form.tensorboard:
        raw["spec"]["tensorboard"] = {}
    try:
        return parse_job(raw, "form")
    except SpecError as exc:
        renamed = [
            FieldError(next((f for path, f in _FORM_FIELDS if path in e.field), e.field), e.message)
            for e in exc.errors
        ]
        raise SpecError(renamed, "form") from None


def server_problems(job: TFJob) -> list[FieldError]:
    """Fields a job submitted to the server may not set: the server chooses the folders
    on its own machine (a user naming one could read or overwrite the server's files)."""
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
    sha256), its folders are the server's (locally) or a claim the server reads (cluster)."""
    raw = job.model_dump(mode="json", by_alias=True, exclude_none=True)
    if code_url is not None:
        raw["spec"]["code"]["source"] = code_url
        raw["spec"]["code"]["sha256"] = code_sha256
    storage = raw["spec"].setdefault("storage", {})
    if data_dir is not None:
        storage.setdefault("data", {})["path"] = data_dir
    if log_dir is not None:
        storage.setdefault("logs", {})["path"] = log_dir
    if logs_claim is not None:
        storage.setdefault("logs", {})["claimName"] = logs_claim
    return parse_job(raw, f"job {job.name!r}")
