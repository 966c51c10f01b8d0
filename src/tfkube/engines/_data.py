"""Data sources: a job's `spec.storage.data.source` checked at submit and staged before any
replica starts (issue 19; the local engine so far).

    check (submit)   list the objects under the source: a missing bucket or prefix, refused
                     credentials or an unreachable store is a SpecError naming
                     `spec.storage.data.source` (exit 2, 4xx), before anything starts
    stage            fetch what the cache lacks, in parallel, into a content-keyed cache
                     (key = store + bucket + object key + ETag + size), then show every
                     object at the job's data folder as a hard link to its cached copy,
                     files and folders read-only: a later job with the same data fetches
                     0 bytes
    progress         `progress_text`: "staging data: 3.1 of 8.0 MiB, 2.1 MiB/s, 3 s left"

Pure decisions (`cache_key`, `relative_path`, `progress_text`, `parse_credentials`) apart
from the acting shell (boto3: docs/architecture.md, "Data sources", says why). Credentials
are held in memory, written only to a 0600 file of the job that its supervisor reads and
removes; they never reach a log, an event, the status or the stored spec, and an error
never quotes them.
"""

from __future__ import annotations

import configparser
import contextlib
import fcntl
import hashlib
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from tfkube.engines._webhdfs import HdfsError, WebHdfs
from tfkube.netguard import IPNetwork
from tfkube.spec import DataSource, HdfsSource, S3Source, ShardRule, shard_of

MiB = 1024 * 1024
GiB = 1024 * MiB
CHUNK = 1 * MiB
DEFAULT_WORKERS = 8
"""Objects fetched at once: enough to fill a link to a store, few enough for 2 cores."""
MAX_OBJECTS = 100_000
"""More objects than this under one source is refused at submit (say a narrower prefix)."""
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 60.0
CACHE_LIMIT_ENV = "TFKUBE_DATA_CACHE_LIMIT"
"""The bound on a team's data cache: bytes with a unit ("50GiB", "500MiB") or a share of
the cache's disk ("20%"); "off" for none."""
DEFAULT_CACHE_SHARE = 0.2
"""Without the setting: a team's cache keeps at most this share of its disk."""


class DataSourceError(Exception):
    """The store said no (or could not be reached): the message names the source and
    never quotes a credential."""


@dataclass(frozen=True)
class S3Credentials:
    access_key: str
    secret_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, str]:
        out = {"access_key": self.access_key, "secret_key": self.secret_key}
        if self.session_token:
            out["session_token"] = self.session_token
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> S3Credentials:
        return cls(
            access_key=str(data["access_key"]),
            secret_key=str(data["secret_key"]),
            session_token=str(data["session_token"]) if data.get("session_token") else None,
        )


@dataclass(frozen=True)
class HdfsCredentials:
    """HDFS simple authentication: the user WebHDFS requests name (`user.name`). Not a
    secret to HDFS, but who a job reads as: kept like one (never logged or shown)."""

    user: str = field(repr=False)

    def to_json(self) -> dict[str, str]:
        return {"hadoop_user_name": self.user}


Credentials = S3Credentials | HdfsCredentials


def credentials_from_json(data: Mapping[str, Any]) -> Credentials:
    if "hadoop_user_name" in data:
        return HdfsCredentials(str(data["hadoop_user_name"]))
    return S3Credentials.from_json(data)


def credentials_problem(source: DataSource, credentials: Credentials | None) -> str | None:
    """Why these credentials do not fit the source's store (pure), or None."""
    if isinstance(source, HdfsSource) and isinstance(credentials, S3Credentials):
        return "it holds S3 keys; an hdfs:// source needs an HDFS user (hadoop_user_name)"
    if isinstance(source, S3Source) and isinstance(credentials, HdfsCredentials):
        return "it holds an HDFS user; an s3:// source needs the store's access keys"
    return None


