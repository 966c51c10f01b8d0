"""Team secrets and data sources through the server (issue 19), against a real `tfkube
server` (SQLite and PostgreSQL, as root: its jobs run confined) and a real S3-compatible
store (SeaweedFS on loopback, tests/s3store.py; `--allow-fetch-from 127.0.0.1/32` lets
the server reach it for a member):

- team admins store and remove a team's secrets; members list names and times only;
  another team's members are told 404; no answer ever holds a value;
- a job naming the team's secret is checked against the store at submit (a missing
  prefix, a missing secret: 422 naming the field), then staged by its supervisor and read
  by its confined replica from TFKUBE_DATA_DIR (files the team's user can read, never
  write); a copy reads it all from the team's cache; the secret's value is in no answer,
  the stored spec, the job's logs and events, nor the server's log;
- the between-graph example (1 PS, 2 workers, submitted with the form's data fields)
  trains on its shards from the store to its usual accuracy (SQLite only)."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import Any

import pytest

from s3store import S3Store
from server._server import Api, ServerProc, api_for

from .conftest import TeamCtx, targz, upload, wait_job

# The replica lists what it sees, checks it cannot write there, and checksums a file.
RUN = """#!/bin/sh
set -eu
cd "$TFKUBE_DATA_DIR"
find . -type f | sort | sed 's/^/file: /'
echo "uid: $(id -u)"
if ( : > new-file ) 2>/dev/null; then echo "wrote: yes"; else echo "wrote: no"; fi
if ( echo x >> a.bin ) 2>/dev/null; then echo "changed: yes"; else echo "changed: no"; fi
sha256sum a.bin | sed 's/^/sum: /'
"""


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mnist-between-graph"
MIN_ACCURACY = 0.90  # what tests/tf/test_examples.py asks of the example (1,000 steps)
SERVER_ARGS = ["--cpus", "2", "--allow-fetch-from", "127.0.0.1/32"]
"""This module's server may reach the store on 127.0.0.1 for members."""


def team_admin(server: ServerProc, admin: Api, team: str) -> Api:
    name = admin.new_user()
    admin.add_member(team, name, "admin")
    return api_for(server.url, name)


def secret_body(store: S3Store, name: str = "store-keys") -> dict[str, str]:
    return {
        "name": name,
        "access_key_id": store.access_key,
        "secret_access_key": store.secret_key,
    }


def test_team_admins_keep_secrets_members_see_only_names(
    server: ServerProc, admin: Api, team: TeamCtx
) -> None:
    boss = team_admin(server, admin, team.name)
    value = "s3cr3t-" + os.urandom(8).hex()
    body = {"name": "keys", "access_key_id": "AKIDEXAMPLE", "secret_access_key": value}
    path = f"/api/v1/teams/{team.name}/secrets"
    try:
        refused = team.member.post(path, json=body)
        assert refused.status_code == 403, refused.text
        made = boss.post(path, json=body)
        assert made.status_code == 201, made.text
        assert set(made.json()) == {"name", "kind", "created_at", "updated_at"}
        again = boss.post(path, json={**body, "secret_access_key": value + "2"})
        assert again.status_code == 200, again.text  # replaced
        listed = team.viewer.ok(team.viewer.get(path))
        assert [s["name"] for s in listed] == ["keys"]
        assert listed[0]["kind"] == "s3"
        bad = boss.post(path, json={**body, "name": "Not A Name", "secret_access_key": ""})
        assert bad.status_code == 422
        assert {e["field"] for e in bad.json()["errors"]} == {"name", "secret_access_key"}
        bad_value = boss.post(path, json={**body, "name": "ok", "secret_access_key": value + "\n"})
        assert bad_value.status_code == 422
        for answer in (made, again, team.viewer.get(path), bad, bad_value):
            assert value not in answer.text
            assert "AKIDEXAMPLE" not in answer.text

        # Another team's member: the team's secrets do not exist for them.
        other_team = admin.new_team()
        outsider_name = admin.new_user()
        admin.add_member(other_team, outsider_name, "admin")
        outsider = api_for(server.url, outsider_name)
        try:
            assert outsider.get(path).status_code == 404
            assert outsider.post(path, json=body).status_code == 404
            assert outsider.delete(f"{path}/keys").status_code == 404
        finally:
            outsider.close()

        assert team.member.delete(f"{path}/keys").status_code == 403
        assert boss.delete(f"{path}/keys").status_code == 204
        assert boss.delete(f"{path}/keys").status_code == 404
        assert team.viewer.ok(team.viewer.get(path)) == []
    finally:
        boss.close()
    # Nothing of the value reached the server's log, nor the database file in clear.
    assert value not in server.log.read_text()
    database = server.data_dir / "tfkube.db"
    if database.exists():
        assert value.encode() not in database.read_bytes()


