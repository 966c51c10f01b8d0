"""Which model server program the platform starts: tfkube's native one
(`tfkube-modelserver`, Go over TensorFlow's C API, built from native/modelserver by
tools/modelserver/build.sh into the venv's bin) or `python -m tfkube.serving`. Both take
the same flags and answer the same APIs; the native one is the default where it is
installed, `TFKUBE_MODEL_SERVER=python` (or `native`) chooses.

    native_binary() -> Path | None      model_server_command(kind) -> argv prefix
    chosen_kind(environ) -> Kind        is_model_server(argv) -> bool
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

BINARY = "tfkube-modelserver"
CHOICE_ENV = "TFKUBE_MODEL_SERVER"
"""`native` or `python`: which model server the platform starts (default: native when
its binary is installed, else python)."""

Kind = Literal["native", "python"]


def native_binary() -> Path | None:
    """The native model server beside this Python (the venv's bin), or None."""
    found = Path(sys.executable).parent / BINARY
    return found if found.is_file() and os.access(found, os.X_OK) else None


def chosen_kind(environ: Mapping[str, str] | None = None) -> Kind:
    """The model server to start: `TFKUBE_MODEL_SERVER` if set (ValueError for another
    word; RuntimeError for `native` without its binary), else native where installed."""
    env = os.environ if environ is None else environ
    wanted = env.get(CHOICE_ENV, "").strip().lower()
    if wanted == "python":
        return "python"
    if wanted not in ("", "native"):
        raise ValueError(f"{CHOICE_ENV}={wanted!r}: expected native or python")
    if native_binary() is not None:
        return "native"
    if wanted == "native":
        raise RuntimeError(
            f"{CHOICE_ENV}=native but {BINARY} is not installed beside {sys.executable} "
            "(make install, or bash tools/modelserver/build.sh)"
        )
    return "python"


def model_server_command(kind: Kind) -> list[str]:
    """The argv before the flags for `kind`."""
    if kind == "python":
        return [sys.executable, "-m", "tfkube.serving"]
    found = native_binary()
    if found is None:
        raise RuntimeError(f"{BINARY} is not installed beside {sys.executable}")
    return [str(found)]


def is_model_server(argv: Sequence[str]) -> bool:
    """Whether a process's command line is either model server's (pure)."""
    head = list(argv[:3])
    return any(part == "tfkube.serving" for part in head) or any(
        Path(part).name == BINARY for part in head[:1]
    )
