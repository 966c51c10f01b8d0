"""Comparing 2 to 10 jobs side by side (pure; table-tested in tests/unit/test_compare.py):
which jobs a request names, their results with the best of each marked, and their
settings as rows that say where the jobs differ. Each role's arguments are compared flag
by flag (`--lr=0.1` and `--lr 0.1` are the same setting), the rest of the TFJob as dotted
paths. The API (`GET /api/v1/compare`) and the dashboard's compare page answer the same
`CompareOut`; the rows are decided here once."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from tfkube.wire import CompareOut, DiffRow, JobOut, ResultRow, ScalarsOut

MIN_JOBS = 2
MAX_JOBS = 10
_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
LOWER_IS_BETTER = ("loss", "error", "err", "time", "second", "perplexity", "latency", "mse", "mae")
"""A result whose name holds one of these words is better lower; any other higher."""
NOT_COMPARED = ("metadata.name", "spec.storage")
"""Spec paths left out of the settings rows: the job's name heads its column, and its
folders are the server's own, different for every job by design."""


class BadSelection(ValueError):
    """The jobs to compare were not 2 to 10 job ids (the message says how to fix it)."""


def parse_ids(values: Sequence[str]) -> list[str]:
    """`?jobs=a,b,c` or `?jobs=a&jobs=b` -> the ids in the order given, each once. Raises
    BadSelection unless there are 2 to 10 ids, each 1-64 letters, digits, _ or -."""
    ids: list[str] = []
    for value in values:
        for part in value.split(","):
            text = part.strip()
            if not text:
                continue
            if not _ID.fullmatch(text):
                raise BadSelection(f"{text[:70]!r} is not a job id (give ids from the jobs list)")
            if text not in ids:
                ids.append(text)
    if not MIN_JOBS <= len(ids) <= MAX_JOBS:
        raise BadSelection(
            f"give {MIN_JOBS} to {MAX_JOBS} job ids, comma-separated "
            f"(e.g. jobs=ID1,ID2); got {len(ids)}"
        )
    return ids


_FLAG = re.compile(r"^(--?[A-Za-z_][\w.-]*)(?:=(.*))?$", re.S)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def split_args(args: Sequence[str]) -> dict[str, str]:
    """Command-line arguments -> setting -> value: `--lr=0.1` and `--lr 0.1` both give
    {'--lr': '0.1'}, a flag alone gives '' (a flag followed by another flag, or last), a
    negative number is a value, and a positional argument is kept by its position
    ('#1', '#2', ...)."""
    out: dict[str, str] = {}
    position = 0
    i = 0
    while i < len(args):
        arg = args[i]
        m = _FLAG.match(arg)
        if m and not _is_number(arg):
            flag, value = m.group(1), m.group(2)
            following = args[i + 1] if i + 1 < len(args) else None
            takes_next = following is not None and (
                not _FLAG.match(following) or _is_number(following)
            )
            if value is None and takes_next:
                value = following
                i += 1
            out[flag] = value if value is not None else ""
        else:
            position += 1
            out[f"#{position}"] = arg
        i += 1
    return out


def flatten(data: Any, prefix: str = "") -> dict[str, str]:
    """Plain data as dotted paths -> text: a list of plain values as one value (spaces
    between), a list holding objects by position (`[0]`)."""
    out: dict[str, str] = {}
    if isinstance(data, Mapping):
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(data, list) and any(isinstance(v, Mapping | list) for v in data):
        for i, value in enumerate(data):
            out.update(flatten(value, f"{prefix}[{i}]"))
    elif isinstance(data, list):
        out[prefix] = " ".join(str(v) for v in data)
    elif isinstance(data, bool):
        out[prefix] = "true" if data else "false"
    elif data is not None:
        out[prefix] = str(data)
    return out


def diff_rows(columns: Sequence[Mapping[str, str]]) -> list[DiffRow]:
    """One row per name any column has, in first-seen order: each column's value (None
    where a job has none), and whether they differ (a missing value differs from any)."""
    names: dict[str, None] = {}
    for column in columns:
        names.update(dict.fromkeys(column))
    rows = []
    for name in names:
        values = [column.get(name) for column in columns]
        rows.append(DiffRow(name=name, values=values, differs=len(set(values)) > 1))
    return rows


def lower_is_better(name: str) -> bool:
    words = re.split(r"[^a-z]+", name.lower())
    return any(w in words or (len(w) > 3 and w in name.lower()) for w in LOWER_IS_BETTER)


def best_of(values: Sequence[float | int | None], name: str) -> int | None:
    """The index of the best of several jobs' values of one result, or None when fewer
    than two jobs report it or they all report the same (nothing to choose)."""
    numbers = [(v, i) for i, v in enumerate(values) if v is not None]
    if len(numbers) < 2 or len({v for v, _ in numbers}) < 2:
        return None
    if lower_is_better(name):
        return min(numbers, key=lambda p: (p[0], p[1]))[1]
    return max(numbers, key=lambda p: (p[0], -p[1]))[1]


def result_rows(results: Sequence[Mapping[str, float | int] | None]) -> list[ResultRow]:
    """One row per result name any job reports (first-seen order), the best marked."""
    names: dict[str, None] = {}
    for found in results:
        names.update(dict.fromkeys(found or {}))
    rows = []
    for name in names:
        values = [(found or {}).get(name) for found in results]
        rows.append(
            ResultRow(
                name=name,
                values=values,
                best=best_of(values, name),
                lower_is_better=lower_is_better(name),
            )
        )
    return rows


def _roles(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    replicas = (spec.get("spec") or {}).get("replicas") or {}
    return replicas if isinstance(replicas, Mapping) else {}


def argument_columns(specs: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Each job's arguments as `role setting` -> value (e.g. `worker --lr` -> '0.1')."""
    columns = []
    for spec in specs:
        column: dict[str, str] = {}
        for role, replica in _roles(spec).items():
            args = (replica or {}).get("args") or []
            for flag, value in split_args([str(a) for a in args]).items():
                column[f"{role} {flag}"] = value
        columns.append(column)
    return columns


def setting_columns(specs: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Each job's TFJob as dotted paths, without its arguments (compared flag by flag)
    and without NOT_COMPARED."""
    columns = []
    for spec in specs:
        flat = flatten(spec)
        args = {f"spec.replicas.{role}.args" for role in _roles(spec)}
        columns.append(
            {
                path: value
                for path, value in flat.items()
                if path not in args
                and not any(path == p or path.startswith(p + ".") for p in NOT_COMPARED)
            }
        )
    return columns


def build(
    jobs: Sequence[JobOut],
    specs: Sequence[Mapping[str, Any]],
    scalars: Sequence[ScalarsOut] | None = None,
) -> CompareOut:
    """The comparison of `jobs` (in the order asked; each with its result), given each
    one's TFJob as plain data (`specs`, same order) and, when asked, its scalars."""
    return CompareOut(
        jobs=[j.model_copy(update={"replicas": None, "spec": None}) for j in jobs],
        results=result_rows([j.result for j in jobs]),
        arguments=diff_rows(argument_columns(specs)),
        settings=diff_rows(setting_columns(specs)),
        scalars=list(scalars) if scalars is not None else None,
    )
