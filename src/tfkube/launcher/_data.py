"""Fetch the replica's data from the tfkube server (TFKUBE_DATA_URL, the protocol in
`tfkube.contract`, "Data") into TFKUBE_DATA_DIR before the entrypoint starts: for a job
whose data folder the server cannot share with its pods (a cluster job with an uploaded
data set, or a data source the server staged into its content-keyed cache).

    GET <url>/<replica>  (first at the node cache's address when there is one: the same
                         answers; unreachable or 502, the server's address from then on)
                         503 while the server stages: wait (Retry-After), say how far
                         200: a tar, unpacked with the code's checks (`_fetch.unpack`)
                         404/410: a permanent failure, the server's reason

`answer_step` is the decision (pure); `fetch_data` the acting shell. Standard library only.
"""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tfkube import contract
from tfkube.launcher._fetch import FetchError, unpack
from tfkube.launcher._ship import detail_of

MAX_DATA_BYTES = 256 * 1024**3
"""The most a replica's data may be (downloaded, and unpacked)."""
REQUEST_TIMEOUT = 60.0
CACHE_CONNECT_TIMEOUT = 5.0
MIN_WAIT = 0.5
MAX_WAIT = 10.0
UNPACKING = ".tfkube-unpacking"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Wait:
    """Ask again after `seconds`; `text` is what to say (the server's progress)."""

    seconds: float
    text: str


@dataclass(frozen=True)
class Fail:
    message: str
    permanent: bool


def answer_step(status: int, detail: str, retry_after: str | None, attempt: int) -> Wait | Fail:
    """What an answer other than 200 means (pure): 503 the server stages (wait as it
    says, bounded), 404/410 and other 4xx never (its reason), 5xx or no answer (status
    0) a server that is not there yet: wait longer each time."""
    if status == 503:
        try:
            seconds = float(retry_after) if retry_after else MIN_WAIT * 2
        except ValueError:
            seconds = MIN_WAIT * 2
        return Wait(min(max(seconds, MIN_WAIT), MAX_WAIT), detail or "the server is staging")
    if status in (401, 403, 404, 410) or 400 <= status < 500:
        why = detail or f"the server answered {status}"
        return Fail(f"the server gives this replica no data: {why}", permanent=True)
    backoff = min(MIN_WAIT * 2 ** min(attempt, 10), MAX_WAIT)
    return Wait(backoff, detail or f"the server answered {status or 'nothing'}")


def _download(request: urllib.request.Request, dest: Path, max_bytes: int) -> int:
    written = 0
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT) as answer, dest.open("wb") as f:
        length = answer.headers.get("Content-Length")
        try:
            for chunk in iter(lambda: answer.read(_CHUNK), b""):
                written += len(chunk)
                if written > max_bytes:
                    raise FetchError(f"the data is larger than {max_bytes:,} bytes",
                                     permanent=True)  # fmt: skip
                f.write(chunk)
        except http.client.HTTPException as exc:  # a chunked answer cut short
            raise ConnectionError(f"the answer ended after {written:,} bytes: {exc!r}") from None
    if length is not None and length.isdigit() and written != int(length):
        # Cut short (the answer's sender went away): asked again, never unpacked.
        raise ConnectionError(f"the answer ended after {written:,} of {int(length):,} bytes")
    return written


def _answers(url: str, timeout: float = CACHE_CONNECT_TIMEOUT) -> bool:
    """Whether `url`'s host takes a connection now: a node-local Service with no cache on
    this node drops packets, and the fetch's own timeout is a minute."""
    parts = urllib.parse.urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname or "", port), timeout=timeout).close()
    except OSError:
        return False
    return True


def _clear(folder: Path) -> None:
    """Empty a data folder (a mount point: the folder itself stays)."""
    for child in folder.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def fetch_data(
    url: str,
    token: str,
    replica: str,
    data_dir: Path,
    work_dir: Path,
    wait_seconds: float = contract.DEFAULT_DATA_WAIT_SECONDS,
    say: Callable[[str], None] = lambda _m: None,
    max_bytes: int = MAX_DATA_BYTES,
    cache_url: str | None = None,
) -> int:
    """The replica's data into `data_dir` (emptied first), unless this pod fetched it
    already (`contract.DATA_READY_FILE` in `work_dir`). Returns the bytes downloaded (0
    when already there). Raises FetchError: permanent when the server refuses or the
    archive is unsafe, else (its staging or its answer took longer than `wait_seconds`)
    not. With `cache_url` (the node cache, `contract.DATA_CACHE_URL`) it asks there first,
    and the server itself from the first time the cache cannot be reached or answers 502
    (it cannot reach the server); the cache's other answers are the server's."""
    ready = work_dir / contract.DATA_READY_FILE
    if ready.is_file():
        return 0
    work_dir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    archive = work_dir / "data.tar.part"
    quoted = urllib.parse.quote(replica, safe="")
    deadline = time.monotonic() + wait_seconds
    said = ""
    attempt = 0
    via = cache_url if cache_url and _answers(cache_url) else None
    if cache_url and via is None:
        say("the node's data cache cannot be used: fetching from the server")
    step: Wait | Fail | None
    while True:
        request = urllib.request.Request(f"{(via or url).rstrip('/')}/{quoted}")
        request.add_header("Authorization", f"Bearer {token}")
        try:
            size = _download(request, archive, max_bytes)
            break
        except urllib.error.HTTPError as err:
            step = answer_step(err.code, detail_of(err.read(4096)), err.headers.get("Retry-After"),
                               attempt)  # fmt: skip
            err.close()
            if via and err.code == 502:
                step = None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            step = None if via else answer_step(0, f"cannot reach the server: {exc}", None, attempt)
        except FetchError:
            archive.unlink(missing_ok=True)
            raise
        archive.unlink(missing_ok=True)
        if step is None:  # the node cache is not there (or cannot reach the server)
            say("the node's data cache cannot be used: fetching from the server")
            via = None
            continue
        attempt += 1
        if isinstance(step, Fail):
            raise FetchError(step.message, permanent=step.permanent)
        if time.monotonic() + step.seconds > deadline:
            raise FetchError(f"no data after {wait_seconds:.0f}s: {step.text}", permanent=False)
        if step.text != said:
            say(f"waiting for the data: {step.text}")
            said = step.text
        time.sleep(step.seconds)
    _clear(data_dir)
    staging = data_dir / UNPACKING
    try:
        unpack(archive, staging, max_bytes=max_bytes)
    except FetchError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise FetchError(str(exc).replace("the code", "the data"), permanent=True) from None
    finally:
        archive.unlink(missing_ok=True)
    children = list(staging.iterdir())
    if any(child.name == UNPACKING for child in children):
        shutil.rmtree(staging, ignore_errors=True)
        raise FetchError(f"the data holds {UNPACKING!r}, a name tfkube keeps", permanent=True)
    for child in children:
        os.replace(child, data_dir / child.name)
    staging.rmdir()
    ready.write_text(f"{size}\n")
    return size
