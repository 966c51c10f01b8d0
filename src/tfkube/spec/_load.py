"""Parse job files into `TFJob`, and turn validation failures into errors that name the
field and the fix. No I/O beyond what the caller hands in (text or a mapping).

YAML text is bounded before and while it is parsed, because job files come from anyone
allowed to submit (the server's API, the CLI, Kubeflow imports): at most
`MAX_DOCUMENT_BYTES`, nested at most `MAX_DEPTH` deep, and at most `MAX_NODES` values
once every alias (`*name`) is counted as the values it stands for. The count is kept as
the document is composed, so an alias bomb (a few hundred bytes whose aliases multiply
to millions of values) is refused before anything is built from it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import ValidationError

from tfkube.spec._errors import FieldError, SpecError, errors_from, field_path
from tfkube.spec._models import (
    CodeSpec,
    JobSpec,
    Metadata,
    Replicas,
    ReplicaSpec,
    TFJob,
)

MAX_DOCUMENT_BYTES = 1 << 20
"""A job document (YAML) larger than this is refused before it is parsed."""
MAX_NODES = 20_000
"""Values a document may hold, every alias counted as what it stands for."""
MAX_DEPTH = 64
"""How deeply mappings and lists may nest."""


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
"""Control characters no job field may hold (tab, newline and carriage return may: a
command or an environment value can span lines). A NUL cannot reach a process argument,
a file name or a PostgreSQL text column, and the others only ever hide what a value is."""


def _control_characters(data: Any) -> list[FieldError]:
    """Every string of a parsed document (keys too) holding a control character, by
    field path; the walk is iterative and stops at MAX_DEPTH (JSON has no depth bound)."""
    found: list[FieldError] = []
    stack: list[tuple[tuple[int | str, ...], Any]] = [((), data)]
    while stack and len(found) < 20:
        path, value = stack.pop()
        if len(path) > MAX_DEPTH:
            found.append(FieldError(field_path(path), f"nests deeper than {MAX_DEPTH} levels"))
            break
        if isinstance(value, str):
            if _CONTROL.search(value):
                found.append(
                    FieldError(
                        field_path(path),
                        "holds a control character (NUL, ESC, ...); remove it",
                    )
                )
        elif isinstance(value, Mapping):
            for key, item in reversed(list(value.items())):  # popped in document order
                key_text = str(key)
                if _CONTROL.search(key_text):
                    found.append(
                        FieldError(
                            field_path((*path, repr(key_text))),
                            "this name holds a control character; rename it",
                        )
                    )
                    continue
                stack.append(((*path, key_text), item))
        elif isinstance(value, list | tuple):
            stack.extend(reversed([((*path, i), item) for i, item in enumerate(value)]))
    return found


def parse_job(data: Mapping[str, Any], source: str = "job") -> TFJob:
    """Validate a mapping (a parsed YAML document) into a TFJob."""
    if not isinstance(data, Mapping):
        raise SpecError([FieldError("(top level)", "a job file must be a YAML mapping")], source)
    if problems := _control_characters(data):
        raise SpecError(problems, source)
    if data.get("apiVersion") == "kubeflow.org/v1":
        # A Kubeflow TFJob converts (`tfkube.spec.from_kubeflow`) or is rejected naming
        # the fields that do not map. Imported here: _kubeflow builds on this module.
        from tfkube.spec._kubeflow import from_kubeflow

        return from_kubeflow(data, source)
    try:
        return TFJob.model_validate(dict(data))
    except ValidationError as exc:
        raise SpecError(errors_from(exc), source) from None


class _TooLarge(yaml.YAMLError):
    """A document past one of the bounds; the message names the bound."""


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, counting while it composes: the values of the document
    (an alias counts as every value of the node it names), and the nesting depth."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._count = 0
        self._depth = 0
        self._sizes: dict[int, int] = {}
        """id(node) -> the values it holds, for the nodes an alias may name."""

    def _add(self, values: int) -> None:
        self._count += values
        if self._count > MAX_NODES:
            raise _TooLarge(
                f"the document holds more than {MAX_NODES:,} values once its aliases (*name) "
                "are expanded; write it out without aliases, or make it smaller"
            )

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            node = super().compose_node(parent, index)
            size = self._sizes.get(id(node))
            if size is None:  # the alias names a node that is still being composed
                raise _TooLarge("an alias (*name) refers to the node that holds it (a cycle)")
            self._add(size)
            return node
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _TooLarge(f"the document nests deeper than {MAX_DEPTH} levels")
        before = self._count
        node = super().compose_node(parent, index)
        self._depth -= 1
        self._add(1)
        self._sizes[id(node)] = self._count - before
        return node


def load_yaml(text: str, source: str = "job") -> Any:
    """One YAML document as plain data, within the bounds above (else SpecError naming
    the bound); None for an empty document."""
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_DOCUMENT_BYTES:
        raise SpecError(
            [
                FieldError(
                    "(yaml)",
                    f"the document is {size:,} bytes; at most {MAX_DOCUMENT_BYTES:,} are read",
                )
            ],
            source,
        )
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    except _TooLarge as exc:
        raise SpecError([FieldError("(yaml)", str(exc))], source) from None
    except yaml.YAMLError as exc:
        raise SpecError([FieldError("(yaml)", f"not valid YAML: {exc}")], source) from None
    finally:
        loader.dispose()


def load_job_text(text: str, source: str = "job") -> TFJob:
    """Parse YAML text holding one TFJob document."""
    data = load_yaml(text, source)
    if data is None:
        raise SpecError([FieldError("(top level)", "the file is empty")], source)
    return parse_job(data, source)


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
    "load_yaml",
    "parse_job",
]
