"""Data sources (issue 19), the pure parts: the job file's `spec.storage.data.source` and
`endpoint` rules (errors naming the field and the fix), credentials files, the cache key,
where an object lands, the progress line; a server's job naming its team's secret; and
the refusal where staging is not built yet (Kubernetes)."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import pytest

from tfkube.engines._data import (
    GiB,
    MiB,
    RemoteObject,
    StoreRef,
    cache_key,
    parse_credentials,
    progress_text,
    relative_path,
)
from tfkube.server.jobs.forms import server_problems
from tfkube.spec import FieldError, S3Source, SpecError, TFJob, dump_job, parse_job, parse_source


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
        ({"source": "hdfs://nn:8020/data"}, "spec.storage.data.source", "HDFS"),
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


def test_a_secret_name_is_checked_and_goes_with_a_source() -> None:
    with pytest.raises(SpecError) as caught:
        job_with({"source": "s3://bkt/p", "credentials": "Bad Name"})
    assert [e.field for e in caught.value.errors] == ["spec.storage.data.credentials"]
    assert "secret's name" in str(caught.value)
    with pytest.raises(SpecError, match="credentials goes with source"):
        job_with({"credentials": "keys"})


def test_a_cluster_refuses_data_sources_until_it_can_stage_them() -> None:
    from tfkube.render import RenderOptions, render_job

    with pytest.raises(SpecError) as caught:
        render_job(job_with({"source": "s3://bkt/p"}), RenderOptions(namespace="team-a"))
    assert [e.field for e in caught.value.errors] == ["spec.storage.data.source"]
    assert "claimName" in str(caught.value)


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