def store_secret(server: ServerProc, admin: Api, team: str, store: S3Store) -> None:
    """A team admin of `team` stores the store's credentials as `store-keys`."""
    boss = team_admin(server, admin, team)
    try:
        boss.ok(boss.post(f"/api/v1/teams/{team}/secrets", json=secret_body(store)), 201)
    finally:
        boss.close()


def data_manifest(name: str, bucket: str, store: S3Store, secret: str | None) -> str:
    credentials = f"\n        credentials: {secret}" if secret else ""
    return f"""apiVersion: tfkube.io/v1alpha1
kind: TFJob
metadata:
  name: {name}
spec:
  replicas:
    worker:
      replicas: 1
  code:
    source: artifact:reader
  storage:
    data:
        source: s3://{bucket}/ds/
        endpoint: {store.endpoint}{credentials}
  runPolicy:
    backoffLimit: 0
"""


def test_a_job_reads_s3_data_with_its_team_secret(
    server: ServerProc, admin: Api, team: TeamCtx, s3_store: S3Store
) -> None:
    bucket = s3_store.bucket()
    body = os.urandom(256 * 1024 + 3)
    s3_store.put(bucket, "ds/a.bin", body)
    s3_store.put(bucket, "ds/sub/b.txt", b"hello\n")
    store_secret(server, admin, team.name, s3_store)
    api = team.member
    api.ok(upload(api, team.name, "reader", targz({"run.sh": RUN})), 201)
    jobs = f"/api/v1/teams/{team.name}/jobs"

    # Refused before anything is queued, naming the field.
    no_secret = api.post(jobs, json={"manifest": data_manifest("r0", bucket, s3_store, None)})
    assert no_secret.status_code == 422, no_secret.text
    assert no_secret.json()["errors"][0]["field"] == "spec.storage.data.credentials"
    unknown = api.post(jobs, json={"manifest": data_manifest("r1", bucket, s3_store, "nope")})
    assert unknown.status_code == 422, unknown.text
    assert unknown.json()["errors"][0]["field"] == "spec.storage.data.credentials"
    assert "no secret named 'nope'" in unknown.text
    missing = data_manifest("r2", bucket, s3_store, "store-keys").replace("/ds/", "/nothing/")
    empty = api.post(jobs, json={"manifest": missing})
    assert empty.status_code == 422, empty.text
    assert empty.json()["errors"][0]["field"] == "spec.storage.data.source"
    assert f"s3://{bucket}/nothing/" in empty.text
    assert "nothing there" in empty.text

    job = api.ok(
        api.post(jobs, json={"manifest": data_manifest("reads", bucket, s3_store, "store-keys")}),
        201,
    )
    done = wait_job(api, job["id"], {"Succeeded", "Failed"}, timeout=180)
    assert done["phase"] == "Succeeded", done
    log = api.get(f"/api/v1/jobs/{job['id']}/logs/worker-0").text
    assert "file: ./a.bin" in log, log
    assert "file: ./sub/b.txt" in log, log
    assert "uid: 0" not in log, log  # confined: the team's user, not root
    assert "wrote: no" in log, log  # the data folder is read-only for the team's user
    assert "changed: no" in log, log
    assert f"sum: {hashlib.sha256(body).hexdigest()}" in log, log

    # A copy keeps the source and the secret's name; the data comes from the cache.
    copy = api.ok(api.post(f"/api/v1/jobs/{job['id']}/copy"), 201)
    assert "credentials: store-keys" in copy["spec"]
    copied = wait_job(api, copy["id"], {"Succeeded", "Failed"}, timeout=180)
    assert copied["phase"] == "Succeeded", copied
    events = api.ok(api.get(f"/api/v1/jobs/{copy['id']}/events"))
    staged = [e["message"] for e in events if "data staged" in e["message"]]
    assert staged, events
    assert "0 of 2 objects fetched (0.0 MiB read from the store)" in staged[0]

    # The secret's value is nowhere a member or the server's log could show it.
    answers = [
        api.get(f"/api/v1/jobs/{job['id']}").text,
        api.get(f"/api/v1/jobs/{job['id']}/events").text,
        api.get(f"/api/v1/jobs/{copy['id']}").text,
        api.get("/api/v1/jobs", params={"team": team.name}).text,
        log,
        no_secret.text,
        unknown.text,
        empty.text,
    ]
    for text in answers:
        assert s3_store.secret_key not in text
    assert s3_store.secret_key not in server.log.read_text()
    for path in Path(server.data_dir).rglob("*"):
        if path.is_file() and path.suffix in {".yaml", ".json", ".log", ".txt"}:
            assert s3_store.secret_key.encode() not in path.read_bytes(), path


