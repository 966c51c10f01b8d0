"""A job's final checkpoint: which files make it up (pure), and where it is in a job's
outputs (`find_checkpoint`, which reads the folder).

TensorFlow keeps a text index named `checkpoint` beside the checkpoints
(`model_checkpoint_path: ".../model.ckpt-1001"`); the newest checkpoint is the files whose
names start with that prefix (`.index`, `.data-00000-of-00001`, `.meta`). Paths in the
index may be absolute paths of the machine or pod that wrote them, so only the base name
counts, and the index handed out names the checkpoint relatively: unpacked anywhere,
`tf.train.latest_checkpoint(folder)` finds it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

INDEX = "checkpoint"
_LATEST = re.compile(r'^model_checkpoint_path:\s*"(?P<path>(?:[^"\\]|\\.)*)"\s*$', re.MULTILINE)


@dataclass(frozen=True)
class FinalCheckpoint:
    prefix: str
    """The checkpoint's name, e.g. `model.ckpt-1001`."""
    folder: str
    """Its folder relative to the job's outputs ('' for the top)."""
    files: tuple[str, ...]
    """Paths relative to the outputs, sorted."""

    def index_text(self) -> str:
        return (
            f'model_checkpoint_path: "{self.prefix}"\nall_model_checkpoint_paths: "{self.prefix}"\n'
        )


def latest_prefix(index_text: str) -> str | None:
    """The base name of the newest checkpoint an index names (None: none or unreadable)."""
    m = _LATEST.search(index_text)
    if m is None:
        return None
    name = PurePosixPath(m.group("path").replace("\\\\", "/").replace("\\", "/")).name
    return name or None


def final_checkpoint(folder: str, index_text: str, files: Iterable[str]) -> FinalCheckpoint | None:
    """The files of the checkpoint that `index_text` (the `checkpoint` index in `folder`)
    names, among `files` (names in that folder). None when it names nothing there."""
    prefix = latest_prefix(index_text)
    if prefix is None:
        return None
    found = sorted(f for f in files if f.startswith(prefix + "."))
    if not any(f.endswith(".index") for f in found):
        return None
    base = PurePosixPath(folder) if folder else None
    paths = tuple(str(base / f) if base else f for f in found)
    return FinalCheckpoint(prefix=prefix, folder=folder, files=paths)


def find_checkpoint(output_dir: str | None) -> FinalCheckpoint | None:
    """The newest checkpoint under a job's outputs: of every `checkpoint` index there (the
    job's log folder excluded), the most recently written one decides."""
    if not output_dir or not Path(output_dir).is_dir():
        return None
    root = Path(output_dir).resolve()
    indexes = [
        p
        for p in root.rglob(INDEX)
        if p.is_file() and not p.is_symlink() and ".tfkube" not in p.relative_to(root).parts
    ]
    for index in sorted(indexes, key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            text = index.read_text(errors="replace")[:65536]
        except OSError:
            continue
        folder = index.parent.relative_to(root).as_posix()
        names = [c.name for c in index.parent.iterdir() if c.is_file() and not c.is_symlink()]
        found = final_checkpoint("" if folder == "." else folder, text, names)
        if found is not None:
            return found
    return None