def hdfs_user_from_env(environ: Mapping[str, str]) -> HdfsCredentials | None:
    """HADOOP_USER_NAME (Hadoop's own variable for simple authentication), or None."""
    user = environ.get("HADOOP_USER_NAME")
    return HdfsCredentials(user) if user else None


def credentials_from_env(environ: Mapping[str, str]) -> S3Credentials | None:
    """AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN), or None."""
    key, secret = environ.get("AWS_ACCESS_KEY_ID"), environ.get("AWS_SECRET_ACCESS_KEY")
    if not key or not secret:
        return None
    return S3Credentials(key, secret, environ.get("AWS_SESSION_TOKEN") or None)


def parse_credentials(text: str, where: str) -> Credentials:
    """A credentials file's text (pure): AWS's own format (`[default]` or one section,
    `aws_access_key_id = ...`, `aws_secret_access_key = ...`, optional
    `aws_session_token`), or the same names as plain `NAME=VALUE` lines (upper or lower
    case, as in an env file); for HDFS `hadoop_user_name = ...` alone. ValueError names
    the file and what is missing, never a value."""
    parser = configparser.ConfigParser(interpolation=None)
    body = text if text.lstrip().startswith("[") else "[default]\n" + text
    try:
        parser.read_string(body)
    except configparser.Error:
        raise ValueError(
            f"{where} is not a credentials file; write aws_access_key_id = ... and "
            "aws_secret_access_key = ... (AWS's format, or NAME=VALUE lines)"
        ) from None
    sections = parser.sections()
    name = "default" if "default" in sections else (sections[0] if len(sections) == 1 else "")
    if not name:
        raise ValueError(f"{where} has several profiles and no [default]; keep one")
    values = {k.lower().removeprefix("export "): v.strip() for k, v in parser[name].items()}
    key, secret = values.get("aws_access_key_id"), values.get("aws_secret_access_key")
    if values.get("hadoop_user_name") and not key and not secret:
        return HdfsCredentials(values["hadoop_user_name"])
    if not key or not secret:
        raise ValueError(
            f"{where} needs both aws_access_key_id and aws_secret_access_key (or, for "
            "HDFS, hadoop_user_name)"
        )
    return S3Credentials(key, secret, values.get("aws_session_token") or None)


@dataclass(frozen=True)
class RemoteObject:
    key: str
    size: int
    etag: str
    mtime: float
    """The store's LastModified (seconds): the cached copy keeps it, so a copy written to
    since (a replica running as root ignores the read-only bits) is not reused."""

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "size": self.size, "etag": self.etag, "mtime": self.mtime}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RemoteObject:
        return cls(str(data["key"]), int(data["size"]), str(data["etag"]), float(data["mtime"]))


