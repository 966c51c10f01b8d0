"""How many replicas a member may have an autoscaled model server ask for (issue 20 point
5), against the real control plane through a real `tfkube server --engine kubernetes`
(tests/cluster/test_server_kubernetes.py's set-up): a site admin bounds it with the
server's `--serving-max-replicas` (default 4) and the team's quota, which the model server
at its most replicas must fit. Past either, the request is refused with a 422 naming
`autoscale.maxReplicas` and the bound, and nothing is made in the namespace (no
Deployment, no HorizontalPodAutoscaler, no row). A member cannot point the autoscaler at
anything but the model server's own Deployment: `autoscale` has no such field.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from cluster import test_server_kubernetes as on_kube
from cluster.test_serving_autoscale import objects
from tfkube.kube.rest import Kube

platform = on_kube.platform

GI = 2**30


@pytest.fixture(scope="module")
def small_team(platform: on_kube.Platform) -> Iterator[on_kube.Team]:
    """A team whose quota allows 2 CPUs and 4Gi (the site admin's)."""
    made = on_kube.Team(platform, {"cpu": 2, "memory": 4 * GI})
    try:
        made.upload_code("hello", {"run.sh": on_kube.RUN_SH})
        yield made
    finally:
        made.close()


@pytest.mark.parametrize(
    ("resources", "most", "words"),
    [
        ({"cpu": "100m", "memory": "256Mi"}, 5, "more than this server allows (4"),
        ({"cpu": "1", "memory": "256Mi"}, 3, "team's quota"),
        ({"cpu": "100m", "memory": "2Gi"}, 3, "quota of 4Gi"),
        ({}, 3, "quota of 2 CPU"),  # the default replica: 1 CPU, 2Gi
    ],
)
def test_a_member_cannot_ask_for_more_replicas_than_a_site_admin_allows(
    platform: on_kube.Platform,
    small_team: on_kube.Team,
    resources: dict[str, str],
    most: int,
    words: str,
) -> None:
    api, ns = small_team.member, small_team.namespace
    kube = Kube(platform.kube.api_client)
    job = on_kube.submit_manifest(small_team, on_kube.manifest(f"q{uuid.uuid4().hex[:6]}"))
    body = {"runtime": "tfkube", **resources, "autoscale": {"maxReplicas": most}}
    refused = api.post(f"/api/v1/jobs/{job['id']}/model-servers", json=body)
    assert refused.status_code == 422, refused.text
    errors = refused.json()["errors"]
    assert {e["field"] for e in errors} == {"autoscale.maxReplicas"}, errors
    messages = [e["message"].replace(f"team {small_team.name}'s", "team's") for e in errors]
    assert any(words in m for m in messages), messages
    assert api.ok(api.get("/api/v1/model-servers", params={"team": small_team.name})) == []
    name = f"{job['name']}-serving"
    assert objects(kube, ns, name) == (None, None)


def test_the_autoscaler_targets_nothing_but_the_model_servers_deployment(
    platform: on_kube.Platform, small_team: on_kube.Team
) -> None:
    api = small_team.member
    job = on_kube.submit_manifest(small_team, on_kube.manifest(f"t{uuid.uuid4().hex[:6]}"))
    aimed = {"maxReplicas": 2, "scaleTargetRef": {"kind": "Deployment", "name": "tfkube-server"}}
    refused = api.post(
        f"/api/v1/jobs/{job['id']}/model-servers",
        json={"runtime": "tfkube", "cpu": "100m", "autoscale": aimed},
    )
    assert refused.status_code == 422, refused.text
    assert [e["field"] for e in refused.json()["errors"]] == ["autoscale.scaleTargetRef"]
