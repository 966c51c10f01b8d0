"""A data set uploaded as an artifact (kind data) and named by a job: unpacked into the
job's data folder before it starts, shown with the job, kept from deletion while the job
runs, carried over by a copy."""

from __future__ import annotations

from .conftest import TeamCtx, targz, upload, wait_job

RUN = '#!/bin/sh\nread -r line < "$TFKUBE_DATA_DIR/digits/hello.txt"\necho "data: $line"\n'


def test_a_job_reads_its_uploaded_data_set(team: TeamCtx) -> None:
    api = team.member
    api.ok(upload(api, team.name, "reader", targz({"run.sh": RUN})), 201)
    data = api.ok(
        upload(api, team.name, "digits", targz({"digits/hello.txt": "42 digits\n"}), kind="data"),
        201,
    )
    assert data["kind"] == "data"
    body = {"name": "reads", "workers": 1, "code": "reader", "data": "digits"}
    job = api.ok(api.post(f"/api/v1/teams/{team.name}/jobs", json=body), 201)
    assert job["data"] == "digits:1"
    done = wait_job(api, job["id"], {"Succeeded", "Failed"})
    assert done["phase"] == "Succeeded", done
    log = api.get(f"/api/v1/jobs/{job['id']}/logs/worker-0").text
    assert "data: 42 digits" in log
    copy = api.ok(api.post(f"/api/v1/jobs/{job['id']}/copy"), 201)
    assert copy["data"] == "digits:1"
    wait_job(api, copy["id"], {"Succeeded", "Failed"})


def test_an_unknown_data_set_is_named_in_the_error(team: TeamCtx) -> None:
    api = team.member
    api.ok(upload(api, team.name, "reader", targz({"run.sh": RUN})), 201)
    body = {"name": "nodata", "workers": 1, "code": "reader", "data": "missing"}
    r = api.post(f"/api/v1/teams/{team.name}/jobs", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == "data"
    assert "missing" in r.json()["errors"][0]["message"]
    code = api.post(f"/api/v1/teams/{team.name}/jobs", json={**body, "data": "reader"})
    assert code.status_code == 422  # a code artifact is not a data set
