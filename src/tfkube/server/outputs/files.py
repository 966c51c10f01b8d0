"""A job's outputs as the server hands them out: a folder listed (the job page's outputs
part; `GET /api/v1/jobs/{id}/outputs` lists the same way)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tfkube.server.core.paths import resolve_under
from tfkube.wire import OutputFile


class NotInOutputs(LookupError):
    """No such folder in the outputs."""


def list_folder(output_dir: str, parts: Sequence[str]) -> list[OutputFile]:
    """The files and folders in one folder of the outputs (`parts`: its path, checked by
    `core.paths.safe_parts`), links left out. UnsafePath when it leads out of them."""
    root = Path(output_dir)
    folder = resolve_under(root, "/".join(parts))
    if not folder.is_dir():
        raise NotInOutputs("/".join(parts))
    base = root.resolve()
    out = []
    for child in sorted(folder.iterdir()):
        if child.is_symlink():
            continue  # never listed nor followed: it could lead anywhere
        st = child.stat()
        out.append(
            OutputFile(
                path=child.relative_to(base).as_posix(),
                size=st.st_size if child.is_file() else 0,
                modified=st.st_mtime,
                is_dir=child.is_dir(),
            )
        )
    return out