@dataclass(frozen=True)
class StoreRef:
    """Which store: what the cache key and the client need (no credentials)."""

    source: DataSource
    endpoint: str | None = None
    region: str | None = None

    def to_json(self) -> dict[str, Any]:
        if isinstance(self.source, HdfsSource):
            where = {"host": self.source.host, "port": self.source.port, "path": self.source.path}
            return {"kind": "hdfs", **where, "endpoint": self.endpoint}
        return {
            "bucket": self.source.bucket,
            "prefix": self.source.prefix,
            "endpoint": self.endpoint,
            "region": self.region,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StoreRef:
        if data.get("kind") == "hdfs":
            source = HdfsSource(str(data["host"]), int(data["port"]), str(data["path"]))
            return cls(source, data.get("endpoint") or None)
        return cls(
            S3Source(str(data["bucket"]), str(data["prefix"])),
            data.get("endpoint") or None,
            data.get("region") or None,
        )


# -- pure decisions -----------------------------------------------------------------------


def cache_key(store: StoreRef, obj: RemoteObject) -> str:
    """The cache's name for one object's content: the same store, bucket, key, ETag and size
    are the same bytes (an S3 ETag changes with every new content of a key). HDFS: the
    NameNode (its RPC address) and the WebHDFS address the bytes came from (as an S3
    endpoint is: a member's own gateway answering for a NameNode's name never fills the
    cache for the real one), the file's path, its length and modificationTime (in
    `etag`; docs/architecture.md says why no checksum)."""
    src = store.source
    if isinstance(src, HdfsSource):
        where = [f"hdfs://{src.host}:{src.port}", src.webhdfs_url(store.endpoint)]
        ident = "\0".join([*where, obj.key, obj.etag, str(obj.size)])
    else:
        ident = "\0".join([store.endpoint or "aws", src.bucket, obj.key, obj.etag, str(obj.size)])
    return hashlib.sha256(ident.encode()).hexdigest()


def object_path(store: StoreRef, key: str) -> PurePosixPath | None:
    """Where an object goes inside the data folder (pure): its key below the source. An
    HDFS source that is one file: the file's name."""
    src = store.source
    if isinstance(src, HdfsSource):
        if key == src.path:
            return PurePosixPath(PurePosixPath(key).name)
        return relative_path(src.path.rstrip("/") + "/", key)
    return relative_path(src.prefix, key)


def placements(
    objects: Sequence[RemoteObject],
    store: StoreRef,
    rule: ShardRule | None,
    replicas: Sequence[tuple[str, int]],
    workers: int,
) -> dict[str, list[RemoteObject]]:
    """Which objects each folder of the data folder shows (pure). Without a rule one
    folder, the data folder itself (""), with everything; with one, a folder per replica
    (its key, "worker-1") with its shard (`tfkube.spec.shard_of`, by the objects' names
    below the source)."""
    if rule is None:
        return {"": list(objects)}
    by_name = {str(object_path(store, o.key)): o for o in objects}
    return {
        f"{role}-{index}": [by_name[n] for n in shard_of(list(by_name), rule, role, index, workers)]
        for role, index in replicas
    }


def relative_path(prefix: str, key: str) -> PurePosixPath | None:
    """Where an object goes inside the data folder: its key below the prefix. None for a
    folder marker (a key ending in '/'); ValueError for a key that would leave the folder
    or is not a plain path."""
    rest = key[len(prefix) :]
    if not rest or rest.endswith("/"):
        return None
    parts = rest.split("/")
    if any(p in ("", ".", "..") for p in parts) or "\0" in rest:
        raise ValueError(f"object {key!r} is not a plain path below the prefix")
    return PurePosixPath(*parts)


def _amount(n: float, unit: int) -> str:
    return f"{n / unit:.1f}"


def progress_text(done: int, total: int, elapsed: float) -> str:
    """ "staging data: 3.1 of 8.0 MiB, 2.1 MiB/s, 3 s left" (GiB from 1 GiB on)."""
    unit, name = (GiB, "GiB") if total >= GiB else (MiB, "MiB")
    text = f"staging data: {_amount(done, unit)} of {_amount(total, unit)} {name}"
    if elapsed > 0 and done > 0:
        rate = done / elapsed
        text += f", {rate / MiB:.1f} MiB/s"
        if done < total:
            text += f", {max(0, round((total - done) / rate))} s left"
    return text


_UNITS = {"": 1, "b": 1, "kib": 1024, "mib": MiB, "gib": GiB, "tib": 1024 * GiB}


def cache_limit(setting: str | None, disk_bytes: int) -> int | None:
    """The data cache's bound in bytes (pure) from `TFKUBE_DATA_CACHE_LIMIT`: unset, the
    default share of the disk; "20%" a share; "50GiB", "500MiB", "1TiB" or plain bytes;
    "off" none. ValueError names the variable and the forms it takes."""
    text = (setting or "").strip().lower().replace(" ", "")
    if not text:
        return int(disk_bytes * DEFAULT_CACHE_SHARE)
    if text == "off":
        return None
    try:
        if text.endswith("%"):
            share = float(text[:-1])
            if not 0 < share <= 100:
                raise ValueError
            return int(disk_bytes * share / 100)
        number = text.rstrip("kmgtib")
        value = float(number) * _UNITS[text[len(number) :]]
        if value <= 0:
            raise ValueError
        return int(value)
    except (ValueError, KeyError):
        raise ValueError(
            f"{CACHE_LIMIT_ENV}={setting!r} is not a bound; give a share of the disk "
            '("20%"), a size ("50GiB", "500MiB") or "off"'
        ) from None


@dataclass(frozen=True)
class CacheEntry:
    name: str
    size: int
    last_used: float
    """When a staging last showed it (its atime, set by `stage`)."""
    in_use: bool
    """Shown in a job's data folder now (a hard link: the job is running, or finished
    and not deleted yet): removing the cache's name would free nothing."""


EVICT_GRACE = 600.0
"""An object used this recently is kept whatever the bound: a staging running now found it
cached and is about to show it."""


def evictions(
    entries: Sequence[CacheEntry], limit: int, now: float, grace: float = EVICT_GRACE
) -> list[str]:
    """Which cached objects to remove so the cache holds at most `limit` bytes (pure):
    the least recently used first, never one in use or used within `grace` seconds of
    `now`; fewer than needed when the rest are kept."""
    total = sum(e.size for e in entries)
    out: list[str] = []
    for entry in sorted(entries, key=lambda e: (e.last_used, e.name)):
        if total <= limit:
            break
        if entry.in_use or entry.last_used > now - grace:
            continue
        out.append(entry.name)
        total -= entry.size
    return out


def evict(cache: Path, limit: int) -> tuple[int, int]:
    """Bring a team's cache under `limit` (`evictions`), one evictor at a time (a lock
    file): (files removed, bytes freed). A partial copy (`*.part`) counts as used when
    last written: one a staging is writing now is recent (and locked: never removed),
    one a staging cut short left waits for the next to resume it, and goes like any
    other object once it is the least recently used."""
    objects_dir = cache / "objects"
    if not objects_dir.is_dir():
        return 0, 0
    with (cache / ".evict.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        entries: dict[str, tuple[Path, CacheEntry]] = {}
        for path in objects_dir.glob("*/*"):
            try:
                st = path.lstat()
            except FileNotFoundError:
                continue
            part = path.name.endswith(".part")
            used = st.st_mtime if part else st.st_atime
            entry = CacheEntry(path.name, st.st_size, used, not part and st.st_nlink > 1)
            entries[path.name] = (path, entry)
        freed = removed = 0
        for name in evictions([e for _p, e in entries.values()], limit, time.time()):
            path, entry = entries[name]
            if _remove(path, locked=name.endswith(".part")):
                freed += entry.size
                removed += 1
        return removed, freed


def _remove(path: Path, locked: bool) -> bool:
    """Remove a cached file; a partial copy only under its lock (a staging resuming it
    now holds it: kept)."""
    try:
        if not locked:
            path.unlink()
            return True
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        path.unlink(missing_ok=True)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


# -- the store (boto3) ----------------------------------------------------------------------


def open_store(
    store: StoreRef,
    credentials: Credentials | None,
    allowed: tuple[IPNetwork, ...] | None = None,
) -> Any:
    """A client for the store: WebHDFS for HDFS (with the user, when given), else a boto3
    S3 client. Without credentials boto3's own chain applies (its environment, ~/.aws). Few
    retries and short connect timeouts: an unreachable store is reported in seconds, not
    retried forever. `allowed`: a server's team job, whose NameNode and DataNodes are
    judged by the server's fetch policy (`_webhdfs.judge`)."""
    if isinstance(store.source, HdfsSource):
        user = credentials.user if isinstance(credentials, HdfsCredentials) else None
        return WebHdfs(store.source.webhdfs_url(store.endpoint), user, allowed)
    if isinstance(credentials, HdfsCredentials):
        credentials = None
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise DataSourceError(
            "reading data sources needs boto3: pip install 'tfkube[s3]'"
        ) from None
    kwargs: dict[str, Any] = {}
    if credentials is not None:
        kwargs = {
            "aws_access_key_id": credentials.access_key,
            "aws_secret_access_key": credentials.secret_key,
            "aws_session_token": credentials.session_token,
        }
    session = boto3.session.Session(**kwargs)
    return session.client(
        "s3",
        endpoint_url=store.endpoint,
        region_name=store.region or "us-east-1",
        config=Config(
            connect_timeout=CONNECT_TIMEOUT,
            read_timeout=READ_TIMEOUT,
            retries={"max_attempts": 2, "mode": "standard"},
            max_pool_connections=DEFAULT_WORKERS * 2,
            s3={"addressing_style": "path"},
        ),
    )


LOCAL_CREDENTIALS = "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or the --data-credentials file"
"""Where `tfkube run`'s credentials come from (what a refusal tells to check)."""


def _why(exc: Exception, store: StoreRef, credentials_from: str = LOCAL_CREDENTIALS) -> str:
    """What the store said, for a person (no credentials in it)."""
    if isinstance(exc, HdfsError):
        return str(exc)
    if isinstance(store.source, HdfsSource):  # a read cut short, a timeout: no boto3 here
        where = store.source.webhdfs_url(store.endpoint).removesuffix("/webhdfs/v1")
        return f"reading WebHDFS at {where} failed: {type(exc).__name__}"
    from botocore.exceptions import (
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
    )
    from botocore.exceptions import (
        ConnectionError as BotoConnectionError,
    )

    where = store.endpoint or "AWS S3"
    if isinstance(exc, NoCredentialsError):
        return (
            "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or pass "
            "--data-credentials FILE"
        )
    if isinstance(exc, EndpointConnectionError | BotoConnectionError):
        return f"the store at {where} cannot be reached; check spec.storage.data.endpoint"
    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in ("NoSuchBucket", "404", "NotFound"):
            return f"bucket {getattr(store.source, 'bucket', '')!r} does not exist at {where}"
        if code in (
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "AccessDenied",
            "403",
            "InvalidToken",
            "ExpiredToken",
        ):
            return (
                f"the store at {where} refused the credentials ({code}); check {credentials_from}"
            )
        return f"the store at {where} answered {code or 'an error'}"
    return f"reading the store at {where} failed: {type(exc).__name__}"


def check_source(
    store: StoreRef,
    credentials: Credentials,
    credentials_from: str,
    allowed: tuple[IPNetwork, ...] | None = None,
) -> list[RemoteObject]:
    """Whether a source can be staged, asked of the store now (a server's submit): its
    listing, or DataSourceError naming the source and, on refused credentials,
    `credentials_from` (where they came from)."""
    return list_objects(open_store(store, credentials, allowed), store, credentials_from)


def list_objects(
    client: Any, store: StoreRef, credentials_from: str = LOCAL_CREDENTIALS
) -> list[RemoteObject]:
    """Every object under the source (folder markers left out). DataSourceError when the
    store refuses, cannot be reached, or holds nothing there."""
    src = store.source
    if isinstance(src, HdfsSource):
        return _list_hdfs(client, store)
    out: list[RemoteObject] = []
    try:
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=src.bucket, Prefix=src.prefix
        )
        for page in pages:
            for item in page.get("Contents", []):
                key = str(item["Key"])
                if relative_path(src.prefix, key) is None:
                    continue
                out.append(
                    RemoteObject(
                        key=key,
                        size=int(item["Size"]),
                        etag=str(item.get("ETag", "")).strip('"'),
                        mtime=float(item["LastModified"].timestamp()),
                    )
                )
                if len(out) > MAX_OBJECTS:
                    raise DataSourceError(
                        f"{src} holds more than {MAX_OBJECTS:,} objects; give a narrower prefix"
                    )
    except DataSourceError:
        raise
    except ValueError as exc:
        raise DataSourceError(f"{src}: {exc}") from None
    except Exception as exc:
        raise DataSourceError(f"{src}: {_why(exc, store, credentials_from)}") from None
    if not out:
        raise DataSourceError(
            f"{src}: nothing there (no object under the prefix "
            f"{src.prefix or '(whole bucket)'!r}); check the bucket and prefix"
        )
    return out


def _list_hdfs(client: WebHdfs, store: StoreRef) -> list[RemoteObject]:
    """Every file at or below an HDFS source's path: its key is the file's path, `etag`
    its modificationTime (ms), with its length the cache key's content."""
    src = store.source
    try:
        files = client.walk(src.path, MAX_OBJECTS) if isinstance(src, HdfsSource) else []
        out = [
            RemoteObject(
                key=f.path,
                size=f.length,
                etag=f"mtime:{f.modification_time}",
                mtime=f.modification_time / 1000,
            )
            for f in files
        ]
        for obj in out:
            object_path(store, obj.key)  # a name that would leave the folder: refused
    except HdfsError as exc:
        raise DataSourceError(f"{src}: {exc}") from None
    except ValueError as exc:
        raise DataSourceError(f"{src}: {exc}") from None
    if not out:
        raise DataSourceError(f"{src}: nothing there (an empty folder); check the path")
    return out


def _open_object(
    client: Any, store: StoreRef, obj: RemoteObject, start: int = 0
) -> tuple[Any, str]:
    """An object's body (`.read(n)`) from byte `start` on, and the ETag the store gives now
    ("" when none). From a later byte: S3 a ranged GET that only this ETag's content
    answers (`If-Match`: a changed object is a 412, not other bytes spliced on), WebHDFS
    an OPEN at that offset (the cache key holds the file's modificationTime)."""
    if isinstance(store.source, HdfsSource):
        return client.open(obj.key, start), ""
    extra: dict[str, str] = {}
    if start:
        extra["Range"] = f"bytes={start}-"
        if obj.etag:
            extra["IfMatch"] = f'"{obj.etag}"'
    answer = client.get_object(Bucket=store.source.bucket, Key=obj.key, **extra)
    return answer["Body"], str(answer.get("ETag", "")).strip('"')


def _name(store: StoreRef, obj: RemoteObject) -> str:
    src = store.source
    if isinstance(src, HdfsSource):
        return f"hdfs://{src.host}:{src.port}{obj.key}"
    return f"s3://{src.bucket}/{obj.key}"


@dataclass
class ReplicaShare:
    """What one folder (a replica's, when sharded) of the data folder shows."""

    files: int = 0
    bytes: int = 0
    fetched_bytes: int = 0
    """Of its files' bytes, those this staging read from the store (not the cache)."""


@dataclass
class StageResult:
    objects: int = 0
    total_bytes: int = 0
    fetched_objects: int = 0
    fetched_bytes: int = 0
    """Bytes read from the store (0 when every object was in the cache)."""
    shares: dict[str, ReplicaShare] = field(default_factory=dict)
    """By folder ("" unsharded, else the replica's key)."""


@dataclass
class _Counter:
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: int = 0
    fetched: int = 0
    fetched_objects: int = 0

    def add(self, n: int, fetched: bool) -> None:
        with self.lock:
            self.done += n
            if fetched:
                self.fetched += n


class Cancelled(Exception):
    """Staging stopped on request."""


def resume_from(part_size: int, size: int) -> int:
    """Where a fetch picks up (pure): a partial copy left by a staging cut short (the
    supervisor died or was stopped, the store failed) holds the object's first bytes, so
    the fetch goes on after them; a partial copy as long as the object or longer is not
    trusted (it was never checked) and the fetch starts at byte 0."""
    return part_size if 0 < part_size < size else 0


def _part(dest: Path) -> tuple[int, Path, bool]:
    """The file a fetch writes, open and locked: `<key>.part` beside the cached copy (its
    name is the content's, so what a staging cut short left there is this object's first
    bytes), or a name of this thread's when another stager holds that one (two jobs of a
    team staging the same data at once: this one does not resume). (fd, path,
    resumable)."""
    part = dest.with_name(dest.name + ".part")
    fd = os.open(part, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd, part, True
    except BlockingIOError:
        os.close(fd)
    own = dest.with_name(f".{dest.name}.{os.getpid()}.{threading.get_ident()}.part")
    return os.open(own, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600), own, False


def _cached(path: Path, obj: RemoteObject) -> bool:
    try:
        st = path.stat()
    except OSError:
        return False
    return st.st_size == obj.size and int(st.st_mtime) == int(obj.mtime)


def _fetch(
    client: Any,
    store: StoreRef,
    obj: RemoteObject,
    dest: Path,
    counter: _Counter,
    cancelled: Callable[[], bool],
) -> None:
    """One object into the cache: written to `<key>.part` (resumed from where a staging
    cut short left it: `resume_from`), checked (size, ETag), renamed into place read-only
    with the store's mtime. A fetch that fails or is cancelled leaves its part for the
    next staging; one whose object changed removes it."""
    fd, part, resumable = _part(dest)
    keep = resumable
    try:
        start = resume_from(os.fstat(fd).st_size, obj.size) if resumable else 0
        os.ftruncate(fd, start)
        os.lseek(fd, start, os.SEEK_SET)
        counter.add(start, fetched=False)
        got = start
        try:
            body, etag = _open_object(client, store, obj, start)
            with contextlib.closing(body), os.fdopen(os.dup(fd), "wb") as f:
                while chunk := body.read(CHUNK):
                    if cancelled():
                        raise Cancelled
                    f.write(chunk)
                    got += len(chunk)
                    counter.add(len(chunk), fetched=True)
        except (Cancelled, DataSourceError):
            raise
        except Exception as exc:
            if _precondition_failed(exc):
                keep = False
                raise DataSourceError(
                    f"{_name(store, obj)} changed while staging; submit the job again"
                ) from None
            raise DataSourceError(f"{_name(store, obj)}: {_why(exc, store)}") from None
        if got != obj.size or (obj.etag and etag and etag != obj.etag):
            keep = False
            raise DataSourceError(
                f"{_name(store, obj)} changed while staging "
                f"({got} bytes, {obj.size} listed); submit the job again"
            )
        part.chmod(0o444)
        os.utime(part, (time.time(), obj.mtime))  # used now; the store's mtime
        part.replace(dest)
        keep = True  # renamed: nothing left to remove
        with counter.lock:
            counter.fetched_objects += 1
    finally:
        os.close(fd)
        if not keep:
            part.unlink(missing_ok=True)


def _precondition_failed(exc: Exception) -> bool:
    """An S3 ranged GET's If-Match refused: the object is not the one listed any more."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return False
    return str(response.get("Error", {}).get("Code", "")) in ("PreconditionFailed", "412")


def _show(cached: Path, target: Path) -> None:
    """The cached copy at `target`: a hard link (no copy, no space), else a copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        target.unlink()
    try:
        os.link(cached, target)
    except OSError:  # another file system, or links not allowed: a read-only copy
        import shutil

        shutil.copyfile(cached, target)
        target.chmod(0o444)


def _folders(folder: Path) -> list[Path]:
    """The folder and every real folder below it (never a link: chmod would follow it)."""
    out = [folder]
    for root, dirs, _files in os.walk(folder):
        out += [p for d in dirs if not (p := Path(root, d)).is_symlink()]
    return out


def read_only_tree(folder: Path) -> None:
    """Folders 0555 (files are 0444 already): nothing added, removed or renamed in it."""
    for path in reversed(_folders(folder)):
        path.chmod(0o555)


def writable_tree(folder: Path) -> None:
    """Undo `read_only_tree` for the folders (so the job's folder can be deleted)."""
    if folder.is_symlink() or not folder.is_dir():
        return
    with contextlib.suppress(OSError):
        folder.chmod(0o755)
    for path in _folders(folder):
        with contextlib.suppress(OSError):
            path.chmod(0o755)


def stage(
    client: Any,
    store: StoreRef,
    objects: Sequence[RemoteObject],
    cache: Path,
    dest: Path,
    *,
    on_progress: Callable[[int, int, StageResult], None] = lambda _d, _t, _r: None,
    cancelled: Callable[[], bool] = lambda: False,
    workers: int = DEFAULT_WORKERS,
    progress_every: float = 0.5,
    layout: Mapping[str, Sequence[RemoteObject]] | None = None,
    limit: int | None = None,
) -> StageResult:
    """Every object into `cache/objects` (what is there already is reused), then shown at
    `dest` read-only: all of them, or with a `layout` (`placements`) each folder's below
    `dest` (`objects` then is what any folder shows, each fetched once).
    `on_progress(done, total, result)` is called from this thread at most every
    `progress_every` seconds and once at the end. Every object shown is marked used now
    (its atime); then, with a `limit`, the cache is brought under it (`evict`: what this
    staging shows is in use, never evicted). Raises DataSourceError (the store failed: its
    reason) or Cancelled."""
    layout = {"": list(objects)} if layout is None else layout
    objects_dir = cache / "objects"
    objects_dir.mkdir(parents=True, exist_ok=True)
    result = StageResult(objects=len(objects), total_bytes=sum(o.size for o in objects))
    counter = _Counter()
    placed: list[tuple[RemoteObject, Path]] = []
    missing: list[tuple[RemoteObject, Path]] = []
    for obj in objects:
        path = objects_dir / cache_key(store, obj)[:2] / cache_key(store, obj)
        placed.append((obj, path))
        if _cached(path, obj):
            counter.add(obj.size, fetched=False)
            with contextlib.suppress(OSError):  # used now: no evictor takes it meanwhile
                os.utime(path, (time.time(), obj.mtime))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            missing.append((obj, path))
    failed = threading.Event()

    def stop() -> bool:
        return failed.is_set() or cancelled()

    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="stage") as pool:
        futures = [pool.submit(_fetch, client, store, o, p, counter, stop) for o, p in missing]
        pending = set(futures)
        while pending:
            _done, pending = wait(pending, timeout=progress_every, return_when=FIRST_EXCEPTION)
            if any(f.done() and f.exception() is not None for f in futures) or cancelled():
                failed.set()
            result.fetched_bytes = counter.fetched
            on_progress(counter.done, result.total_bytes, result)
        errors = [f.exception() for f in futures if f.exception() is not None]
    if cancelled():
        raise Cancelled
    for exc in errors:
        if isinstance(exc, DataSourceError):
            raise exc
    if errors:
        raise errors[0]  # type: ignore[misc]
    cached_at = dict(placed)
    fetched_keys = {o.key for o, _p in missing}
    for folder, shown in layout.items():
        share = result.shares[folder] = ReplicaShare()
        (dest / folder).mkdir(parents=True, exist_ok=True)
        for obj in shown:
            rel = object_path(store, obj.key)
            assert rel is not None  # folder markers were left out when listing
            _show(cached_at[obj], dest.joinpath(folder, *rel.parts))
            share.files += 1
            share.bytes += obj.size
            share.fetched_bytes += obj.size if obj.key in fetched_keys else 0
    read_only_tree(dest)
    now = time.time()
    for obj, path in placed:
        with contextlib.suppress(OSError):
            os.utime(path, (now, obj.mtime))  # used now; its mtime stays the store's
    if limit is not None:
        evict(cache, limit)
    result.fetched_bytes = counter.fetched
    result.fetched_objects = counter.fetched_objects
    on_progress(counter.done, result.total_bytes, result)
    return result
