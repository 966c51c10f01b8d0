"""Send what a tfkube server keeps of this replica to the server, as it is written.

Where the server cannot read the job's log folder (a cluster job without an outputs
claim: each pod's folder is its own and goes with it), the engine gives the launcher
TFKUBE_SHIP_URL and a job-scoped token. The launcher then sends, every SHIP_EVERY
seconds and once more when the replica ends:

- this start's output (the tee's `<attempt>.log`), appended at the server's length;
- the TensorBoard event files below the log folder (`contract.shipped_file`), the same way;
- `result.json`, whole, whenever it changed.

So a replica's log outlives its pod and its node (at most SHIP_EVERY seconds of it are
lost with a node that dies), its charts and its result reach the job page, and the server
holds no stream per pod. The protocol is in `tfkube.contract` ("Shipping"); the server
never trusts what arrives (`tfkube.server.outputs.shipped`). Standard library only: this
runs inside stock TensorFlow images.

Failures never stop the replica: a server that does not answer is tried again next round;
a file it refuses (too large, a name it does not take) is left alone, said once on stderr.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tfkube import contract

SHIP_EVERY = 2.0
"""Seconds between two rounds."""
FINAL_SECONDS = 10.0
"""The most time the last round takes when the replica ends."""
ROUND_BYTES = 8 * 1024 * 1024
"""The most bytes one file sends per round (others get their turn)."""
REQUEST_TIMEOUT = 10.0
MAX_SCAN = 5000
"""Entries of the log folder looked at per round for event files."""


def _say(message: str) -> None:
    print(f"[tfkube-launcher] {message}", file=sys.stderr, flush=True)


@dataclass
class _File:
    remote: str
    """The path below SHIP_URL (`log/worker-0/<start>`, `file/train/events...`)."""
    local: Path
    whole: bool = False
    sent: int = 0
    """The server's length of it (appended files)."""
    stamp: tuple[int, int] | None = None
    """(size, mtime_ns) last sent (whole files)."""
    refused: bool = False


class Refused(Exception):
    """The server will not take this file (say why once, then leave it)."""


class Gone(Exception):
    """The server takes nothing more for this job (ended long ago, deleted, a bad token)."""


def scan_shipped(log_dir: Path, limit: int = MAX_SCAN) -> Iterator[tuple[str, Path]]:
    """(relative path, path) of each shipped file below `log_dir` (the first `limit`
    entries looked at; hidden folders, `.tfkube` among them, never entered)."""
    seen = 0
    stack: list[tuple[Path, str, int]] = [(log_dir, "", 0)]
    while stack and seen < limit:
        folder, prefix, depth = stack.pop()
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    seen += 1
                    if seen > limit:
                        break
                    rel = f"{prefix}{entry.name}"
                    if entry.is_dir(follow_symlinks=False):
                        if depth + 1 < contract.SHIP_MAX_DEPTH and contract.SHIP_PART.fullmatch(
                            entry.name
                        ):
                            stack.append((Path(entry.path), rel + "/", depth + 1))
                    elif entry.is_file(follow_symlinks=False) and contract.shipped_file(rel):
                        yield rel, Path(entry.path)
        except OSError:
            continue


