"""The pure part of `tfkube server --store`: the URL, the credentials, the keys."""

from __future__ import annotations

import pytest

from tfkube.server.core.store import (
    ENV_ACCESS_KEY,
    ENV_SECRET_KEY,
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
