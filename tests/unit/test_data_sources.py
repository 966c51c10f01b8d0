"""Data sources (issue 19), the pure parts: the job file's `spec.storage.data.source` and
`endpoint` rules (errors naming the field and the fix), credentials files, the cache key,
where an object lands, the progress line; a server's job naming its team's secret; and
the refusal where staging is not built yet (Kubernetes)."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import pytest

from tfkube.engines._data import (
    CacheEntry,
    GiB,
    HdfsCredentials,
    MiB,
    RemoteObject,
    StoreRef,
    cache_key,
    cache_limit,
    credentials_from_json,
    evictions,
    object_path,
    parse_credentials,
    placements,
    progress_text,
    relative_path,
    resume_from,
)
from tfkube.server.jobs.forms import server_problems
from tfkube.spec import (
    FieldError,
    HdfsSource,
    S3Source,
    SpecError,
    TFJob,
    dump_job,
    parse_job,
    parse_source,
    shard_of,
)


def job_with(data: dict[str, Any]) -> TFJob:
    return parse_job(
        {
            "metadata": {"name": "d"},
            "spec": {
                "replicas": {"worker": {"replicas": 1, "command": ["true"]}},
                "storage": {"data": data},
            },
        }
    )


def refusal(data: dict[str, Any]) -> tuple[set[str], str]:
    with pytest.raises(SpecError) as caught:
        job_with(data)
    return {e.field for e in caught.value.errors}, str(caught.value)


def test_an_s3_source_with_its_endpoint_is_a_job_field() -> None:
    job = job_with({"source": "s3://train-data/digits", "endpoint": "http://127.0.0.1:8333/"})
    data = job.spec.storage.data
    assert data.s3 == S3Source("train-data", "digits/")
    assert data.endpoint == "http://127.0.0.1:8333"
    assert "source: s3://train-data/digits" in dump_job(job)
    assert parse_source("s3://bucket") == S3Source("bucket", "")


@pytest.mark.parametrize(
    ("data", "field", "says"),
    [
        ({"source": "hdfs://nn/data"}, "spec.storage.data.source", "hdfs://namenode:port"),
        ({"source": "hdfs://nn:8020/a/../b"}, "spec.storage.data.source", "plain"),
        ({"source": "hdfs://nn:8020"}, "spec.storage.data.source", "absolute"),
        ({"source": "hdfs://nn:8020/d", "region": "us-east-1"}, "spec.storage.data", "S3"),
        ({"source": "s3://bkt/p", "shard": "byRow"}, "spec.storage.data.shard", "byWorker"),
        ({"shard": "byWorker"}, "spec.storage.data", "goes with source"),
        ({"source": "gs://b/p"}, "spec.storage.data.source", "s3://bucket/prefix"),
        ({"source": "s3://Bad_Bucket/p"}, "spec.storage.data.source", "bucket name"),
        ({"source": "s3://bucket/../etc"}, "spec.storage.data.source", "plain prefix"),
        ({"source": "s3://bucket//x"}, "spec.storage.data.source", "plain prefix"),
        ({"source": "s3://bkt/p", "endpoint": "ftp://h"}, "spec.storage.data.endpoint", "http"),
        (
            {"source": "s3://bkt/p", "endpoint": "http://key:secret@127.0.0.1:1"},
            "spec.storage.data.endpoint",
            "credentials do not belong",
        ),
        (
            {"source": "s3://bkt/p", "endpoint": "http://h:1/x"},
            "spec.storage.data.endpoint",
            "only",
        ),
        ({"endpoint": "http://127.0.0.1:1"}, "spec.storage.data", "goes with source"),
        ({"source": "s3://bkt/p", "path": "here"}, "spec.storage.data", "remove path"),
        ({"source": "s3://bkt/p", "region": "Mars 1"}, "spec.storage.data.region", "region"),
    ],
)
def test_bad_data_sources_are_refused_naming_the_field(
    data: dict[str, Any], field: str, says: str
) -> None:
    fields, text = refusal(data)
    assert fields == {field}
    assert says in text
    assert "secret" not in text  # never echoes a credential


def test_credentials_files_in_aws_format_or_as_variables() -> None:
    aws = parse_credentials(
        "[default]\naws_access_key_id = AK\naws_secret_access_key = SK\n", "creds"
    )
    assert (aws.access_key, aws.secret_key, aws.session_token) == ("AK", "SK", None)
    env = parse_credentials(
        "AWS_ACCESS_KEY_ID=AK\nAWS_SECRET_ACCESS_KEY=SK\nAWS_SESSION_TOKEN=T\n", "creds"
    )
    assert (env.access_key, env.secret_key, env.session_token) == ("AK", "SK", "T")
    assert "SK" not in repr(env)  # a log line never shows them
    assert "T'" not in repr(env)
    with pytest.raises(ValueError, match="needs both") as caught:
        parse_credentials("aws_access_key_id = AK-not-shown\n", "creds")
    assert "AK-not-shown" not in str(caught.value)
    with pytest.raises(ValueError, match="several profiles"):
        parse_credentials("[a]\nx=1\n[b]\ny=2\n", "creds")


def test_the_cache_key_is_the_content_not_the_job() -> None:
    store = StoreRef(S3Source("b", "p/"), "http://127.0.0.1:1")
    obj = RemoteObject("p/x.npz", 10, "etag1", 0.0)
    assert cache_key(store, obj) == cache_key(
        StoreRef(S3Source("b", "p/"), "http://127.0.0.1:1"), obj
    )
    changed = [
        RemoteObject("p/x.npz", 10, "etag2", 0.0),  # new content
        RemoteObject("p/x.npz", 11, "etag1", 0.0),
        RemoteObject("p/y.npz", 10, "etag1", 0.0),
    ]
    assert len({cache_key(store, o) for o in [obj, *changed]}) == 4
    assert cache_key(StoreRef(S3Source("c", "p/"), "http://127.0.0.1:1"), obj) != cache_key(
        store, obj
    )


def test_an_hdfs_source_is_a_namenode_and_a_path_read_over_webhdfs() -> None:
    job = job_with({"source": "hdfs://nn.example:8020/data/train/", "shard": "byWorker"})
    data = job.spec.storage.data
    assert data.parsed_source == HdfsSource("nn.example", 8020, "/data/train")
    assert (data.s3, data.shard) == (None, "byWorker")
    assert str(data.parsed_source) == "hdfs://nn.example:8020/data/train"
    assert parse_source("hdfs://[::1]:9000/").path == "/"  # type: ignore[union-attr]
    source = HdfsSource("nn", 8020, "/d")
    assert source.webhdfs_url(None) == "http://nn:9870/webhdfs/v1"
    assert source.webhdfs_url("https://gw:8443") == "https://gw:8443/webhdfs/v1"
    store = StoreRef(source, "http://127.0.0.1:9870")
    assert StoreRef.from_json(store.to_json()) == store
    assert StoreRef.from_json(StoreRef(S3Source("b", "p/")).to_json()) == StoreRef(
        S3Source("b", "p/")
    )


def test_the_hdfs_cache_key_is_namenode_path_length_and_modification_time() -> None:
    store = StoreRef(HdfsSource("nn", 8020, "/d"), "http://127.0.0.1:9870")
    obj = RemoteObject("/d/x.bin", 10, "mtime:1700000000000", 1700000000.0)
    assert cache_key(store, obj) == cache_key(
        StoreRef(HdfsSource("nn", 8020, "/d"), "http://127.0.0.1:9870"), obj
    )
    # Another WebHDFS address is another key: a gateway of one's own answering for the
    # NameNode's name never fills the cache for the real one.
    assert cache_key(store, obj) != cache_key(StoreRef(HdfsSource("nn", 8020, "/d")), obj)
    changed = [
        RemoteObject("/d/x.bin", 10, "mtime:1700000000001", 1700000000.0),  # rewritten
        RemoteObject("/d/x.bin", 11, "mtime:1700000000000", 1700000000.0),
        RemoteObject("/d/y.bin", 10, "mtime:1700000000000", 1700000000.0),
    ]
    assert len({cache_key(store, o) for o in [obj, *changed]}) == 4
    other = StoreRef(HdfsSource("nn2", 8020, "/d"))
    assert cache_key(other, obj) != cache_key(store, obj)
    assert object_path(store, "/d/sub/x.bin") == PurePosixPath("sub/x.bin")
    one_file = StoreRef(HdfsSource("nn", 8020, "/d/x.bin"))
    assert object_path(one_file, "/d/x.bin") == PurePosixPath("x.bin")


def test_worker_i_of_n_gets_every_nth_file_by_name() -> None:
    files = ["e", "a", "d", "c", "b"]
    assert shard_of(files, None, "worker", 1, 2) == ["a", "b", "c", "d", "e"]
    assert shard_of(files, "byWorker", "worker", 0, 2) == ["a", "c", "e"]
    assert shard_of(files, "byWorker", "worker", 1, 2) == ["b", "d"]
    assert shard_of(files, "byWorker", "worker", 4, 5) == ["e"]
    assert shard_of(files, "byWorker", "worker", 2, 6) == ["c"]
    assert shard_of(files, "byWorker", "worker", 5, 6) == []  # more workers than files
    assert shard_of(files, "byWorker", "ps", 0, 2) == []
    assert shard_of(files, "byWorker", "chief", 0, 2) == sorted(files)
    assert shard_of(files, "byWorker", "evaluator", 0, 2) == sorted(files)
    # Every file goes to exactly one worker.
    for n in range(1, 7):
        shards = [shard_of(files, "byWorker", "worker", i, n) for i in range(n)]
        assert sorted(f for shard in shards for f in shard) == sorted(files)


def test_placements_give_each_replica_its_shard_of_s3_and_hdfs_alike() -> None:
    s3 = StoreRef(S3Source("b", "p/"))
    objects = [RemoteObject(f"p/{n}", 1, "e", 0.0) for n in ("b/2", "a", "b/1")]
    assert placements(objects, s3, None, [("worker", 0)], 1) == {"": objects}
    laid = placements(objects, s3, "byWorker", [("worker", 0), ("worker", 1), ("ps", 0)], 2)
    assert {k: [o.key for o in v] for k, v in laid.items()} == {
        "worker-0": ["p/a", "p/b/2"],
        "worker-1": ["p/b/1"],
        "ps-0": [],
    }
    hdfs = StoreRef(HdfsSource("nn", 8020, "/d"))
    files = [RemoteObject(f"/d/{n}", 1, "mtime:1", 0.0) for n in ("x", "y", "z")]
    laid = placements(files, hdfs, "byWorker", [("chief", 0), ("worker", 0), ("worker", 1)], 2)
    assert {k: [o.key for o in v] for k, v in laid.items()} == {
        "chief-0": ["/d/x", "/d/y", "/d/z"],
        "worker-0": ["/d/x", "/d/z"],
        "worker-1": ["/d/y"],
    }


def test_an_hdfs_user_comes_from_a_file_or_the_credentials_json() -> None:
    user = parse_credentials("HADOOP_USER_NAME=alice\n", "creds")
    assert user == HdfsCredentials("alice")
    assert "alice" not in repr(user)
    assert credentials_from_json(user.to_json()) == user
    s3 = parse_credentials("aws_access_key_id = AK\naws_secret_access_key = SK\n", "c")
    assert credentials_from_json(s3.to_json()) == s3


def test_objects_land_below_the_data_folder_only() -> None:
    assert relative_path("p/", "p/a/b.npz") == PurePosixPath("a/b.npz")
    assert relative_path("p/", "p/dir/") is None  # a folder marker
    for key in ("p/../x", "p/a//b", "p/./a"):
        with pytest.raises(ValueError, match="plain path"):
            relative_path("p/", key)


def test_progress_line() -> None:
    assert progress_text(0, 8 * MiB, 0.0) == "staging data: 0.0 of 8.0 MiB"
    assert progress_text(4 * MiB, 8 * MiB, 2.0) == (
        "staging data: 4.0 of 8.0 MiB, 2.0 MiB/s, 2 s left"
    )
    assert progress_text(3 * GiB, 8 * GiB, 10.0).startswith("staging data: 3.0 of 8.0 GiB, 307.2")
    assert progress_text(8 * MiB, 8 * MiB, 4.0) == "staging data: 8.0 of 8.0 MiB, 2.0 MiB/s"


def test_through_the_server_a_source_names_its_team_secret() -> None:
    job = job_with({"source": "s3://bkt/p"})
    assert [p.field for p in server_problems(job)] == ["spec.storage.data.credentials"]
    named = job_with({"source": "s3://bkt/p", "credentials": "store-keys"})
    assert server_problems(named) == []
    assert dump_job(named).count("store-keys") == 1  # the name, never a value
    # An engine that does not stage sources (a cluster) refuses the source itself.
    refused = server_problems(named, data_sources=False)
    assert [p.field for p in refused] == ["spec.storage.data.source"]
    # HDFS alike: the team's secret holds the user it reads as.
    hdfs = job_with({"source": "hdfs://nn:8020/d"})
    assert [p.field for p in server_problems(hdfs)] == ["spec.storage.data.credentials"]
    assert server_problems(job_with({"source": "hdfs://nn:8020/d", "credentials": "u"})) == []


def test_a_secret_of_the_wrong_kind_is_named() -> None:
    from tfkube.engines import S3Credentials, credentials_problem
    from tfkube.server.team_secrets import value_problems

    hdfs, s3 = parse_source("hdfs://nn:8020/d"), parse_source("s3://bkt/p")
    keys, user = S3Credentials("AK", "SK"), HdfsCredentials("alice")
    assert credentials_problem(hdfs, user) is None
    assert credentials_problem(s3, keys) is None
    assert "hadoop_user_name" in (credentials_problem(hdfs, keys) or "")
    assert "access keys" in (credentials_problem(s3, user) or "")
    assert value_problems("hdfs-user", "", "", "alice") == []
    assert [f for f, _m in value_problems("x-y", "AK", "", "alice")] == ["hadoop_user_name"]
    assert [f for f, _m in value_problems("x-y", "", "", " ")] == ["hadoop_user_name"]
    assert [f for f, _m in value_problems("x-y", "AK", "", None)] == ["secret_access_key"]


def test_a_secret_name_is_checked_and_goes_with_a_source() -> None:
    with pytest.raises(SpecError) as caught:
        job_with({"source": "s3://bkt/p", "credentials": "Bad Name"})
    assert [e.field for e in caught.value.errors] == ["spec.storage.data.credentials"]
    assert "secret's name" in str(caught.value)
    with pytest.raises(SpecError, match="credentials goes with source"):
        job_with({"credentials": "keys"})


def test_a_cluster_refuses_a_data_source_no_server_stages() -> None:
    """`tfkube render`, `tfkube submit --engine kubernetes`: no server stages it (the
    server's jobs carry its data door: tests/unit/test_served_data.py)."""
    from tfkube.render import RenderOptions, render_job

    with pytest.raises(SpecError) as caught:
        render_job(job_with({"source": "s3://bkt/p"}), RenderOptions(namespace="team-a"))
    assert [e.field for e in caught.value.errors] == ["spec.storage.data.source"]
    assert "claimName" in str(caught.value)
    assert "tfkube server" in str(caught.value)


def test_the_form_takes_a_source_its_endpoint_and_the_team_secret() -> None:
    from tfkube.spec import JobForm, form_errors, form_job

    form = JobForm(
        name="f",
        workers=1,
        code="c",
        data_source="s3://bkt/p",
        data_endpoint="http://127.0.0.1:8333",
        data_secret="store-keys",
    )
    data = form_job(form).spec.storage.data
    assert (data.source, data.endpoint, data.credentials) == (
        "s3://bkt/p",
        "http://127.0.0.1:8333",
        "store-keys",
    )
    assert (
        form_job(JobForm(name="f", workers=1, code="c", data_source=" ")).spec.storage.data.source
        is None
    )
    with pytest.raises(SpecError) as caught:
        form_job(
            JobForm(name="f", workers=1, code="c", data_source="s3://bkt/p", data_secret="A B")
        )
    assert [e.field for e in caught.value.errors] == ["data_secret"]
    with pytest.raises(SpecError) as caught:
        form_job(JobForm(name="f", workers=1, code="c", data_source="ftp://x"))
    assert [e.field for e in caught.value.errors] == ["data_source"]
    # A server's refusal after the job was made is named in the form's fields too.
    later = SpecError([FieldError("spec.storage.data.endpoint", "no")], "job 'f'")
    assert [e.field for e in form_errors(later).errors] == ["data_endpoint"]


def test_a_fetch_resumes_after_the_bytes_a_staging_cut_short_left() -> None:
    assert resume_from(0, 10 * MiB) == 0  # nothing there: from the start
    assert resume_from(3 * MiB, 10 * MiB) == 3 * MiB  # goes on after what landed
    assert resume_from(10 * MiB, 10 * MiB) == 0  # whole but never checked: again
    assert resume_from(11 * MiB, 10 * MiB) == 0  # longer than the object: not its bytes


def test_the_cache_bound_is_a_share_of_the_disk_a_size_or_off() -> None:
    disk = 100 * GiB
    assert cache_limit(None, disk) == 20 * GiB  # the default: a fifth of the disk
    assert cache_limit("50%", disk) == 50 * GiB
    assert cache_limit("500MiB", disk) == 500 * MiB
    assert cache_limit("1.5 GiB", disk) == int(1.5 * GiB)
    assert cache_limit("off", disk) is None
    for bad in ("lots", "0%", "150%", "-1GiB", "5GB"):
        with pytest.raises(ValueError, match=r"TFKUBE_DATA_CACHE_LIMIT.*20%"):
            cache_limit(bad, disk)


def test_eviction_takes_the_least_recently_used_that_no_job_shows() -> None:
    now = 10_000.0

    def entry(name: str, used: float, in_use: bool = False) -> CacheEntry:
        return CacheEntry(name, MiB, used, in_use)

    entries = [
        entry("new", now - 700),
        entry("oldest-but-shown", now - 5000, in_use=True),
        entry("old", now - 3000),
        entry("older", now - 4000),
        entry("just-found-cached", now - 10),  # a staging now is about to show it
    ]
    assert evictions(entries, 5 * MiB, now) == []  # under the bound: nothing
    assert evictions(entries, 3 * MiB, now) == ["older", "old"]
    # Everything else is shown or recent: fewer than asked, never those.
    assert evictions(entries, 0, now) == ["older", "old", "new"]