def digits_npz() -> dict[str, bytes]:
    """The between-graph example's own files (its shards for 2 workers and its test
    split, as it would write them itself), as the store holds them."""
    import numpy as np
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = (x[order] / 16.0).astype(np.float32), y[order].astype(np.int64)
    n_test = len(x) // 5
    arrays = {"digits-test.npz": (x[:n_test], y[:n_test])}
    for shard in range(2):
        train_x, train_y = x[n_test:][shard::2], y[n_test:][shard::2]
        arrays[f"digits-train-{shard}-of-2.npz"] = (train_x, train_y)
    out = {}
    for name, (xs, ys) in arrays.items():
        buffer = io.BytesIO()
        np.savez(buffer, x=xs, y=ys)
        out[name] = buffer.getvalue()
    return out


@pytest.mark.parametrize("platform", ["sqlite"], indirect=True)
def test_the_between_graph_example_trains_on_s3_data(
    server: ServerProc,
    admin: Api,
    team: TeamCtx,
    s3_store: S3Store,
) -> None:
    """TensorFlow once (on SQLite), submitted with the form's fields: 1 PS and 2 workers,
    confined, each worker reading its shard from the staged data (the example writes its
    files only when they are missing: the folder is read-only), to the usual accuracy.
    Not generated for PostgreSQL (TensorFlow runs once): this parametrization overrides
    the module fixture's, so the test reuses the module's SQLite server."""
    bucket = s3_store.bucket()
    files = digits_npz()
    for name, data in files.items():
        s3_store.put(bucket, f"digits/{name}", data)
    store_secret(server, admin, team.name, s3_store)
    api = team.member
    code = {p.name: p.read_text() for p in EXAMPLE.iterdir() if p.suffix in {".sh", ".py"}}
    api.ok(upload(api, team.name, "mnist", targz(code)), 201)
    body = {
        "name": "mnist-s3",
        "workers": 2,
        "ps": 1,
        "code": "mnist",
        "data_source": f"s3://{bucket}/digits/",
        "data_endpoint": s3_store.endpoint,
        "data_secret": "store-keys",
    }
    job = api.ok(api.post(f"/api/v1/teams/{team.name}/jobs", json=body), 201)
    done = wait_job(api, job["id"], {"Succeeded", "Failed"}, timeout=600)
    assert done["phase"] == "Succeeded", done
    for worker in (0, 1):
        log = api.get(f"/api/v1/jobs/{job['id']}/logs/worker-{worker}").text
        assert f"worker {worker}: shard {worker}/2" in log, log
    result = done["result"]
    assert isinstance(result, dict), done
    assert result["test_accuracy"] >= MIN_ACCURACY, result


