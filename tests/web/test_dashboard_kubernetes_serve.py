"""The job page's Serve on a server on the Kubernetes engine offers the model servers the
cluster can run (issue 18 point 4), in Chromium, against the real control plane.

The platform of tests/cluster/test_server_kubernetes.py (the server with its install's
RBAC, a team namespace, its outputs claim); a KWOK pod cannot train, so the job's export
is written where its replicas would have written it (the claim's folder the server reads).
The page offers TensorFlow Serving (the server's default here) and tfkube's own model
server; the member picks tfkube's, and the model server is made with it: its Deployment
runs tfkube's image, the API and the Models page say `tfkube`. The local engine's page
offers no choice (tests/web/test_dashboard.py serves there). The Models page's Roll
control rolls a model server to another of the job's exports and back (issue 20 point 5).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from cluster import test_server_kubernetes as on_kube
from cluster._support import wait_for
from server._server import PASSWORD

from ._browser import LAPTOP, chromium, sign_in

platform = on_kube.platform
team = on_kube.team


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


def test_serve_offers_the_clusters_runtimes(
    platform: on_kube.Platform, team: on_kube.Team, browser: Any
) -> None:
    api = team.member
    job = on_kube.submit_manifest(team, on_kube.manifest("served"))
    version = platform.tmp / "data" / "teams" / team.name / "outputs" / "served" / "export" / "3"
    version.mkdir(parents=True)
    (version / "saved_model.pb").write_bytes(b"\x08\x01")
    context = browser.new_context(viewport=LAPTOP, base_url=platform.server.url)
    context.set_default_timeout(30_000)
    try:
        page = context.new_page()
        sign_in(page, platform.server.url, api.name, PASSWORD)
        page.goto(f"/jobs/{job['id']}")
        choice = page.get_by_label("Model server")
        options = choice.locator("option")
        assert options.all_inner_texts() == [
            "TensorFlow Serving (its image)",
            "tfkube's model server (tfkube's image)",
        ]
        assert choice.input_value() == "tensorflow-serving"  # the server's default here
        choice.select_option("tfkube")
        page.get_by_role("button", name="Serve").click()
        page.wait_for_url("**/models*")
        row = page.locator("tr[data-model='served']")
        assert row.locator("[data-runtime]").inner_text() == "tfkube"
    finally:
        context.close()
    listed = api.ok(api.get("/api/v1/model-servers"))
    (made,) = [s for s in listed if s["job_id"] == job["id"]]
    assert made["runtime"] == "tfkube"
    assert made["version"] is None  # the latest, and newer ones
    apps = client.AppsV1Api(platform.kube.api_client)

    def deployment() -> Any:
        found = apps.list_namespaced_deployment(
            team.namespace, label_selector="tfkube.io/component=model-server"
        ).items
        return found[0] if found else None

    made_deployment = wait_for("the model server's Deployment", deployment, 30)
    container = made_deployment.spec.template.spec.containers[0]
    assert "tensorflow/serving" not in container.image
    assert container.command == ["tfkube-modelserver"]  # the native model server
    api.ok(api.post(f"/api/v1/model-servers/{made['id']}/stop"))
    api.ok(api.delete(f"/api/v1/jobs/{job['id']}"), 204)


def test_roll_to_a_version_from_the_models_page(
    platform: on_kube.Platform, team: on_kube.Team, browser: Any
) -> None:
    """The Models page's Roll: a version chosen among the job's exports (or `latest`)
    rolls the model server (`PATCH`, issue 20 point 5); its Deployment's template carries
    the version, the row says it is pinned, and back to the latest the same way. The
    choice survives the list's periodic refresh while it is being made."""
    api = team.member
    job = on_kube.submit_manifest(team, on_kube.manifest("rolled"))
    export = platform.tmp / "data" / "teams" / team.name / "outputs" / "rolled" / "export"
    for version in (3, 4):
        (export / str(version)).mkdir(parents=True)
        (export / str(version) / "saved_model.pb").write_bytes(b"\x08\x01")
    made = api.ok(
        api.post(f"/api/v1/jobs/{job['id']}/model-servers", json={"runtime": "tfkube"}), 201
    )
    apps = client.AppsV1Api(platform.kube.api_client)

    def template_version(want: str) -> Any:
        found = apps.read_namespaced_deployment("rolled-serving", team.namespace)
        seen = (found.spec.template.metadata.annotations or {}).get("tfkube.io/model-version")
        return found if seen == want else None

    wait_for("the model server's Deployment", lambda: template_version("latest"), 30)
    context = browser.new_context(viewport=LAPTOP, base_url=platform.server.url)
    context.set_default_timeout(30_000)
    try:
        page = context.new_page()
        sign_in(page, platform.server.url, api.name, PASSWORD)
        page.goto("/models")
        row = page.locator("tr[data-model='rolled']")
        choice = row.get_by_label("Version to serve")
        assert choice.locator("option").all_inner_texts() == ["latest", "4", "3"]
        assert choice.input_value() == "null"
        choice.select_option("3")
        # The list refreshes itself every few seconds: the choice stays.
        page.evaluate(
            """() => new Promise((done) => {
                document.body.addEventListener("htmx:afterSettle", () => done(true), {once: true});
                htmx.trigger("#model-list", "refresh");
            })"""
        )
        assert row.get_by_label("Version to serve").input_value() == "3"
        row.get_by_role("button", name="Roll").click()
        row.get_by_text("pinned to 3").wait_for()
        wait_for("the Deployment rolled to version 3", lambda: template_version("3"), 30)
        assert api.ok(api.get(f"/api/v1/model-servers/{made['id']}"))["version"] == 3
        row.get_by_label("Version to serve").select_option("null")
        row.get_by_role("button", name="Roll").click()
        row.get_by_text("pinned to 3").wait_for(state="detached")
        wait_for("the Deployment back on the latest", lambda: template_version("latest"), 30)
        assert api.ok(api.get(f"/api/v1/model-servers/{made['id']}"))["version"] is None
    finally:
        context.close()
    api.ok(api.post(f"/api/v1/model-servers/{made['id']}/stop"))
    api.ok(api.delete(f"/api/v1/jobs/{job['id']}"), 204)
