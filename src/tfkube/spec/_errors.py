"""Errors that name the field and the fix: a job (or a form) that cannot run is one
`SpecError` listing every offending field, in the words a person reads (pydantic's
validation errors translated once, here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError


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


def field_path(loc: tuple[int | str, ...]) -> str:
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
        item = (field_path(tuple(error["loc"])), _message(error))
        if item not in seen:  # unions report one error per branch; keep it once
            seen.add(item)
            out.append(FieldError(*item))
    return out
