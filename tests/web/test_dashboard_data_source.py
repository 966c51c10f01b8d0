"""The new-job form's data source (issue 19), in a real Chromium against a real server
(local engine, as root: the job runs confined) and a real S3-compatible store (SeaweedFS
on loopback; the server may reach it: `--allow-fetch-from 127.0.0.1/32`). bob fills the
four fields and, in the advanced section, the source, the store's endpoint and his team's
secret (offered by name); a prefix with nothing under it is refused at that field, before
anything is queued; the right one starts a job whose replica reads the staged files."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import TAG  # tests/conftest.py
from s3store import S3Store
from server._server import ServerProc, env_with, first_admin, free_port
from server.conftest import stop_server, targz, upload, wait_job

from ._browser import poll, shot, sign_in
from .conftest import PASSWORD, Site

RUN = '#!/bin/sh\ncd "$TFKUBE_DATA_DIR" && find . -type f | sort | sed "s/^/seen: /"\n'


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """This module's server: it may reach the store on 127.0.0.1 for a member."""
    tmp = tmp_path_factory.mktemp("web-data")
    tag = uuid.uuid4().hex
    extra = ["--cpus", "2", "--allow-fetch-from", "127.0.0.1/32"]
    server = ServerProc(tmp / "data", free_port(), None, env_with(TAG, tag, tmp / "home"), extra)
    server.start()
    admin = first_admin(server, "ada")
    try:
        yield Site(server, tag)
    finally:
        stop_server(server, admin, tag)


def test_a_job_from_the_form_reads_its_data_from_the_store(
    site: Site, laptop: Any, s3_store: S3Store
) -> None:
    bucket = s3_store.bucket()
    s3_store.put(bucket, "digits/train.csv", b"1,2,3\n")
    s3_store.put(bucket, "digits/test/part-0.csv", b"4,5,6\n")
    admin = site.api("ada")
    try:
        admin.new_team("vision")
        admin.new_user("bob")
        admin.add_member("vision", "bob", "member")
        admin.ok(
            admin.post(
                "/api/v1/teams/vision/secrets",
                json={
                    "name": "store-keys",
                    "access_key_id": s3_store.access_key,
                    "secret_access_key": s3_store.secret_key,
                },
            ),
            201,
        )
    finally:
        admin.close()
    bob = site.api("bob")
    try:
        _form_job(site, laptop, s3_store, bucket, bob)
    finally:
        bob.close()


def _form_job(site: Site, laptop: Any, s3_store: S3Store, bucket: str, bob: Any) -> None:
    bob.ok(upload(bob, "vision", "reader", targz({"run.sh": RUN})), 201)

    page = laptop.new_page()
    sign_in(page, site.url, "bob", PASSWORD)
    page.goto("/jobs/new")
    page.locator("#name").fill("from-s3")
    page.get_by_label("Workers").fill("1")
    page.locator("#code").select_option("reader:1")
    page.locator("details.advanced summary").click()
    offered = page.locator("#data-secrets option").evaluate_all("os => os.map(o => o.value)")
    assert offered == ["store-keys"]
    page.get_by_label("Source").fill(f"s3://{bucket}/nothing-here/")
    page.get_by_label("Store endpoint (empty: AWS)").fill(s3_store.endpoint)
    page.get_by_label("Team secret").fill("store-keys")
    page.get_by_role("button", name="Start job").click()
    error = page.locator('[data-error-for="data_source"]')
    poll("the source's error", lambda: "nothing there" in error.inner_text(), 60)
    shot(page, "data-source-refused")
    assert bob.get("/api/v1/jobs").json()["items"] == []  # nothing was queued

    page.get_by_label("Source").fill(f"s3://{bucket}/digits/")
    page.get_by_role("button", name="Start job").click()
    page.wait_for_url(re.compile(r".*/jobs/[0-9a-f]{16}$"))
    job_id = page.url.rsplit("/", 1)[1]
    done = wait_job(bob, job_id, {"Succeeded", "Failed"}, timeout=180)
    assert done["phase"] == "Succeeded", done
    log = bob.get(f"/api/v1/jobs/{job_id}/logs/worker-0").text
    assert "seen: ./train.csv" in log, log
    assert "seen: ./test/part-0.csv" in log, log
    assert "credentials: store-keys" in str(done["spec"])
    assert s3_store.secret_key not in str(done)
