"""The artifact store in an S3-compatible store (`tfkube server --store s3://...`).

The same interface as `artifacts.BlobStore`: an upload is still received and checked in
`<data-dir>/s3-cache/blobs/.incoming/` (streamed to disk, bounded memory), then `keep`
hashes it and uploads the file to `<prefix>blobs/<sha[:2]>/<sha>` (boto3's managed
transfer: multipart, read from the file in 8 MiB parts, never whole in memory) and
removes the local file. `stream` serves a blob straight from the store in 1 MiB chunks
(the code URL replicas fetch, an artifact's download). `path` is for what needs a file
here (the entrypoint check, a data set staged into a job, a notebook's copy): it
downloads the blob once into the cache beside `.incoming` (to a temp file, renamed into
place) and reuses it; the cache is emptied at each start and a blob's copy goes with it.
`remove` deletes the object and the cached copy.

boto3 (the `s3` extra) as for data sources (docs/architecture.md says why). The store's
credentials live in this process only: never in argv, logs or any workload's environment.
"""

from __future__ import annotations

import contextlib
import io
import logging
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfkube.server.artifacts import CHUNK, BlobStore, BlobStoreError, blob_path, sha256_of
from tfkube.server.core.store import CREDENTIALS_FROM, StoreConfig, blob_key

if TYPE_CHECKING:
    from tfkube.server.outputs.archived import ArchivedOutputs

log = logging.getLogger("tfkube.server")
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 60.0


class StoreUnavailable(RuntimeError):
    """The store cannot be used (at start: the server does not start); the message names
    the option at fault and the fix, never a credential."""