class Shipper:
    """One replica's shipping (one thread; `close` runs the last round)."""

    def __init__(
        self,
        url: str,
        token: str,
        log_dir: str,
        replica: str,
        own_log: Path | None,
        every: float = SHIP_EVERY,
    ) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.log_dir = Path(log_dir) if log_dir else None
        self.every = every
        self.start_id = secrets.token_hex(16)
        self.files: dict[str, _File] = {}
        if own_log is not None:
            remote = f"log/{replica}/{self.start_id}"
            self.files[remote] = _File(remote, own_log)
        self.gone = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="tfkube-ship", daemon=True)

    def start(self) -> Shipper:
        self._thread.start()
        return self

    def close(self, seconds: float = FINAL_SECONDS) -> None:
        """Stop the rounds, then one last round of at most `seconds`."""
        self._stop.set()
        self._thread.join(timeout=seconds)
        self.round(deadline=time.monotonic() + seconds)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.round(deadline=time.monotonic() + max(self.every * 5, REQUEST_TIMEOUT))

    # -- a round ---------------------------------------------------------------------------

    def _discover(self) -> None:
        if self.log_dir is None:
            return
        for rel, path in scan_shipped(self.log_dir):
            remote = f"file/{rel}"
            if remote not in self.files:
                self.files[remote] = _File(remote, path, whole=rel == contract.RESULT_FILE)

    def round(self, deadline: float) -> None:
        """Send what is new of every file (one thread at a time)."""
        with self._lock:
            if self.gone:
                return
            self._discover()
            for f in list(self.files.values()):
                if f.refused or time.monotonic() > deadline:
                    continue
                try:
                    self._send_whole(f) if f.whole else self._send_new(f, deadline)
                except Refused as exc:
                    f.refused = True
                    _say(f"the server keeps no more of {f.remote.split('/', 1)[1]}: {exc}")
                except Gone as exc:
                    self.gone = True
                    _say(f"the server takes nothing more from this replica: {exc}")
                    return
                except (OSError, ValueError):
                    return  # the server unreachable, or a bad answer: next round

    def _send_new(self, f: _File, deadline: float) -> None:
        try:
            size = f.local.stat().st_size
        except OSError:
            return
        budget = ROUND_BYTES
        while f.sent < size and budget > 0 and time.monotonic() < deadline:
            with f.local.open("rb") as fh:
                fh.seek(f.sent)
                data = fh.read(min(contract.SHIP_CHUNK_BYTES, size - f.sent, budget))
            if not data:
                return
            status, server_size = self._post(f.remote, data, {"offset": str(f.sent)})
            if status == 409 and server_size > size:
                raise Refused("the server holds more of it than this replica wrote")
            f.sent = server_size
            budget -= len(data)

    def _send_whole(self, f: _File) -> None:
        try:
            st = f.local.stat()
        except OSError:
            return
        stamp = (st.st_size, st.st_mtime_ns)
        if stamp == f.stamp:
            return
        if st.st_size > contract.RESULT_MAX_BYTES:
            raise Refused(f"it is larger than {contract.RESULT_MAX_BYTES:,} bytes")
        data = f.local.read_bytes()
        self._post(f.remote, data, {"whole": "1"})
        f.stamp = stamp

    def _post(self, remote: str, data: bytes, query: dict[str, str]) -> tuple[int, int]:
        """POST one chunk -> (status, the server's length); 409 is an answer too."""
        quoted = urllib.parse.quote(remote, safe="/")
        request = urllib.request.Request(
            f"{self.url}/{quoted}?{urllib.parse.urlencode(query)}",
            data=data,
            method="POST",
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": "application/octet-stream",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT) as answer:
                return answer.status, int(json.loads(answer.read(4096))["size"])
        except urllib.error.HTTPError as err:
            body = err.read(4096)
            err.close()
            if err.code == 409:
                return 409, int(json.loads(body)["size"])
            detail = detail_of(body) or err.reason
            if err.code in (401, 403, 404, 410):
                raise Gone(f"{err.code} {detail}") from None
            if 400 <= err.code < 500:
                raise Refused(f"{err.code} {detail}") from None
            raise OSError(f"{err.code} {detail}") from None
        except (KeyError, TypeError) as exc:
            raise ValueError(f"a bad answer: {exc}") from None


def detail_of(body: bytes) -> str:
    """The `detail` of a server's JSON error answer (at most 200 characters), or ""."""
    try:
        found = json.loads(body).get("detail")
    except (ValueError, AttributeError):
        return ""
    return str(found)[:200] if found else ""


def start_shipper(env: dict[str, str] | os._Environ[str], log_dir: str, replica: str,
                  own_log: Path | None) -> Shipper | None:  # fmt: skip
    """A started shipper when the engine asked for one (TFKUBE_SHIP_URL and its token)."""
    url, token = env.get(contract.SHIP_URL), env.get(contract.SHIP_TOKEN)
    if not url or not token:
        return None
    return Shipper(url, token, log_dir, replica, own_log).start()
