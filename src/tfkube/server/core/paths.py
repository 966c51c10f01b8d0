"""Paths that come from users (a file in a job's outputs, a replica's log): parsed into
plain parts or refused (`safe_parts`, pure). The parts are then opened one at a time from
the folder's descriptor without following links (`tfkube.safefs`): a path is never
resolved by the kernel as a whole, so neither `..` nor a link a job made leads out.

A path is refused, not repaired: `..`, `.`, empty parts, absolute paths, backslashes,
drive letters, URL schemes (`file://`), NUL and control characters, and any `%` (the
framework has already decoded the URL once; a `%` left means a double-encoded `%252e`
trick or a name we would rather not guess about).
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_DRIVE = re.compile(r"^[A-Za-z]:")
MAX_PATH_LENGTH = 1024


class UnsafePath(ValueError):
    """A user-given path that could leave its folder; the message says why."""


def safe_parts(text: str) -> tuple[str, ...]:
    """The parts of a relative path, or UnsafePath. An empty text means the folder itself."""
    if len(text) > MAX_PATH_LENGTH:
        raise UnsafePath(f"the path is longer than {MAX_PATH_LENGTH} characters")
    if _CONTROL.search(text):
        raise UnsafePath("the path holds control characters")
    if "\\" in text:
        raise UnsafePath("use '/' between folders; backslashes are not allowed")
    if "%" in text:
        raise UnsafePath("percent-escapes are not allowed in paths")
    if "://" in text or text.lower().startswith("file:"):
        raise UnsafePath("give a path inside the folder, not a URL")
    if text.startswith("/") or _DRIVE.match(text):
        raise UnsafePath("give a path relative to the folder, not an absolute one")
    if not text:
        return ()
    parts = tuple(text.split("/"))
    for part in parts:
        if part in {"", ".", ".."}:
            raise UnsafePath("'.', '..' and empty parts are not allowed in paths")
    return parts
