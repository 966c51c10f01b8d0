"""Which exported versions there are, and which of them a model server serves. Pure but
for `exported_versions`, which only lists a folder.

The export convention (`TFKUBE_EXPORT_DIR`, set by the launcher): a job's chief (or
worker 0) writes a SavedModel to `<the job's output folder>/export/<version>`, a whole
number such as the global step, in a hidden folder first and renamed when complete. The
same layout is what TensorFlow Serving's `--model_base_path` expects, so the local model
server and the stock `tensorflow/serving` image in a cluster read the same folder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")


def version_of(name: str) -> int | None:
    """A version folder's number, or None for anything else (hidden partial exports,
    stray files): the rule TensorFlow Serving applies to the children of its base path."""
    if not name.isascii() or not name.isdigit():
        return None
    value = int(name)
    return value if value < 2**63 else None


def exported_versions(base: str | os.PathLike[str]) -> list[int]:
    """The complete SavedModel versions below `base`, oldest first ([] when none)."""
    try:
        entries = list(os.scandir(base))
    except OSError:
        return []
    found = []
    for entry in entries:
        version = version_of(entry.name)
        if version is None or not entry.is_dir():
            continue
        if any(Path(entry.path, f).is_file() for f in SAVED_MODEL_FILES):
            found.append(version)
    return sorted(found)


@dataclass(frozen=True)
class VersionPolicy:
    """Which versions a model server serves (TensorFlow Serving's model_version_policy)."""

    specific: int | None = None
    """None: the latest (a newer export replaces the served one without a restart);
    a number: that version only."""

    def wanted(self, available: list[int]) -> int | None:
        """The version to serve now, or None when it does not exist (yet)."""
        if self.specific is None:
            return max(available) if available else None
        return self.specific if self.specific in available else None

    def describe(self) -> str:
        return "latest" if self.specific is None else str(self.specific)


def choose_version(available: list[int], requested: int | None) -> tuple[int | None, str | None]:
    """What `tfkube serve` would serve: (version, None), or (None, why not) for people."""
    if not available:
        return None, (
            "the job has exported no model yet; its chief (or worker 0) writes a SavedModel "
            "to $TFKUBE_EXPORT_DIR/<version>"
        )
    if requested is not None and requested not in available:
        listed = ", ".join(str(v) for v in available)
        return None, f"the job has no exported version {requested}; it has {listed}"
    return (requested if requested is not None else max(available)), None
