"""Parse job files into `TFJob`, and turn validation failures into errors that name the
field and the fix. No I/O beyond what the caller hands in (text or a mapping)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import ValidationError

from tfkube.spec._errors import FieldError, SpecError, errors_from
from tfkube.spec._models import (
    API_VERSION,
    KIND,
    CodeSpec,
    JobSpec,
    Metadata,
    Replicas,
    ReplicaSpec,
    TFJob,
)


def parse_job(data: Mapping[str, Any], source: str = "job") -> TFJob:
    """Validate a mapping (a parsed YAML document) into a TFJob."""
    if not isinstance(data, Mapping):
        raise SpecError([FieldError("(top level)", "a job file must be a YAML mapping")], source)
    if data.get("apiVersion") == "kubeflow.org/v1":
        # A Kubeflow TFJob converts (`tfkube.spec.from_kubeflow`) or is rejected naming
        # the fields that do not map. Imported here: _kubeflow builds on this module.
        from tfkube.spec._kubeflow import from_kubeflow

        return from_kubeflow(data, source)
    try:
        return TFJob.model_validate(dict(data))
    except ValidationError as exc:
        raise SpecError(errors_from(exc), source) from None


def load_job_text(text: str, source: str = "job") -> TFJob:
    """Parse YAML text holding one TFJob document."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError([FieldError("(yaml)", f"not valid YAML: {exc}")], source) from None
    if data is None:
        raise SpecError([FieldError("(top level)", "the file is empty")], source)
    return parse_job(data, source)


def quick_job(name: str, workers: int, ps: int, code: str, entrypoint: str = "run.sh") -> TFJob:
    """The original platform's four-parameter form: name, workers, PS, code location."""
    raw: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {
            "replicas": {"worker": {"replicas": workers}},
            "code": {"source": code, "entrypoint": entrypoint},
        },
    }
    if ps:
        raw["spec"]["replicas"]["ps"] = {"replicas": ps}
    field_names = {"name": "--name", "workers": "--workers", "ps": "--ps", "code": "--code"}
    try:
        return parse_job(raw, "command line")
    except SpecError as exc:
        # Name the flag the user typed, not the field it became.
        renamed = []
        for e in exc.errors:
            flag = next(
                (f for key, f in field_names.items() if _quick_field(key) in e.field),
                e.field,
            )
            renamed.append(FieldError(flag, e.message))
        raise SpecError(renamed, "command line") from None


def _quick_field(key: str) -> str:
    return {
        "name": "metadata.name",
        "workers": "replicas.worker",
        "ps": "replicas.ps",
        "code": "code.source",
    }[key]


def dump_job(job: TFJob) -> str:
    """The job as YAML with every default filled in (what actually runs)."""
    return yaml.safe_dump(
        job.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=False
    )


__all__ = [
    "CodeSpec",
    "FieldError",
    "JobSpec",
    "Metadata",
    "ReplicaSpec",
    "Replicas",
    "SpecError",
    "dump_job",
    "errors_from",
    "load_job_text",
    "parse_job",
    "quick_job",
]
