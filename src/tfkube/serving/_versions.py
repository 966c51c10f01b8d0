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
from collections.abc import Collection, Mapping, Sequence
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
    """Which versions a model server serves (TensorFlow Serving's model_version_policy:
    `latest { num_versions }`, `all {}`, `specific { versions }`)."""

    specific: tuple[int, ...] = ()
    """These versions only; empty: the newest `latest` (a newer export replaces the
    oldest served one without a restart)."""
    latest: int = 1
    """How many of the newest versions are served at once (with no `specific`)."""
    every: bool = False
    """Every exported version (TensorFlow Serving's `all {}`)."""

    @classmethod
    def one(cls, version: int | None) -> VersionPolicy:
        """The latest version (None), or that version only."""
        return cls() if version is None else cls(specific=(version,))

    def serve(self, available: Sequence[int]) -> list[int]:
        """The versions to serve now, newest first ([] when none exists yet)."""
        ordered = sorted(set(available), reverse=True)
        if self.every:
            return ordered
        if self.specific:
            return [v for v in ordered if v in self.specific]
        return ordered[: max(self.latest, 1)]

    def wanted(self, available: Sequence[int]) -> int | None:
        """The newest version to serve now, or None when none exists (yet)."""
        served = self.serve(available)
        return served[0] if served else None

    def describe(self) -> str:
        if self.every:
            return "all"
        if self.specific:
            return ",".join(str(v) for v in sorted(self.specific))
        return "latest" if self.latest == 1 else f"latest {self.latest}"


def parse_policy(text: str) -> VersionPolicy:
    """`latest`, `latest:N`, `all`, `specific:V[,V...]` or a bare version -> the policy
    (ValueError, for a flag's error, otherwise)."""
    kind, _, rest = text.strip().partition(":")
    kind = kind.strip().lower()
    if kind.isdigit() and not rest:
        return VersionPolicy(specific=(int(kind),))
    if kind == "latest":
        count = int(rest) if rest.strip() else 1
        if count < 1:
            raise ValueError("latest:N needs N >= 1")
        return VersionPolicy(latest=count)
    if kind == "all" and not rest.strip():
        return VersionPolicy(every=True)
    if kind == "specific":
        versions = tuple(sorted({int(v) for v in rest.split(",") if v.strip()}))
        if not versions or any(v < 0 for v in versions):
            raise ValueError("specific:V[,V...] needs at least one version")
        return VersionPolicy(specific=versions)
    raise ValueError(f"{text!r}: expected latest, latest:N, all or specific:V[,V...]")


def plan_versions(
    wanted: Sequence[int], loaded: Collection[int], failed: Collection[int]
) -> tuple[list[int], list[int]]:
    """(what to load, newest first; what to unload) to go from `loaded` to `wanted`.
    Availability first, as TensorFlow Serving's default policy: a version is unloaded
    only once a wanted one is loaded, so a version that failed to load (and is not tried
    again) leaves the newest loaded one served."""
    load = [v for v in sorted(wanted, reverse=True) if v not in loaded and v not in failed]
    if any(v in wanted for v in loaded):
        unload = [v for v in loaded if v not in wanted]
    else:  # nothing wanted is up: the newest loaded one keeps answering
        unload = sorted(loaded, reverse=True)[1:]
    return load, sorted(unload)


def parse_pairs(text: str, what: str) -> dict[str, int]:
    """`a=1,b=2` -> {"a": 1, "b": 2} (version labels, traffic weights); ValueError."""
    pairs: dict[str, int] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not key or not value.strip().isdigit():
            raise ValueError(f"{part.strip()!r}: expected {what} as name=number")
        if key in pairs:
            raise ValueError(f"{key!r} is given twice")
        pairs[key] = int(value)
    return pairs


def split_label(
    weights: Mapping[str, int], labels: Mapping[str, int], available: Collection[int], draw: float
) -> str | None:
    """Which label a request that names neither version nor label goes to (the traffic
    split between labels), for a `draw` in [0, 1); None: no split applies (then the
    newest version answers). Labels whose version is not available take no share."""
    live = [(k, w) for k, w in sorted(weights.items()) if w > 0 and labels.get(k) in available]
    total = sum(w for _, w in live)
    if total <= 0:
        return None
    point = draw * total
    for label, weight in live:
        if point < weight:
            return label
        point -= weight
    return live[-1][0]


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
