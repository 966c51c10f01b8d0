"""Parse job files into `TFJob`, and turn validation failures into errors that name the
field and the fix. No I/O beyond what the caller hands in (text or a mapping)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import ValidationError

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


@dataclass(frozen=True)
class FieldError:
    field: str
    """Dotted path into the job file, e.g. `spec.replicas.worker.replicas`."""
    message: str


class SpecError(ValueError):
    """A job file that cannot run. `errors` names every offending field."""

    def __init__(self, errors: list[FieldError], source: str = "job") -> None:
        self.errors = errors
        self.source = source
        lines = [f"{source} is not a valid TFJob:"]
        lines += [f"  {e.field}: {e.message}" for e in errors]
        super().__init__("\n".join(lines))


_UNION_BRANCHES = {
    "str",
    "EnvFromCommand",
    "EnvFromSecret",
    "EnvFromConfigMap",
    "EnvFromField",
}
"""Union branch names pydantic adds to an error's path (environment values)."""


def _field_path(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in _UNION_BRANCHES:
            continue  # union branch names pydantic adds to the path
        else:
            parts.append(("." if parts else "") + item)
    return "".join(parts) or "(top level)"


def _message(error: Any) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown field; remove it or check its spelling (field names are camelCase)"
    if kind == "missing":
        return "required field is missing; add it"
    if kind in {"literal_error", "enum"}:
        return f"must be {error['ctx']['expected']}"
    bounds = {
        "greater_than_equal": ("at least", "ge"),
        "less_than_equal": ("at most", "le"),
        "greater_than": ("more than", "gt"),
        "less_than": ("less than", "lt"),
    }
    if kind in bounds:
        words, key = bounds[kind]
        return f"{error['input']!r} is out of range: it must be {words} {error['ctx'][key]}"
    text = str(error["msg"])
    return text.removeprefix("Value error, ")


def errors_from(exc: ValidationError) -> list[FieldError]:
    """A pydantic validation error as our field errors, in the CLI's wording."""
    seen: set[tuple[str, str]] = set()
    out: list[FieldError] = []
    for error in exc.errors():
        item = (_field_path(tuple(error["loc"])), _message(error))
        if item not in seen:  # unions report one error per branch; keep it once
            seen.add(item)
            out.append(FieldError(*item))
    return out


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
