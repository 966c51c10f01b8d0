"""Can this machine run the job's commands? Decided at submit, before anything starts.

A role that gives its own `command` (Kubeflow's shape: `[python, /opt/train.py]`,
`[sh, -c, "..."]`) runs it as a process here. That only works when its program exists
here: `python`/`python3` (tfkube's own interpreter, first on every replica's PATH), a name
found on PATH, an absolute path that exists, or a relative path into the job's code (or
`workingDir`). A script given to an interpreter (`python /opt/train.py`, `bash run.sh`) is
checked the same way, because an image's files are not on this machine. Fields only a
cluster can honour (extra volumes, helper containers, Secret/ConfigMap/pod-field
variables) are refused too. Each refusal names the field and says what to do.

Pure apart from the two look-ups it is given (`which`, `exists`), so the rules are
table-tested (tests/unit/test_local_commands.py).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable
from pathlib import PurePosixPath

from tfkube.spec import FieldError, Role, TFJob

PYTHONS = frozenset({"python", "python3"})
"""Run with tfkube's own interpreter (or the job's requirements environment)."""
SHELLS = frozenset({"sh", "bash", "dash"})
_PYTHON_OPTIONS_WITH_VALUE = frozenset({"-W", "-X", "-Q"})
_ELSEWHERE = "run it on a cluster (--engine kubernetes), where its image has it"


def _is_python(program: str) -> bool:
    name = posixpath.basename(program)
    return name in PYTHONS or (name.startswith("python3.") and name[8:].isdigit())


def script_of(command: list[str]) -> str | None:
    """The script an interpreter in `command` runs (`python -u train.py` -> train.py), or
    None: not an interpreter, or a module (-m), inline code (-c) or standard input."""
    program = posixpath.basename(command[0])
    python = _is_python(command[0])
    if not python and program not in SHELLS:
        return None
    words = iter(command[1:])
    for word in words:
        if word == "--":
            return next(words, None)
        if word in ("-c", "-m", "-"):
            return None
        if word.startswith("-"):
            if python and word in _PYTHON_OPTIONS_WITH_VALUE:
                next(words, None)
            if not python and word.startswith("-") and "c" in word[1:] and "-" not in word[1:]:
                return None  # sh -ec '...'
            continue
        return word
    return None


def _relative_ok(path: str, code: frozenset[str] | None, base: str | None) -> bool | None:
    """A relative path: in the code (True/False), in workingDir (None: check on disk)."""
    if code is not None:
        normal = posixpath.normpath(path)
        return normal in code and not normal.startswith("../")
    return None if base is not None else False


def _check_path(
    path: str,
    what: str,
    field: str,
    code: frozenset[str] | None,
    working_dir: str | None,
    exists: Callable[[str], bool],
    fetched: bool = False,
) -> FieldError | None:
    if PurePosixPath(path).is_absolute():
        if exists(path):
            return None
        return FieldError(field, f"{what} {path!r} is not on this machine; {_ELSEWHERE}")
    if fetched:
        return None  # into code each replica fetches itself: not known here
    inside = _relative_ok(path, code, working_dir)
    if inside is None:
        assert working_dir is not None
        if exists(posixpath.join(working_dir, path)):
            return None
        return FieldError(field, f"{what} {path!r} is not in workingDir {working_dir}")
    if inside:
        return None
    if code is not None:
        return FieldError(
            field, f"{what} {path!r} is not in the code (spec.code.source); add it or fix the path"
        )
    return FieldError(
        field,
        f"{what} {path!r} is a relative path and the job has no code to find it in; give "
        "spec.code.source (the folder holding it), an absolute path, or workingDir",
    )


def command_problems(
    job: TFJob,
    code: frozenset[str] | None,
    which: Callable[[str], str | None],
    exists: Callable[[str], bool],
    is_dir: Callable[[str], bool],
    *,
    fetched: bool = False,
) -> list[FieldError]:
    """Why this machine cannot run `job` as given (empty: it can). `code` holds the names
    in the job's code archive (None: the job has no code, or `fetched`: its replicas fetch
    it themselves, so relative paths into it cannot be checked here)."""
    problems: list[FieldError] = []
    for role in Role:
        spec = job.spec.replicas.get(role)
        if spec is None or spec.replicas == 0:
            continue
        at = f"spec.replicas.{role.value}"
        problems += _cluster_only(at, spec.cluster_only())
        if spec.working_dir is not None and not is_dir(spec.working_dir):
            problems.append(
                FieldError(f"{at}.workingDir", f"{spec.working_dir} is not a folder here")
            )
        if spec.command is None:
            continue
        base = spec.working_dir if code is None else None
        program = spec.command[0]
        field = f"{at}.command"
        if _is_python(program) and "/" not in program:
            pass  # tfkube's interpreter (first on PATH)
        elif "/" in program:
            found = _check_path(program, "its program", field, code, base, exists, fetched)
            if found is not None:
                problems.append(found)
        elif which(program) is None:
            problems.append(
                FieldError(
                    field,
                    f"its program {program!r} is not on this machine's PATH; "
                    f"install it or {_ELSEWHERE}",
                )
            )
        script = script_of([*spec.command, *spec.args])
        if script is not None:
            found = _check_path(script, "its script", field, code, base, exists, fetched)
            if found is not None:
                problems.append(found)
    return problems


def _cluster_only(at: str, fields: Iterable[str]) -> list[FieldError]:
    return [
        FieldError(
            f"{at}.{name}",
            "only a cluster can provide this (the local engine runs plain processes); "
            f"remove it to run here, or {_ELSEWHERE.replace(', where its image has it', '')}",
        )
        for name in fields
    ]
