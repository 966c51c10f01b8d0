"""Where the server keeps its own bytes (`tfkube server --store`): the pure part.

The filesystem (`<data-dir>/blobs`) is the default; `--store s3://bucket/prefix` puts the
artifacts' blobs in an S3-compatible store instead (`server/s3blobs.py` acts on it). The
endpoint and region come from `--store-endpoint`/`--store-region`, the credentials from
the environment (TFKUBE_STORE_ACCESS_KEY_ID, TFKUBE_STORE_SECRET_ACCESS_KEY) or a file
(`--store-credentials FILE`, lines `access_key_id = ...` and `secret_access_key = ...`),
never from the command line (argv is visible to every process on the machine). The
secret key is kept out of every repr, so no log or error prints it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

ENV_ACCESS_KEY = "TFKUBE_STORE_ACCESS_KEY_ID"
ENV_SECRET_KEY = "TFKUBE_STORE_SECRET_ACCESS_KEY"
CREDENTIALS_FROM = (
    f"--store-credentials FILE, or {ENV_ACCESS_KEY} and {ENV_SECRET_KEY} in the server's "
    "environment"
)
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class StoreConfigError(ValueError):
    """A store setting refused; the message names the option and the fix."""


@dataclass(frozen=True)
class StoreConfig:
    """An S3-compatible store the server keeps its bytes in."""

    bucket: str
    prefix: str
    """'' or a path ending in '/': every key the server writes starts with it."""
    endpoint: str | None = None
    region: str = "us-east-1"
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def parse_store_url(text: str) -> tuple[str, str]:
    """`s3://bucket[/prefix]` -> (bucket, prefix with a trailing '/' or '')."""
    parts = urlsplit(text.strip())
    if parts.scheme != "s3":
        raise StoreConfigError(
            f"--store: {text!r} is not an s3:// URL; give s3://bucket/prefix "
            "(or leave --store out to keep everything under --data-dir)"
        )
    if parts.query or parts.fragment or parts.username or parts.port:
        raise StoreConfigError(f"--store: {text!r} may hold only s3://bucket/prefix")
    bucket = parts.netloc
    if not _BUCKET.match(bucket):
        raise StoreConfigError(
            f"--store: {bucket!r} is not a bucket name (3 to 63 of a-z, 0-9, '.', '-')"
        )
    segments = [s for s in parts.path.split("/") if s]
    if any(s in {".", ".."} for s in segments):
        raise StoreConfigError(f"--store: the prefix of {text!r} holds '.' or '..'")
    prefix = "/".join(segments)
    return bucket, f"{prefix}/" if prefix else ""


def parse_credentials_file(text: str) -> tuple[str, str]:
    """A credentials file's `access_key_id = ...` and `secret_access_key = ...` lines
    (blank lines and `#` comments allowed) -> (access key, secret key)."""
    found: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.strip().lower()
        if not sep or key not in {"access_key_id", "secret_access_key"}:
            raise StoreConfigError(
                f"--store-credentials: line {number} is not 'access_key_id = ...' or "
                "'secret_access_key = ...'"
            )
        found[key] = value.strip()
    missing = [k for k in ("access_key_id", "secret_access_key") if not found.get(k)]
    if missing:
        raise StoreConfigError(f"--store-credentials: the file has no {' or '.join(missing)}")
    return found["access_key_id"], found["secret_access_key"]


def store_config(
    url: str,
    endpoint: str | None,
    region: str | None,
    credentials_file_text: str | None,
    env: Mapping[str, str],
) -> StoreConfig:
    """The store from the server's options: the file's credentials first, else the
    environment's (both or neither), else none (boto3's own chain: an instance role)."""
    bucket, prefix = parse_store_url(url)
    if endpoint is not None:
        parts = urlsplit(endpoint)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise StoreConfigError(
                f"--store-endpoint: {endpoint!r} is not an http(s):// URL; give the store's "
                "address, e.g. https://s3.example.com"
            )
        if parts.username or parts.password:
            raise StoreConfigError(
                "--store-endpoint: no credentials in the URL; give them by " + CREDENTIALS_FROM
            )
    if credentials_file_text is not None:
        access, secret = parse_credentials_file(credentials_file_text)
    else:
        access, secret = env.get(ENV_ACCESS_KEY, ""), env.get(ENV_SECRET_KEY, "")
        if bool(access) != bool(secret):
            raise StoreConfigError(
                f"set both {ENV_ACCESS_KEY} and {ENV_SECRET_KEY}, or neither "
                "(or use --store-credentials FILE)"
            )
    return StoreConfig(
        bucket, prefix, endpoint, region or "us-east-1", access or None, secret or None
    )


def refused_workload_env(names: tuple[str, ...]) -> str | None:
    """Workloads never get the store's credentials: `--workload-env` naming one is
    refused (the message), else None."""
    bad = sorted({n for n in names if n in {ENV_ACCESS_KEY, ENV_SECRET_KEY}})
    if bad:
        return (
            f"--workload-env: {', '.join(bad)} holds the server's store credentials, "
            "which workloads never get; remove it"
        )
    return None


def blob_key(prefix: str, sha256: str) -> str:
    """Where a blob lives in the store: as on disk, `blobs/<sha[:2]>/<sha>` under the
    prefix."""
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise ValueError(f"not a sha256: {sha256!r}")
    return f"{prefix}blobs/{sha256[:2]}/{sha256}"
