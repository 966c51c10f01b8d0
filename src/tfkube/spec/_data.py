"""Data sources (issue 19): where a job's training data already lives, as the job file
writes it (`spec.storage.data.source`, `spec.storage.data.endpoint`). Pure: parsing and
the rules; fetching is an engine's (`tfkube.engines._data`).

`s3://bucket/prefix` on any S3-compatible store (`endpoint`, else AWS), and
`hdfs://namenode:port/path` read over WebHDFS (`endpoint`: the NameNode's HTTP address,
else port 9870 on the same host). `shard: byWorker` gives worker i of n only the files
`sorted(files)[i::n]` (`shard_of`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

S3_SCHEME = "s3://"
HDFS_SCHEME = "hdfs://"

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_SECRET_NAME = re.compile(r"[a-z0-9]([-a-z0-9_.]{0,62}[a-z0-9])?")
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]")


@dataclass(frozen=True)
class S3Source:
    """`s3://bucket/prefix`: every object under `prefix` (the whole bucket when empty)."""

    bucket: str
    prefix: str
    """Without a leading '/'; a folder's prefix ends with '/' (added when missing)."""

    def __str__(self) -> str:
        return f"{S3_SCHEME}{self.bucket}/{self.prefix}"


WEBHDFS_PORT = 9870
"""The NameNode's HTTP port in Hadoop 3 (`dfs.namenode.http-address`): WebHDFS's default."""


@dataclass(frozen=True)
class HdfsSource:
    """`hdfs://namenode:port/path`: the file, or every file below the folder, at `path`."""

    host: str
    port: int
    """The NameNode's RPC port as Hadoop writes it (part of the source's name and of the
    cache key); the bytes come over WebHDFS (`webhdfs_url`)."""
    path: str
    """Absolute, without a trailing '/' (except the root itself)."""

    def __str__(self) -> str:
        return f"{HDFS_SCHEME}{self.host}:{self.port}{self.path}"

    def webhdfs_url(self, endpoint: str | None) -> str:
        """The WebHDFS base (`.../webhdfs/v1`): the endpoint given, else the NameNode's
        host on port 9870."""
        return f"{endpoint or f'http://{self.host}:{WEBHDFS_PORT}'}/webhdfs/v1"


DataSource = S3Source | HdfsSource

ShardRule = Literal["byWorker"]
"""`byWorker`: worker i of n gets `sorted(files)[i::n]`; PS replicas none; the chief and
the evaluator every file (they evaluate and save; they are not among the n)."""


def shard_of(
    files: list[str], rule: ShardRule | None, role: str, index: int, workers: int
) -> list[str]:
    """The files (names relative to the source) a replica gets (pure): all of them without
    a rule; with `byWorker`, worker `index` of `workers` its `sorted(files)[index::workers]`,
    a PS none, the chief and an evaluator all."""
    ordered = sorted(files)
    if rule is None:
        return ordered
    if role == "ps":
        return []
    if role == "worker":
        return ordered[index :: max(1, workers)]
    return ordered


def _parse_hdfs(value: str) -> HdfsSource:
    rest = value[len(HDFS_SCHEME) :]
    authority, slash, path = rest.partition("/")
    host, colon, port_text = authority.rpartition(":")
    if not colon or not port_text.isdigit() or not _HOST.fullmatch(host):
        raise ValueError(
            f"{value!r}: write hdfs://namenode:port/path (the NameNode's host and RPC port, "
            "e.g. hdfs://namenode:8020/data/train)"
        )
    port = int(port_text)
    if not 0 < port < 65536:
        raise ValueError(f"{value!r}: {port} is not a port")
    parts = path.split("/") if path else []
    if parts and parts[-1] == "":
        parts.pop()
    if any(p in ("", ".", "..") for p in parts) or "\0" in path or not slash:
        raise ValueError(
            f"{value!r}: the path must be absolute and plain (no '.', '..' or empty "
            "segments); write hdfs://namenode:8020/data/train"
        )
    return HdfsSource(host=host, port=port, path="/" + "/".join(parts))


def parse_source(value: str) -> DataSource:
    """A source as written -> its parts (pure). ValueError says what is wrong and how to
    write it."""
    if value.startswith(HDFS_SCHEME):
        return _parse_hdfs(value)
    if not value.startswith(S3_SCHEME):
        raise ValueError(
            f"{value!r} is not a data source; write s3://bucket/prefix (any S3-compatible "
            "store, with endpoint) or hdfs://namenode:port/path, or use path for a folder "
            "on this machine"
        )
    rest = value[len(S3_SCHEME) :]
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise ValueError(
            f"{bucket!r} is not a bucket name (3 to 63 lower-case letters, digits, '.' and "
            "'-', starting and ending with a letter or digit); write s3://bucket/prefix"
        )
    parts = prefix.split("/")
    if any(p in (".", "..") for p in parts) or "//" in prefix or prefix.startswith("/"):
        raise ValueError(
            f"{prefix!r} is not a plain prefix (no '.', '..' or empty segments); write "
            "s3://bucket/folder/"
        )
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return S3Source(bucket=bucket, prefix=prefix)


def check_endpoint(value: str) -> str:
    """A store's endpoint (S3, or WebHDFS's NameNode HTTP address): http(s)://host[:port],
    nothing else (pure). No user or password in it: credentials never go in the job file
    (they would be stored with the spec)."""
    try:
        url = urlsplit(value)
        port = url.port
    except ValueError:
        raise ValueError(f"{value!r} is not a URL; write e.g. http://127.0.0.1:8333") from None
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(f"{value!r} is not an http(s) URL; write e.g. http://127.0.0.1:8333")
    if url.username is not None or url.password is not None:
        raise ValueError(
            "credentials do not belong in the endpoint (the job file is stored and shown); "
            "give them in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or --data-credentials FILE"
        )
    if url.path not in ("", "/") or url.query or url.fragment:
        raise ValueError(f"{value!r}: give the store's address only, e.g. http://host:8333")
    if port == 0:
        raise ValueError(f"{value!r}: port 0 is no port")
    return value.rstrip("/")


def check_secret_name(value: str) -> str:
    """A team secret's name (pure): what `spec.storage.data.credentials` names and what a
    team admin stores it under."""
    if not _SECRET_NAME.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a secret's name; use 1-64 lower-case letters, digits, '.', "
            "'_' or '-', starting and ending with a letter or digit"
        )
    return value
