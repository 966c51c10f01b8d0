"""What clients may send, and the one header the server builds from their names (pure).

- Request bodies are bounded while they stream (`body_limit`, applied by
  `api/middleware.py`): a declared `Content-Length` over the bound is refused before a
  byte is read, a chunked body when it passes the bound. Artifact uploads bound
  themselves (the limit depends on the artifact's kind, `server/artifacts.py`).
- Names and paths that reach the file system, the database or a header must hold no
  control character (`control_problem`): a NUL cannot be a file name or a PostgreSQL
  text value, a newline in a header ends it.
- Download names are sent as RFC 6266 `Content-Disposition`, with an ASCII fallback and
  the exact name percent-encoded in UTF-8 (RFC 5987), whatever a job named its files.
"""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import quote

from tfkube.contract import SHIP_CHUNK_BYTES

MAX_BODY_BYTES = 4 * 2**20
"""Any request body but an upload or the proxy's: JSON, at most a job manifest (1 MiB of
YAML, escaped) and its description."""
MAX_PROXY_BODY_BYTES = 64 * 2**20
"""A request through `/proxy/` (notebooks, model servers, TensorBoard) is read whole
before it is passed on: a prediction's inputs, a notebook's file (JupyterLab sends files
over 15 MB in 1 MB pieces)."""

_UPLOAD = re.compile(r"^/api/v1/teams/[^/]+/artifacts/?$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def body_limit(method: str, path: str) -> int | None:
    """The most bytes a request's body may hold; None for the artifact upload, which
    bounds itself by the artifact's kind."""
    if method.upper() == "POST" and _UPLOAD.fullmatch(path):
        return None
    if path.startswith("/proxy/"):
        return MAX_PROXY_BODY_BYTES
    if path.startswith("/api/v1/ship/"):
        return SHIP_CHUNK_BYTES
    return MAX_BODY_BYTES


def declared_too_large(content_length: str | None, limit: int) -> bool:
    """Whether a request's `Content-Length` alone refuses it (over the bound, or not a
    number: a body whose size cannot be read is not read)."""
    if content_length is None:
        return False
    text = content_length.strip()
    return not text.isdigit() or int(text) > limit


def control_problem(value: str, allowed: str = "") -> str | None:
    """Why a name, path or text is refused (a control character: NUL, newline, ESC, ...;
    but those in `allowed`), or None."""
    found = next((c for c in _CONTROL.findall(value) if c not in allowed), None)
    if found is None:
        return None
    named = {"\x00": "a NUL", "\n": "a newline", "\r": "a carriage return", "\t": "a tab"}
    what = named.get(found, f"the control character U+{ord(found):04X}")
    return f"holds {what}; control characters are not allowed here"


def _ascii_fallback(filename: str) -> str:
    """The name for clients that ignore `filename*`: accents dropped, anything else that
    is not plain printable ASCII (and `"`, `\\`, `/`, `;`, `%`) as `_`."""
    plain = unicodedata.normalize("NFKD", filename).encode("ascii", "ignore").decode()
    safe = "".join(c if 0x20 <= ord(c) < 0x7F and c not in '"\\/;%' else "_" for c in plain)
    return safe.strip(" .") or "download"


def content_disposition(filename: str, disposition: str = "attachment") -> str:
    """`attachment; filename="<ascii>"; filename*=UTF-8''<percent-encoded>` (RFC 6266,
    RFC 5987): no character of `filename` can end the header or change its meaning."""
    fallback = _ascii_fallback(filename)
    encoded = quote(filename, safe="!#$&+-.^_`|~")
    if encoded == fallback:
        return f'{disposition}; filename="{fallback}"'
    return f"{disposition}; filename=\"{fallback}\"; filename*=UTF-8''{encoded}"