def open_client(config: StoreConfig) -> Any:
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise StoreUnavailable(
            "--store s3:// needs boto3: pip install 'tfkube[server,s3]'"
        ) from None
    session = boto3.session.Session(
        aws_access_key_id=config.access_key, aws_secret_access_key=config.secret_key
    )
    return session.client(
        "s3",
        endpoint_url=config.endpoint,
        region_name=config.region,
        config=Config(
            connect_timeout=CONNECT_TIMEOUT,
            read_timeout=READ_TIMEOUT,
            retries={"max_attempts": 3, "mode": "standard"},
            s3={"addressing_style": "path"},
            # Checksums only where the API requires them: S3-compatible stores differ.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )


def explain(exc: Exception, config: StoreConfig) -> str:
    """What the store said, for the admin: the option to fix, no credentials."""
    from botocore.exceptions import (
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
    )
    from botocore.exceptions import ConnectionError as BotoConnectionError

    where = config.endpoint or "AWS S3"
    if isinstance(exc, NoCredentialsError):
        return f"--store {config.url}: no credentials; give them by {CREDENTIALS_FROM}"
    if isinstance(exc, EndpointConnectionError | BotoConnectionError):
        return (
            f"--store-endpoint: the store at {where} cannot be reached; check the address "
            "and that the store is running"
        )
    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status == 404 or code == "NoSuchBucket":
            return (
                f"--store {config.url}: bucket {config.bucket!r} does not exist at {where}; "
                "create it (the server never creates buckets) or name another"
            )
        if status in {401, 403}:
            return (
                f"--store {config.url}: the store at {where} refused the credentials "
                f"({code or status}); check {CREDENTIALS_FROM}"
            )
        return f"--store {config.url}: the store at {where} answered {code or status}"
    return f"--store {config.url}: using the store at {where} failed: {type(exc).__name__}"


def check_store(config: StoreConfig) -> Any:
    """At start: the bucket exists and these credentials may write to it (a marker
    object written, read back and deleted). -> the client, or StoreUnavailable."""
    client = open_client(config)
    key = f"{config.prefix}.tfkube-server-check"
    try:
        client.head_bucket(Bucket=config.bucket)
        client.put_object(Bucket=config.bucket, Key=key, Body=b"ok")
        client.get_object(Bucket=config.bucket, Key=key)["Body"].read()
        client.delete_object(Bucket=config.bucket, Key=key)
    except Exception as exc:
        raise StoreUnavailable(explain(exc, config)) from None
    return client


class S3BlobStore(BlobStore):
    """Content-addressed blobs in a bucket; `root` (local) holds uploads being checked
    and the read-through cache."""

    is_local = False

    def __init__(self, root: Path, client: Any, config: StoreConfig) -> None:
        super().__init__(root)
        self.client = client
        self.config = config

    @contextlib.contextmanager
    def _calling(self, what: str) -> Iterator[None]:
        """A failing store as BlobStoreError: the admin's reason logged, the member's
        answer naming no endpoint or key."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except (BotoCoreError, ClientError) as exc:
            log.error("the store failed %s: %s", what, explain(exc, self.config))
            raise BlobStoreError(
                f"the server's artifact store failed {what}; try again later, or tell the "
                "site admin (the server's log says why)"
            ) from None

    def _key(self, sha256: str) -> str:
        return blob_key(self.config.prefix, sha256)

    def _exists(self, sha256: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.config.bucket, Key=self._key(sha256))
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code", "")) in {"404", "NoSuchKey"}:
                return False
            raise
        return True

    def keep(self, staged: Path) -> tuple[str, int]:
        from boto3.s3.transfer import TransferConfig

        sha, size = sha256_of(staged)
        try:
            with self._calling("keeping an upload"):
                if not self._exists(sha):
                    self.client.upload_file(
                        str(staged),
                        self.config.bucket,
                        self._key(sha),
                        Config=TransferConfig(multipart_chunksize=8 * CHUNK, max_concurrency=4),
                    )
        finally:
            staged.unlink(missing_ok=True)
        return sha, size

    def stream(self, sha256: str) -> tuple[int, Iterator[bytes]] | None:
        from botocore.exceptions import ClientError

        with self._calling("reading a blob"):
            try:
                got = self.client.get_object(Bucket=self.config.bucket, Key=self._key(sha256))
            except ClientError as exc:
                if str(exc.response.get("Error", {}).get("Code", "")) in {"404", "NoSuchKey"}:
                    return None
                raise
        body = got["Body"]

        def chunks() -> Iterator[bytes]:
            try:
                yield from body.iter_chunks(CHUNK)
            finally:
                body.close()

        return int(got["ContentLength"]), chunks()

    def path(self, sha256: str) -> Path:
        """A local copy (downloaded once into the cache); a path that is not a file when
        the store has no such blob."""
        local = blob_path(self.root, sha256)
        if local.is_file():
            return local
        found = self.stream(sha256)
        if found is None:
            return local
        _, chunks = found
        staged = self.temp()
        try:
            with staged.open("wb") as out, self._calling("reading a blob"):
                for chunk in chunks:
                    out.write(chunk)
            local.parent.mkdir(parents=True, exist_ok=True)
            staged.chmod(0o444)
            staged.replace(local)
        finally:
            staged.unlink(missing_ok=True)
        return local

    def remove(self, sha256: str) -> None:
        with self._calling("deleting a blob"):
            self.client.delete_object(Bucket=self.config.bucket, Key=self._key(sha256))
        blob_path(self.root, sha256).unlink(missing_ok=True)

    def delete_key(self, key: str) -> None:
        with self._calling("deleting an archive"):
            self.client.delete_object(Bucket=self.config.bucket, Key=key)

    def put_archive(self, key: str, reader: Any) -> None:
        """Upload a readable stream (multipart, 8 MiB parts) under `key`; an exception
        while reading aborts the upload, so nothing partial is kept."""
        from boto3.s3.transfer import TransferConfig

        with self._calling("archiving outputs"):
            self.client.upload_fileobj(
                reader,
                self.config.bucket,
                key,
                Config=TransferConfig(multipart_chunksize=8 * CHUNK, max_concurrency=1),
            )

    def head(self, key: str) -> tuple[int, str] | None:
        """(size, ETag) of an object, or None when there is none."""
        from botocore.exceptions import ClientError

        with self._calling("reading an archive"):
            try:
                got = self.client.head_object(Bucket=self.config.bucket, Key=key)
            except ClientError as exc:
                if str(exc.response.get("Error", {}).get("Code", "")) in {"404", "NoSuchKey"}:
                    return None
                raise
        return int(got["ContentLength"]), str(got.get("ETag", ""))

    def ranged(self, key: str, offset: int, length: int) -> Iterator[bytes]:
        """`length` bytes of an object from `offset` (one ranged GET), in chunks of at
        most 1 MiB; a short object is an error, never a short answer."""
        if length <= 0:
            return
        with self._calling("reading an archive"):
            got = self.client.get_object(
                Bucket=self.config.bucket, Key=key, Range=f"bytes={offset}-{offset + length - 1}"
            )
        body = got["Body"]
        seen = 0
        try:
            with self._calling("reading an archive"):
                for chunk in body.iter_chunks(CHUNK):
                    chunk = chunk[: length - seen]
                    seen += len(chunk)
                    if chunk:
                        yield chunk
                    if seen >= length:
                        break
        finally:
            body.close()
        if seen < length:
            raise BlobStoreError("an archive in the store is shorter than its index says")

    def clear_incoming(self) -> None:
        """Uploads cut off by a crash, and the whole cache (the store is the truth)."""
        shutil.rmtree(self.root, ignore_errors=True)
        self.incoming.mkdir(parents=True, exist_ok=True)


class _RangeFile(io.RawIOBase):
    """An object of the store as a seekable file (what tarfile reads an archive's headers
    through): each read is a ranged GET of at least READ_AHEAD bytes, so the headers of
    small members come many per request and a large member's data is skipped by seeking."""

    READ_AHEAD = 256 * 1024

    def __init__(self, blobs: S3BlobStore, key: str, size: int) -> None:
        self.blobs, self.key, self.size = blobs, key, size
        self.pos = 0
        self.buf_at, self.buf = 0, b""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def read(self, n: int = -1) -> bytes:
        if n < 0:
            n = self.size - self.pos
        n = max(0, min(n, self.size - self.pos))
        if not n:
            return b""
        start = self.pos - self.buf_at
        if not (start >= 0 and start + n <= len(self.buf)):
            length = min(max(n, self.READ_AHEAD), self.size - self.pos)
            self.buf = b"".join(self.blobs.ranged(self.key, self.pos, length))
            self.buf_at, start = self.pos, 0
        data = self.buf[start : start + n]
        self.pos += len(data)
        return data

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


class ArchiveReader:
    """A job's archive read back (`outputs/archived.py`): its index built once from the
    tar's headers, checked, and kept here (the most recent CACHED archives, each keyed by
    the object's ETag, so a replaced object is checked again; bounded in archives and in
    members); reads are ranged GETs."""

    CACHED = 64
    CACHED_MEMBERS = 400_000
    """And at most this many members in them together (the newest kept whatever its size)."""

    def __init__(self, blobs: S3BlobStore) -> None:
        import threading
        from collections import OrderedDict

        from tfkube.server.outputs.archived import ArchiveIndex

        self.blobs = blobs
        self.lock = threading.Lock()
        self.indexes: OrderedDict[tuple[str, str], ArchiveIndex] = OrderedDict()

    def outputs(self, key: str) -> ArchivedOutputs:
        """The archive at `key`; ArchiveRefused (it breaks a rule: logged), BlobStoreError
        (the store failed), LookupError (no such archive)."""
        from tfkube.server.outputs.archived import ArchivedOutputs, ArchiveRefused, index_of

        found = self.blobs.head(key)
        if found is None:
            raise LookupError("the job's archive is not in the store")
        size, etag = found
        with self.lock:
            index = self.indexes.get((key, etag))
            if index is not None:
                self.indexes.move_to_end((key, etag))
        if index is None:
            try:
                index = index_of(_RangeFile(self.blobs, key, size), size)  # type: ignore[arg-type]
            except ArchiveRefused as exc:
                log.error("refused the archive %s: %s", key, exc)
                raise
            with self.lock:
                self.indexes[(key, etag)] = index
                while len(self.indexes) > 1 and (
                    len(self.indexes) > self.CACHED
                    or sum(len(i.members) for i in self.indexes.values()) > self.CACHED_MEMBERS
                ):
                    self.indexes.popitem(last=False)
        return ArchivedOutputs(
            index, lambda offset, length: self.blobs.ranged(key, offset, length), f"{key}@{etag}"
        )


class OutputArchiver:
    """Archives an ended job's outputs and logs into the store, one job at a time on a
    thread of its own (the sync loop never waits for an upload); once written,
    `on_archived(job id, key)` records it on the job's row (`retention.py` removes the
    local copy later, when the server is told to)."""

    def __init__(
        self, blobs: S3BlobStore, on_archived: Callable[[str, str], None] | None = None
    ) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.blobs = blobs
        self.on_archived = on_archived
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="tfkube-archive")

    def submit(self, team: str, job_id: str, output_dir: str | None) -> None:
        if output_dir:
            self.pool.submit(self.archive, team, job_id, output_dir)

    def archive(self, team: str, job_id: str, output_dir: str) -> str | None:
        """-> the key written, or None (logged) when the outputs could not be archived."""
        from tfkube.server.outputs.archive import archive_reader, outputs_key

        key = outputs_key(self.blobs.config.prefix, team, job_id)
        try:
            self.blobs.put_archive(key, archive_reader(output_dir))
        except (OSError, BlobStoreError) as exc:
            log.error("archiving the outputs of job %s failed: %s", job_id, exc)
            return None
        log.info("archived the outputs of job %s", job_id)
        self._drop_first_format(key, job_id)
        if self.on_archived is not None:
            self.on_archived(job_id, key)
        return key

    def remove(self, team: str, job_id: str) -> None:
        """A deleted job's archive (none is fine)."""
        from tfkube.server.outputs.archive import outputs_key

        key = outputs_key(self.blobs.config.prefix, team, job_id)
        self.remove_key(key, job_id)
        self._drop_first_format(key, job_id)

    def _drop_first_format(self, key: str, job_id: str) -> None:
        """The job's archive of the first format (`archive.first_format_key`), if any."""
        from tfkube.server.outputs.archive import first_format_key

        try:
            self.blobs.delete_key(first_format_key(key))
        except BlobStoreError as exc:
            log.error("removing the first-format archive of job %s failed: %s", job_id, exc)

    def remove_key(self, key: str, job_id: str) -> None:
        self.blobs.delete_key(key)
        log.info("removed the archived outputs of job %s", job_id)

    def close(self) -> None:
        """Stop: what is archiving now finishes, what waits is dropped (archived again
        when the next start sees the job ended)."""
        self.pool.shutdown(wait=True, cancel_futures=True)
