"""The four-field form (name, workers, PS, code) and its optional fields, coded once.

Two front doors fill it in: the CLI's quick form (`tfkube run --name N --workers W --ps P
--code DIR [--cpu ...] -- ARGS`) and the server's form (the API's four fields, the
dashboard's "New job"). The form checks types only; `form_job` turns it into the TFJob,
whose model checks every value, so the bounds are the job's own (no copy of them here)
and every problem is reported at once. The errors name the form's fields (`name`,
`workers`, `gpu`, ...), which each door shows as its own (the CLI as `--workers`, the
dashboard next to its field).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from tfkube.contract import DEFAULT_ENTRYPOINT
from tfkube.spec._errors import FieldError, SpecError, errors_from
from tfkube.spec._load import parse_job
from tfkube.spec._models import (
    API_VERSION,
    KIND,
    RestartPolicy,
    RunPolicy,
    TFJob,
)


class JobForm(BaseModel):
    """The four fields (and the optional advanced ones) of a job submitted by form."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    name: str
    """The job's name (a DNS label of at most 40 characters)."""
    workers: int
    """How many workers (at least one)."""
    ps: int = 0
    """How many parameter servers (0 for none)."""
    code: str
    """The code: on a server an uploaded artifact (`NAME`, the latest version,
    `NAME:VERSION` or `sha256:HEX`); on the command line a folder or an http(s) URL of a
    .tar.gz."""
    entrypoint: str = DEFAULT_ENTRYPOINT
    """The script in the code to run."""
    args: list[str] = []
    """Extra arguments for every worker (and the chief)."""
    env: dict[str, str] = {}
    """Extra environment variables for every replica."""
    chief: bool = False
    """Add a chief (TF2 ParameterServerStrategy's coordinator)."""
    evaluator: bool = False
    """Add an evaluator."""
    cpu: str | None = None
    """CPU per worker, e.g. "1" or "500m"."""
    memory: str | None = None
    """Memory per worker, e.g. "2Gi"."""
    gpu: int = 0
    """GPUs per worker."""
    restart_policy: RestartPolicy = RunPolicy().restart_policy
    """Never, OnFailure or ExitCode."""
    deadline_seconds: int | None = None
    """Fail the job when it has run this long."""
    tensorboard: bool = False
    """A TensorBoard for the job (on Kubernetes a Deployment; locally on demand anyway)."""
    data_source: str | None = None
    """Training data where it lives, `s3://bucket/prefix`: staged into the job's data
    folder before it starts (`spec.storage.data.source`)."""
    data_endpoint: str | None = None
    """The S3-compatible store's URL, e.g. `http://127.0.0.1:8333` (default: AWS)."""
    data_secret: str | None = None
    """On a server: the team's secret holding the store's credentials
    (`spec.storage.data.credentials`)."""

    @field_validator("code")
    @classmethod
    def _code_given(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("choose the code to run (upload its folder first if it is not listed)")
        return value.strip()


FORM_FIELDS = (  # the most specific first: the first one contained in a path wins
    ("metadata.name", "name"),
    ("resources.cpu", "cpu"),
    ("resources.memory", "memory"),
    ("resources.gpu", "gpu"),
    (".env", "env"),
    (".args", "args"),
    ("spec.replicas.worker", "workers"),
    ("spec.replicas.ps", "ps"),
    ("spec.replicas.chief", "chief"),
    ("spec.replicas.evaluator", "evaluator"),
    ("spec.code.entrypoint", "entrypoint"),
    ("spec.code", "code"),
    ("spec.runPolicy.activeDeadlineSeconds", "deadline_seconds"),
    ("spec.runPolicy.restartPolicy", "restart_policy"),
    ("spec.tensorboard", "tensorboard"),
    ("spec.storage.data.endpoint", "data_endpoint"),
    ("spec.storage.data.credentials", "data_secret"),
    ("spec.storage.data", "data_source"),
)
"""A job's field (a dotted path) -> the form field it came from."""


def _form_field(path: str) -> str:
    return next((f for inside, f in FORM_FIELDS if inside in path), path)


def form_errors(exc: SpecError, name: Callable[[str], str] = str) -> SpecError:
    """A job's errors as the form's fields (once each), for a job made from a form and
    refused after it was made (a server's checks)."""
    renamed = {FieldError(name(_form_field(e.field)), e.message): None for e in exc.errors}
    return SpecError(list(renamed), exc.source)


def read_form(
    values: Mapping[str, Any], source: str = "form", name: Callable[[str], str] = str
) -> JobForm:
    """The form from what a front door collected; a SpecError names its fields (through
    `name`, e.g. as the CLI's flags)."""
    try:
        return JobForm.model_validate(dict(values))
    except ValidationError as exc:
        problems = [FieldError(name(e.field), e.message) for e in errors_from(exc)]
        raise SpecError(problems, source) from None


def form_job(form: JobForm, source: str = "form", name: Callable[[str], str] = str) -> TFJob:
    """The TFJob a form describes, its code as the form gives it (the server makes an
    artifact reference of it first). Raises SpecError naming the form's fields (through
    `name`); a problem no field stands for keeps the job's own path."""
    every = {"env": dict(form.env)} if form.env else {}
    worker: dict[str, Any] = {"replicas": form.workers, **every}
    resources = {
        k: v for k, v in (("cpu", form.cpu), ("memory", form.memory), ("gpu", form.gpu)) if v
    }
    if resources:
        worker["resources"] = resources
    if form.args:
        worker["args"] = list(form.args)
    replicas: dict[str, Any] = {"worker": worker}
    if form.ps:
        replicas["ps"] = {"replicas": form.ps, **every}
    if form.chief:
        args = {"args": list(form.args)} if form.args else {}
        replicas["chief"] = {"replicas": 1, **args, **every}
    if form.evaluator:
        replicas["evaluator"] = {"replicas": 1, **every}
    run_policy: dict[str, Any] = {"restartPolicy": form.restart_policy.value}
    if form.deadline_seconds is not None:
        run_policy["activeDeadlineSeconds"] = form.deadline_seconds
    raw: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": form.name},
        "spec": {
            "replicas": replicas,
            "code": {"source": form.code, "entrypoint": form.entrypoint},
            "runPolicy": run_policy,
        },
    }
    if form.tensorboard:
        raw["spec"]["tensorboard"] = {}
    data = {
        k: v.strip()
        for k, v in (
            ("source", form.data_source),
            ("endpoint", form.data_endpoint),
            ("credentials", form.data_secret),
        )
        if v and v.strip()
    }
    if data:
        raw["spec"]["storage"] = {"data": data}
    try:
        return parse_job(raw, source)
    except SpecError as exc:
        # Once per form field: a value given to every role fails once, not per role.
        raise form_errors(exc, name) from None
