"""The dashboard's job page with 1,000 replicas, in a real Chromium: `tfkube server
--engine kubernetes` on the test control plane, the operator out of cluster, one job of
10 PS + 990 workers as fake pods (KWOK). The fake nodes hold about 550 pods, so part of
the job runs and the rest waits with the scheduler's reason: the page must show both,
grouped by role, and stay usable (filter by state, page, find one replica)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes.client.exceptions import ApiException

from conftest import TAG  # tests/conftest.py
from server._server import PASSWORD, Api, ServerProc, api_for, env_with, free_port
from web._browser import LAPTOP, chromium, poll, shot
from web._scale import big_job_manifest, upload_tiny, wait_running

from ._support import KubeCluster, Operator

NAMESPACE = "tfkube-scale"
PS, WORKERS = 10, 990


@pytest.fixture(scope="module")
def big_job(
    crd: KubeCluster, operator_kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProc, str]]:
    kube_cluster = crd
    tmp = tmp_path_factory.mktemp("dash-scale")
    tag = uuid.uuid4().hex
    server = ServerProc(
        tmp / "data",
        free_port(),
        None,
        env_with(TAG, tag, tmp / "home"),
        extra=["--engine", "kubernetes", "--kubeconfig", str(kube_cluster.kubeconfig)],
    )
    server.start()
    operator = None
    admin: Api | None = None
    try:
        r = httpx.post(
            f"{server.url}/api/v1/setup",
            json={"token": server.setup_token, "name": "admin", "password": PASSWORD},
            timeout=60,  # the default team may wait for its namespace still being deleted
        )
        assert r.status_code == 201, r.text
        admin = api_for(server.url, "admin")
        admin.new_team("scale")  # namespace tfkube-scale, made by the server
        admin.new_user("erin")
        admin.add_member("scale", "erin", "member")
        operator = Operator(kube_cluster, NAMESPACE, tmp / "operator.log", operator_kubeconfig)
        operator.start()
        upload_tiny(admin, "scale")
        # The job asks for no claim: nothing to bind (no provisioner here).
        job = admin.ok(
            admin.post(
                "/api/v1/teams/scale/jobs",
                json={"manifest": big_job_manifest("wide", PS, WORKERS)},
            ),
            201,
        )
        wait_running(admin, job["id"], 400, 600)
        yield server, job["id"]
    finally:
        if admin is not None:
            for item in admin.get("/api/v1/jobs", params={"limit": 500}).json().get("items", []):
                admin.delete(f"/api/v1/jobs/{item['id']}")
            admin.close()
        if operator is not None:
            operator.kill()
        server.stop()
        try:
            kube_cluster.core.delete_namespace(NAMESPACE, propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise


def words(locator: Any) -> str:
    return " ".join((locator.text_content() or "").split())


def test_job_page_with_a_thousand_replicas(big_job: tuple[ServerProc, str]) -> None:
    server, job_id = big_job
    with chromium() as browser:
        context = browser.new_context(viewport=LAPTOP, base_url=server.url)
        context.set_default_timeout(60_000)
        page = context.new_page()
        page.goto(f"/login?next=/jobs/{job_id}")
        page.get_by_label("User name").fill("erin")
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(lambda url: url.endswith(f"/jobs/{job_id}"))

        summary = page.locator("#job-summary")
        assert "of 1,000" in words(summary)
        table = page.locator("#replica-table")
        roles = table.get_by_role("navigation", name="Replicas per role")
        assert "All 1,000" in words(roles)
        assert "Parameter servers 10" in words(roles)
        assert "Workers 990" in words(roles)
        rows = page.locator("table.replicas tbody tr:not(.group)")
        assert rows.count() == 50
        assert page.locator("table.replicas tr.group").count() == 2  # PS, then workers
        shot(page, "50-job-1000-replicas")

        states = table.get_by_role("navigation", name="Replicas per state")
        pending = states.get_by_role("link", name="Pending")
        if pending.count():  # the nodes hold ~550 pods: the rest wait, and say why
            pending.click()
            poll("the Pending filter", lambda: "Pending" in words(rows.first), 30)
            assert rows.first.locator("td.why").inner_text().strip()
            shot(page, "51-job-1000-pending")
            states.get_by_role("link", name="Pending").click()  # off again

        pager = table.get_by_role("navigation", name="Replica pages")
        poll("every replica", lambda: "of 1,000" in words(pager), 30)
        pager.get_by_role("link", name="Next").click()
        poll(
            "page 2",
            lambda: "51" in words(table.get_by_role("navigation", name="Replica pages")),
            30,
        )
        assert words(rows.first).startswith("worker-40")

        # A refresh on its way when the user starts typing lands during the search's
        # 300 ms debounce (held here, then answered at once): what they typed stays and
        # the search still runs.
        held: list[tuple[Any, Any]] = []

        def hold_one_refresh(route: Any) -> None:
            if held or "worker-987" in route.request.url:
                route.continue_()
            else:
                held.append((route, route.fetch()))

        def refresh_held() -> bool:
            page.wait_for_timeout(250)  # Playwright runs route handlers while it waits
            return bool(held)

        page.route("**/part/replicas*", hold_one_refresh)
        poll("a refresh of the replica table", refresh_held, 30)
        search = page.get_by_label("Find a replica")
        search.fill("worker-987")
        route, response = held[0]
        route.fulfill(response=response)
        poll("the search", lambda: rows.count() == 1, 30)
        assert "worker-987" in words(rows.first)
        assert search.input_value() == "worker-987"
        page.unroute("**/part/replicas*")
        context.close()
