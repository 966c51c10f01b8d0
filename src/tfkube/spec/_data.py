"""Data sources (issue 19): where a job's training data already lives, as the job file
writes it (`spec.storage.data.source`, `spec.storage.data.endpoint`). Pure: parsing and
the rules; fetching is an engine's (`tfkube.engines._data`).

Today: `s3://bucket/prefix` on any S3-compatible store (`endpoint`, else AWS). HDFS
(`hdfs://namenode:port/path`) is named and refused with the reason, so a job file that
uses it is told, not misread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
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


def parse_source(value: str) -> S3Source:
    """A source as written -> its parts (pure). ValueError says what is wrong and how to
    write it."""
    if value.startswith(HDFS_SCHEME):
        raise ValueError(
            f"{value!r}: HDFS sources are not supported yet (issue 19: S3 first); copy the "
            "data to an S3-compatible store and give s3://bucket/prefix"
        )
    if not value.startswith(S3_SCHEME):
        raise ValueError(
            f"{value!r} is not a data source; write s3://bucket/prefix (any S3-compatible "
            "store, with endpoint), or use path for a folder on this machine"
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
    """An S3 endpoint: http(s)://host[:port], nothing else (pure). No user or password in
    it: credentials never go in the job file (they would be stored with the spec)."""
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
