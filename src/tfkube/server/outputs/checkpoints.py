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
from pathlib import PurePosixPath

from tfkube import contract
from tfkube.server.outputs.folder import LocalFolder, OutputsFolder

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


def find_checkpoint(output_dir: str | OutputsFolder | None) -> FinalCheckpoint | None:
    """The newest checkpoint under a job's outputs (its folder, or its archive:
    `folder.OutputsFolder`): of every `checkpoint` index there (the job's log folder
    excluded), the most recently written one decides. Found and read without following
    anything the job linked (`tfkube.safefs`; an archive holds no links)."""
    if not output_dir:
        return None
    outputs = LocalFolder(output_dir) if isinstance(output_dir, str) else output_dir
    own = (contract.OWN_SUBDIR,)
    try:
        indexes = [
            (rel, e.mtime)
            for rel, e in outputs.walk(skip=lambda rel: rel == own)
            if e.kind == "file" and e.name == INDEX
        ]
    except OSError:
        return None
    for rel, _mtime in sorted(indexes, key=lambda found: found[1], reverse=True):
        try:
            text = outputs.read_bytes(rel, 65536).decode("utf-8", errors="replace")
            names = [e.name for e in outputs.entries(rel[:-1]) if e.kind == "file"]
        except OSError:
            continue
        found = final_checkpoint("/".join(rel[:-1]), text, names)
        if found is not None:
            return found
    return None
