"""Data a server stages for replicas that cannot see its folders (a cluster's pods): the
job's data source fetched by the server, with the team's secret, into the team's
content-keyed cache (`tfkube.engines._data.stage`: a later job with the same data reads 0
bytes from the store), shown in the job's served folder (`JobStorage.served_data`), one
folder per replica when the job has a shard rule; the replicas then fetch their folder
through the server's data door as a tar (`tar_stream`; the protocol in
`tfkube.contract`, "Data"). The store's credentials stay in the server: no pod ever
holds them.

    <served>          the job's view: hard links into the cache ("" or <replica>/...)
    <served>.json     its state: staging (progress text) | ready (what was read) | failed

`share_of` and `tar_stream` are pure (the stream reads the files it names); `Stager` is
the acting shell: a thread per job, so neither a member's request nor the sync loop
waits for a store.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tarfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfkube.engines._data import (
    CACHE_LIMIT_ENV,
    Cancelled,
    Credentials,
    DataSourceError,
    StoreRef,
    cache_limit,
    list_objects,
    open_store,
    placements,
    progress_text,
    stage,
    writable_tree,
)
from tfkube.netguard import IPNetwork
from tfkube.spec import ShardRule

log = logging.getLogger(__name__)

STAGING, READY, FAILED = "staging", "ready", "failed"
_BLOCK = tarfile.BLOCKSIZE
_CHUNK = 1 << 20


def state_path(served: Path) -> Path:
    return served.with_name(served.name + ".json")


def read_state(served: Path) -> dict[str, Any] | None:
    """The staging's state as last written, or None (never started here)."""
    try:
        found = json.loads(state_path(served).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _write_state(served: Path, state: dict[str, Any]) -> None:
    path = state_path(served)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(json.dumps(state))
    tmp.replace(path)


def served_cache_limit(cache: Path, setting: str | None = None) -> int | None:
    """The bound on a team's cache on the server (`TFKUBE_DATA_CACHE_LIMIT` of the
    server's environment, as the local engine reads it: a share of the cache's disk by
    default). ValueError names the variable."""
    cache.mkdir(parents=True, exist_ok=True)
    text = os.environ.get(CACHE_LIMIT_ENV) if setting is None else setting
    return cache_limit(text, shutil.disk_usage(cache).total)


def share_of(replica: str, sharded: bool) -> str:
    """The folder of the served view a replica fetches (pure): its own with a shard rule,
    else the whole view ("")."""
    return replica if sharded else ""


def _tar_header(name: str, size: int, is_dir: bool) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = 0 if is_dir else size
    info.type = tarfile.DIRTYPE if is_dir else tarfile.REGTYPE
    info.mode = 0o755 if is_dir else 0o644
    info.mtime = 0
    return info.tobuf(format=tarfile.PAX_FORMAT)


def tar_stream(folder: Path) -> Iterator[bytes]:
    """An uncompressed tar of `folder`'s files and folders (names relative to it, sorted),
    produced as it is read: nothing is packed on disk first, however large the data.
    Links in the folder are followed only as the files staging made them (hard links);
    anything else (a symlink, a device) is left out."""
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        base = Path(root)
        rel_root = base.relative_to(folder)
        for d in dirs:
            if not (base / d).is_symlink():
                yield _tar_header(str(rel_root / d), 0, True)
        for name in sorted(files):
            path = base / name
            st = path.lstat()
            if not os.path.isfile(path) or path.is_symlink():
                continue
            yield _tar_header(str(rel_root / name), st.st_size, False)
            sent = 0
            with path.open("rb") as f:
                while sent < st.st_size and (chunk := f.read(min(_CHUNK, st.st_size - sent))):
                    sent += len(chunk)
                    yield chunk
            if sent < st.st_size:  # cannot happen for a cached copy (read-only): be safe
                yield b"\0" * (st.st_size - sent)
            if st.st_size % _BLOCK:
                yield b"\0" * (_BLOCK - st.st_size % _BLOCK)
    yield b"\0" * (2 * _BLOCK)


def tar_digest(folder: Path) -> tuple[str, int]:
    """The sha256 and the length of `tar_stream(folder)` (read once, nothing kept)."""
    digest = hashlib.sha256()
    size = 0
    for chunk in tar_stream(folder):
        digest.update(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def digests_path(served: Path) -> Path:
    return served.with_name(served.name + ".digests.json")


_digest_locks: dict[Path, threading.Lock] = {}
_digest_locks_guard = threading.Lock()


def served_digest(served: Path, share: str) -> tuple[str, int]:
    """`tar_digest` of a ready view's `share` (`share_of`), computed once per job and
    share (kept in `<served>.digests.json`, removed with the view): what a node cache
    keys the tar by and checks it against. A view never changes once ready."""
    with _digest_locks_guard:
        lock = _digest_locks.setdefault(served, threading.Lock())
    with lock:
        path = digests_path(served)
        try:
            known = json.loads(path.read_text())
        except (OSError, ValueError):
            known = {}
        if not isinstance(known, dict):
            known = {}
        found = known.get(share)
        if isinstance(found, list) and len(found) == 2:
            return str(found[0]), int(found[1])
        sha256, size = tar_digest(served / share)
        known[share] = [sha256, size]
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        tmp.write_text(json.dumps(known))
        tmp.replace(path)
        return sha256, size


@dataclass(frozen=True)
class StageRequest:
    """Everything one staging needs (the credentials only in memory, for its thread)."""

    served: Path
    cache: Path
    store: StoreRef
    credentials: Credentials | None
    allowed: tuple[IPNetwork, ...] | None
    shard: ShardRule | None
    replicas: Sequence[tuple[str, int]]
    workers: int
    limit: int | None = None
    meta: Mapping[str, str] = field(default_factory=dict)
    """The caller's own (the server's job id), for `on_done`."""


Done = Callable[[StageRequest, dict[str, Any]], None]


class Stager:
    """Runs stagings, one thread per served folder; `start` again while one runs (or after
    it finished) does nothing, so a server restarted mid-staging (the state says staging,
    no thread here runs it) starts it again and the cache resumes what was fetched."""

    def __init__(self, on_done: Done = lambda _r, _s: None) -> None:
        self.on_done = on_done
        self._lock = threading.Lock()
        self._running: dict[Path, threading.Thread] = {}
        self._cancel: dict[Path, threading.Event] = {}
        self._stop = threading.Event()

    def running(self, served: Path) -> bool:
        with self._lock:
            thread = self._running.get(served)
            return thread is not None and thread.is_alive()

    def start(self, request: StageRequest) -> bool:
        """Stage unless it is staged, failed, or staging in this process. True when a
        staging started now."""
        with self._lock:
            thread = self._running.get(request.served)
            if thread is not None and thread.is_alive():
                return False
            state = read_state(request.served)
            if state is not None and state.get("phase") in (READY, FAILED):
                return False
            request.served.parent.mkdir(parents=True, exist_ok=True)
            _write_state(request.served, {"phase": STAGING, "text": "staging data: listing"})
            cancel = threading.Event()
            thread = threading.Thread(
                target=self._run, args=(request, cancel), name="stage-data", daemon=True
            )
            self._running[request.served] = thread
            self._cancel[request.served] = cancel
            thread.start()
            return True

    def cancel(self, served: Path, timeout: float = 10.0) -> bool:
        """Stop the staging of `served` (its job is stopped or deleted) and wait up to
        `timeout` s for its thread: it writes nothing more (no state, no `on_done`), and
        what it fetched stays in the cache for a later staging of the same data. True when
        a staging was running."""
        with self._lock:
            thread = self._running.get(served)
            cancel = self._cancel.get(served)
        if thread is None or cancel is None or not thread.is_alive():
            return False
        cancel.set()
        thread.join(timeout)
        if thread.is_alive():
            log.warning("staging %s did not stop within %.0fs", served, timeout)
        return True

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._lock:
            threads = list(self._running.values())
        for thread in threads:
            thread.join(timeout)

    def _run(self, request: StageRequest, cancel: threading.Event) -> None:
        try:
            self._stage(request, cancel)
        finally:
            with self._lock:
                self._running.pop(request.served, None)
                self._cancel.pop(request.served, None)

    def _stage(self, request: StageRequest, cancel: threading.Event) -> None:
        served = request.served

        def cancelled() -> bool:
            return self._stop.is_set() or cancel.is_set()

        started = time.monotonic()
        state: dict[str, Any]
        try:
            client = open_store(request.store, request.credentials, request.allowed)
            objects = list_objects(client, request.store, "the team's secret")
            layout = placements(
                objects, request.store, request.shard, request.replicas, request.workers
            )
            needed = {o.key for shown in layout.values() for o in shown}
            objects = [o for o in objects if o.key in needed]
            remove(served)  # a staging cut short: show again from the cache

            def progress(done: int, total: int, _result: Any) -> None:
                if cancelled():  # its job is gone: nothing more is written for it
                    return
                text = progress_text(done, total, time.monotonic() - started)
                _write_state(served, {"phase": STAGING, "text": text})

            result = stage(
                client,
                request.store,
                objects,
                request.cache,
                served,
                on_progress=progress,
                cancelled=cancelled,
                layout=layout,
                limit=request.limit,
            )
        except Cancelled:
            return  # the server stops (the next one starts it again) or the job ended
        except (DataSourceError, OSError) as exc:
            state = {"phase": FAILED, "text": f"staging {request.store.source}: {exc}"}
        except Exception as exc:  # a bug must not leave replicas waiting for ever
            log.exception("staging %s failed", served)
            state = {"phase": FAILED, "text": f"staging failed: {type(exc).__name__}"}
        else:
            state = {
                "phase": READY,
                "text": (
                    f"data staged from {request.store.source} in "
                    f"{time.monotonic() - started:.1f}s: {result.fetched_objects} of "
                    f"{result.objects} objects fetched ({result.fetched_bytes / 2**20:.1f} "
                    "MiB read from the store), the rest from the cache"
                ),
                "objects": result.objects,
                "total_bytes": result.total_bytes,
                "fetched_bytes": result.fetched_bytes,
                "shares": {
                    k: {"files": v.files, "bytes": v.bytes, "fetched_bytes": v.fetched_bytes}
                    for k, v in result.shares.items()
                },
            }
        _write_state(served, state)
        try:
            self.on_done(request, state)
        except Exception:
            log.exception("after staging %s", served)


def remove(served: Path) -> None:
    """A job's served view (its links; the cache keeps the bytes), not its state."""
    if served.is_dir():
        writable_tree(served)
        shutil.rmtree(served, ignore_errors=True)


def forget_served(served: Path) -> None:
    """The view and its state: the job is deleted."""
    remove(served)
    for path in (state_path(served), digests_path(served)):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