HDFS_USER = "hdfs-reader-81c2"
"""The HDFS user a team's secret holds: in no answer, log or file the server wrote."""


def hdfs_manifest(name: str, hdfs: Any, path: str, secret: str) -> str:
    endpoint = hdfs.webhdfs.removesuffix("/webhdfs/v1")
    return f"""apiVersion: tfkube.io/v1alpha1
kind: TFJob
metadata:
  name: {name}
spec:
  replicas:
    worker:
      replicas: 2
  code:
    source: artifact:lister
  storage:
    data:
        source: {hdfs.uri}{path}
        endpoint: {endpoint}
        credentials: {secret}
        shard: byWorker
  runPolicy:
    backoffLimit: 0
    successPolicy: AllWorkers
"""


@pytest.mark.parametrize("platform", ["sqlite"], indirect=True)
def test_a_job_reads_its_hdfs_shard_with_its_team_secret(
    server: ServerProc,
    admin: Api,
    team: TeamCtx,
    hdfs_store: Any,
) -> None:
    """An HDFS user as a team secret (kind hdfs); a job naming it is listed at submit (a
    missing path, an S3 secret for an hdfs:// source: 422 naming the field), then each
    confined worker reads its shard (SQLite only: the database plays no part here)."""
    root = f"/server-tests/{team.name}"
    for i in range(3):
        hdfs_store.put(f"{root}/part-{i}", f"part {i}\n".encode())
    boss = team_admin(server, admin, team.name)
    try:
        secrets = f"/api/v1/teams/{team.name}/secrets"
        stored = boss.post(secrets, json={"name": "hdfs-user", "hadoop_user_name": HDFS_USER})
        assert boss.ok(stored, 201)["kind"] == "hdfs"
        boss.ok(boss.post(secrets, json=secret_body_for("s3-keys")), 201)
    finally:
        boss.close()
    api = team.member
    lister = '#!/bin/sh\ncd "$TFKUBE_DATA_DIR" && find . -type f | sort | sed "s/^/file: /"\n'
    api.ok(upload(api, team.name, "lister", targz({"run.sh": lister})), 201)
    jobs = f"/api/v1/teams/{team.name}/jobs"
    missing = api.post(
        jobs, json={"manifest": hdfs_manifest("h0", hdfs_store, root + "/nope", "hdfs-user")}
    )
    assert missing.status_code == 422, missing.text
    assert missing.json()["errors"][0]["field"] == "spec.storage.data.source"
    assert "does not exist" in missing.text
    wrong = api.post(jobs, json={"manifest": hdfs_manifest("h1", hdfs_store, root, "s3-keys")})
    assert wrong.status_code == 422, wrong.text
    assert wrong.json()["errors"][0]["field"] == "spec.storage.data.credentials"
    job = api.ok(
        api.post(jobs, json={"manifest": hdfs_manifest("hr", hdfs_store, root, "hdfs-user")}),
        201,
    )
    done = wait_job(api, job["id"], {"Succeeded", "Failed"}, timeout=180)
    assert done["phase"] == "Succeeded", done
    for i, mine in enumerate([["part-0", "part-2"], ["part-1"]]):
        log = api.get(f"/api/v1/jobs/{job['id']}/logs/worker-{i}").text
        assert [ln.removeprefix("file: ./") for ln in log.splitlines() if "file: " in ln] == mine
    answers = [
        api.get(f"/api/v1/jobs/{job['id']}").text,
        api.get(f"/api/v1/jobs/{job['id']}/events").text,
        api.get(f"/api/v1/teams/{team.name}/secrets").text,
        missing.text,
        wrong.text,
    ]
    assert all(HDFS_USER not in text for text in answers)
    assert HDFS_USER not in server.log.read_text()
    for path in Path(server.data_dir).rglob("*"):
        if path.is_file() and path.suffix in {".yaml", ".json", ".jsonl", ".log", ".txt"}:
            assert HDFS_USER.encode() not in path.read_bytes(), path


def secret_body_for(name: str) -> dict[str, str]:
    return {"name": name, "access_key_id": "AKEXAMPLE", "secret_access_key": "not-used"}
