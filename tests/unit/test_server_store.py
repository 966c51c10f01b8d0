"""The pure part of `tfkube server --store`: the URL, the credentials, the keys."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tfkube.server.core.store import (
    ENV_ACCESS_KEY,
    ENV_SECRET_KEY,
    StoreConfig,
    StoreConfigError,
    blob_key,
    parse_credentials_file,
    parse_store_url,
    refused_workload_env,
    store_config,
)

SHA = "ab" + "0" * 62


@pytest.mark.parametrize(
    ("url", "bucket", "prefix"),
    [
        ("s3://my-bucket", "my-bucket", ""),
        ("s3://my-bucket/", "my-bucket", ""),
        ("s3://my-bucket/tfkube", "my-bucket", "tfkube/"),
        ("s3://my.bucket//a//b/", "my.bucket", "a/b/"),
    ],
)
def test_store_urls(url: str, bucket: str, prefix: str) -> None:
    assert parse_store_url(url) == (bucket, prefix)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("/srv/store", "not an s3:// URL"),
        ("hdfs://nn:9870/x", "not an s3:// URL"),
        ("s3://Bad_Bucket/x", "not a bucket name"),
        ("s3://ab/x", "not a bucket name"),
        ("s3://bucket/a/../b", "'..'"),
        ("s3://bucket/x?versionId=1", "only s3://bucket/prefix"),
        ("s3://key:secret@bucket/x", "only s3://bucket/prefix"),
    ],
)
def test_bad_store_urls_name_the_flag(url: str, says: str) -> None:
    with pytest.raises(StoreConfigError) as err:
        parse_store_url(url)
    assert str(err.value).startswith("--store:")
    assert says in str(err.value)


def test_blob_keys_mirror_the_disk_layout() -> None:
    assert blob_key("", SHA) == f"blobs/ab/{SHA}"
    assert blob_key("site/", SHA) == f"site/blobs/ab/{SHA}"
    with pytest.raises(ValueError, match="not a sha256"):
        blob_key("", "../../etc")


def test_credentials_file() -> None:
    text = "# keys\n\naccess_key_id = AK\nsecret_access_key=S=cret\n"
    assert parse_credentials_file(text) == ("AK", "S=cret")
    with pytest.raises(StoreConfigError, match="no secret_access_key"):
        parse_credentials_file("access_key_id = AK\n")
    with pytest.raises(StoreConfigError, match="line 1") as err:
        parse_credentials_file("token = S3CRET\n")
    assert "S3CRET" not in str(err.value)


def test_credentials_come_from_the_file_else_the_environment() -> None:
    env = {ENV_ACCESS_KEY: "envkey", ENV_SECRET_KEY: "envsecret"}
    from_file = store_config(
        "s3://bucket/p", None, None, "access_key_id=fk\nsecret_access_key=fs\n", env
    )
    assert (from_file.access_key, from_file.secret_key) == ("fk", "fs")
    from_env = store_config("s3://bucket/p", "http://127.0.0.1:9000", "eu-west-1", None, env)
    assert (from_env.access_key, from_env.secret_key) == ("envkey", "envsecret")
    assert from_env.region == "eu-west-1"
    assert from_env.url == "s3://bucket/p/"
    assert "envsecret" not in repr(from_env)
    chain = store_config("s3://bucket", None, None, None, {})
    assert chain.access_key is None
    assert chain.region == "us-east-1"
    with pytest.raises(StoreConfigError, match="both"):
        store_config("s3://bucket", None, None, None, {ENV_ACCESS_KEY: "only-one"})


@pytest.mark.parametrize(
    "endpoint", ["127.0.0.1:9000", "ftp://store", "http://key:secret@store:9000"]
)
def test_bad_endpoints_name_the_flag(endpoint: str) -> None:
    with pytest.raises(StoreConfigError, match="--store-endpoint") as err:
        store_config("s3://bucket", endpoint, None, None, {})
    assert "key:secret" not in str(err.value)


def test_workloads_never_get_the_store_credentials() -> None:
    assert refused_workload_env(("LANG_EXTRA", "HTTP_PROXY")) is None
    message = refused_workload_env(("HTTP_PROXY", ENV_SECRET_KEY))
    assert message is not None
    assert message.startswith("--workload-env:")
    assert ENV_SECRET_KEY in message


def client_error(status: int, code: str) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError(
        {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "HeadBucket"
    )


CONFIG = StoreConfig("site-bucket", "p/", "http://127.0.0.1:9", "us-east-1", "AK", "SECRETKEY")


@pytest.mark.parametrize(
    ("exc", "says"),
    [
        (lambda: client_error(404, ""), "bucket 'site-bucket' does not exist"),
        (lambda: client_error(403, ""), "refused the credentials (403); check --store-credentials"),
        (lambda: client_error(403, "SignatureDoesNotMatch"), "(SignatureDoesNotMatch)"),
        (lambda: client_error(500, "InternalError"), "answered InternalError"),
    ],
)
def test_the_stores_refusals_name_the_flag_never_the_key(
    exc: Callable[[], Exception], says: str
) -> None:
    pytest.importorskip("botocore")
    from tfkube.server.s3blobs import explain

    message = explain(exc(), CONFIG)
    assert message.startswith("--store s3://site-bucket/p/:")
    assert says in message
    assert "SECRETKEY" not in message


class _Down:
    """A client whose store cannot be reached (what botocore raises then)."""

    def __getattr__(self, name: str) -> Callable[..., Any]:
        from botocore.exceptions import EndpointConnectionError

        def call(*_args: Any, **_kw: Any) -> Any:
            raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9")

        return call


def test_a_store_that_fails_later_answers_503_and_keeps_nothing(tmp_path: Path) -> None:
    pytest.importorskip("botocore")
    from tfkube.server.artifacts import BlobStoreError
    from tfkube.server.s3blobs import S3BlobStore

    blobs = S3BlobStore(tmp_path / "cache", _Down(), CONFIG)
    staged = blobs.temp()
    staged.write_bytes(b"code")
    with pytest.raises(BlobStoreError, match="artifact store failed keeping an upload") as err:
        blobs.keep(staged)
    assert not staged.exists()
    assert "127.0.0.1" not in str(err.value)
    with pytest.raises(BlobStoreError, match="reading a blob"):
        blobs.stream(SHA)
    with pytest.raises(BlobStoreError, match="deleting a blob"):
        blobs.remove(SHA)


def test_outputs_keys() -> None:
    from tfkube.server.outputs.archive import outputs_key

    assert outputs_key("site/", "team-a", "06ae22e0") == "site/outputs/team-a/06ae22e0.tar"
    for team, job in [("../x", "1"), ("a", "x/y"), ("a", ""), ("a..b", "1")]:
        with pytest.raises(ValueError, match="fit for a key"):
            outputs_key("", team, job)


def test_archives_are_read_in_pieces_and_cut_off_past_the_bound() -> None:
    from tfkube.server.outputs.archive import ArchiveTooLarge, BoundedReader

    reader = BoundedReader(iter([b"abc", b"defg", b"h"]), limit=8)
    assert reader.read(2) == b"ab"
    assert reader.read(4) == b"cdef"
    assert reader.read() == b"gh"
    assert reader.read(3) == b""
    over = BoundedReader(iter([b"12345", b"6789"]), limit=8)
    assert over.read(4) == b"1234"
    with pytest.raises(ArchiveTooLarge, match="larger than 8 bytes"):
        over.read(4)


def test_an_archive_holds_no_link_a_workload_planted(tmp_path: Path) -> None:
    import io
    import os
    import tarfile

    from tfkube.server.outputs.archive import archive_reader

    out = tmp_path / "out"
    (out / ".tfkube" / "logs" / "worker-0").mkdir(parents=True)
    (out / ".tfkube" / "logs" / "worker-0" / "1.log").write_text("trained\n")
    (out / "model.txt").write_text("weights\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("not theirs\n")
    os.symlink(secret, out / "link.txt")
    os.symlink(tmp_path, out / "link-dir")
    os.link(secret, out / "hard.txt")
    body = archive_reader(str(out)).read()
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:") as tar:
        names = {m.name: m for m in tar}
        assert names[".tfkube/logs/worker-0/1.log"].isfile()
        assert "link.txt" not in names
        assert "link-dir" not in names
        assert "hard.txt" not in names  # a hard link to a file outside is left out too
        for member in names.values():
            data = tar.extractfile(member) if member.isfile() else None
            assert data is None or b"not theirs" not in data.read()
