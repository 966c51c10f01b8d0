"""The job page's Workers control (`POST /api/v1/jobs/{id}/scale`), in a real Chromium
against a real server (local engine): bob grows his running PS job from 2 to 3 workers
and the replicas table shows worker-2 running; a size of 0, and one past the machine's
free CPUs, are refused at the field; a job without PS offers no control."""

from __future__ import annotations

from typing import Any

from server.conftest import targz, upload, wait_job

from ._browser import poll, shot, sign_in
from .conftest import PASSWORD, Site, two_teams

IDLE = {"run.sh": '#!/bin/sh\necho "$TFKUBE_ROLE-$TFKUBE_INDEX up"\nexec sleep 600\n'}


def _running(api: Any, job_id: str) -> set[str]:
    job = api.ok(api.get(f"/api/v1/jobs/{job_id}"))
    return {r["key"] for r in job["replicas"] if r["state"] == "Running"}


def test_the_job_page_scales_a_running_ps_job(site: Site, laptop: Any) -> None:
    bob, carol = two_teams(site)
    carol.close()
    try:
        bob.ok(upload(bob, "vision", "idle", targz(IDLE)), 201)
        page = laptop.new_page()
        sign_in(page, site.url, "bob", PASSWORD)
        # The site's machine has 2 CPUs: one job at a time (0.5 CPU per replica).
        jobs = {}
        for name, ps in (("fixed", 0), ("grows", 1)):
            body = {"name": name, "workers": 2, "ps": ps, "code": "idle"}
            jobs[name] = bob.ok(bob.post("/api/v1/teams/vision/jobs", json=body), 201)["id"]
            wait_job(bob, jobs[name], {"Running"})
            if name == "fixed":
                page.goto(f"/jobs/{jobs['fixed']}")
                page.locator("#replicas").wait_for()
                assert page.locator("#scale-form").count() == 0
                bob.ok(bob.post(f"/api/v1/jobs/{jobs['fixed']}/stop"))
        expected = {"ps-0", "worker-0", "worker-1"}
        poll("grows runs", lambda: _running(bob, jobs["grows"]) == expected, 60)

        page.goto(f"/jobs/{jobs['grows']}")
        workers = page.get_by_label("Workers", exact=True)
        assert workers.input_value() == "2"
        workers.fill("0")
        page.get_by_role("button", name="Scale").click()
        error = page.locator('#scale-form [data-error-for="workers"]')
        poll("the size's error", lambda: "out of range" in error.inner_text(), 30)

        workers.fill("5")  # 1 CPU more than the machine has free
        page.get_by_role("button", name="Scale").click()
        poll("the machine's refusal", lambda: "the machine has" in error.inner_text(), 30)

        workers.fill("3")
        page.get_by_role("button", name="Scale").click()
        poll(
            "worker-2 running",
            lambda: _running(bob, jobs["grows"]) == {"ps-0", "worker-0", "worker-1", "worker-2"},
            60,
        )
        table = page.locator("#replicas")
        poll("worker-2 in the table", lambda: "worker-2" in table.inner_text(), 30)
        shot(page, "job-scaled")
        assert error.inner_text() == ""
        events = [e["message"] for e in bob.ok(bob.get(f"/api/v1/jobs/{jobs['grows']}/events"))]
        assert any("scaled the job from 2 to 3 workers" in m for m in events), events
        bob.ok(bob.post(f"/api/v1/jobs/{jobs['grows']}/stop"))
    finally:
        bob.close()
