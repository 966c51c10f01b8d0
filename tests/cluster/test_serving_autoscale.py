"""An autoscaled model server on Kubernetes through the platform (issue 20 point 5), on
KWOK's fake pods: `autoscale` on `POST /api/v1/jobs/<id>/model-servers` makes an
autoscaling/v2 HorizontalPodAutoscaler, owned by the model server's Deployment (the
garbage collector deletes it with it), with the server's own RBAC; the real
kube-controller-manager's autoscaler scales the Deployment to its minReplicas (no metrics
are needed below the minimum); a version roll keeps its replica count; stopping removes
it. What a member may ask for is bounded by the server's `--serving-max-replicas` and the
team's quota (tests/security/test_serving_autoscale_bounds.py).

CPU load scaling real pods up and down (a kubelet and metrics-server) is
tests/cluster/test_real_node_serving.py's; the rendering and the rules are tests/unit/
test_serving_autoscale.py's.
"""

from __future__ import annotations

from typing import Any

from cluster import test_server_kubernetes as on_kube
from cluster._support import wait_for
from tfkube.kube.resources import DEPLOYMENT, HORIZONTAL_POD_AUTOSCALER
from tfkube.kube.rest import Kube

platform = on_kube.platform
team = on_kube.team


def fake_export(platform: on_kube.Platform, team: on_kube.Team, job: str, version: int) -> None:
    """An export where the job's replicas would have written it (a KWOK pod cannot
    train): the claim's folder the server reads."""
    outputs = platform.tmp / "data" / "teams" / team.name / "outputs"
    folder = outputs / job / "export" / str(version)
    folder.mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"\x08\x01")


def objects(kube: Kube, ns: str, name: str) -> tuple[Any, Any]:
    return kube.get(DEPLOYMENT, ns, name), kube.get(HORIZONTAL_POD_AUTOSCALER, ns, name)


def test_an_autoscaled_model_server_is_scaled_by_its_autoscaler_and_rolls(
    platform: on_kube.Platform, team: on_kube.Team
) -> None:
    api, ns = team.member, team.namespace
    kube = Kube(platform.kube.api_client)
    job = on_kube.submit_manifest(team, on_kube.manifest("scaled"))
    fake_export(platform, team, "scaled", 3)
    fake_export(platform, team, "scaled", 4)
    asked = {
        "minReplicas": 2,
        "maxReplicas": 3,
        "targetCPUUtilization": 50,
        "scaleDownStabilizationSeconds": 30,
    }
    body = {"version": 3, "runtime": "tfkube", "cpu": "500m", "autoscale": asked}
    server = api.ok(api.post(f"/api/v1/jobs/{job['id']}/model-servers", json=body), 201)
    assert server["autoscale"] == asked

    deployment, hpa = objects(kube, ns, "scaled-serving")
    assert deployment is not None
    assert hpa is not None
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "scaled-serving",
    }
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 3)
    (metric,) = hpa["spec"]["metrics"]
    assert metric["resource"] == {
        "name": "cpu",
        "target": {"type": "Utilization", "averageUtilization": 50},
    }
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 30
    (owner,) = hpa["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Deployment", "scaled-serving")
    assert owner["uid"] == deployment["metadata"]["uid"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["requests"]["cpu"] == "500m"

    # The autoscaler (kube-controller-manager's) lifts the Deployment to minReplicas; the
    # API shows its replicas.
    def scaled(ready: int, desired: int) -> dict[str, Any] | None:
        seen = api.ok(api.get(f"/api/v1/model-servers/{server['id']}"))
        return seen if (seen["replicas"], seen["desired_replicas"]) == (ready, desired) else None

    seen = wait_for("2 replicas ready, as the autoscaler chose", lambda: scaled(2, 2), 120, 0.5)
    assert seen["status"] == "Ready"
    assert kube.get(DEPLOYMENT, ns, "scaled-serving")["spec"]["replicas"] == 2

    # A roll applies the Deployment again: a new template, the autoscaler's count kept.
    api.ok(api.patch(f"/api/v1/model-servers/{server['id']}", json={"version": 4}))
    rolled = kube.get(DEPLOYMENT, ns, "scaled-serving")
    assert rolled["spec"]["replicas"] == 2
    assert rolled["spec"]["template"]["metadata"]["annotations"]["tfkube.io/model-version"] == "4"

    def rolled_out() -> dict[str, Any] | None:
        d = kube.get(DEPLOYMENT, ns, "scaled-serving")
        status = d.get("status") or {}
        done = (
            status.get("observedGeneration") == d["metadata"]["generation"]
            and status.get("updatedReplicas") == 2
            and status.get("readyReplicas") == 2
            and status.get("replicas") == 2
        )
        return d if done else None

    after = wait_for("both replicas rolled to version 4", rolled_out, 120, 0.5)
    assert after["spec"]["replicas"] == 2
    assert kube.get(HORIZONTAL_POD_AUTOSCALER, ns, "scaled-serving") is not None

    # Owned: deleting the Deployment alone deletes its autoscaler (the garbage collector).
    kube.request("DELETE", DEPLOYMENT.url(ns, "scaled-serving"))
    wait_for(
        "the autoscaler deleted with its Deployment",
        lambda: kube.get(HORIZONTAL_POD_AUTOSCALER, ns, "scaled-serving") is None,
        120,
        0.5,
    )
    stopped = api.ok(api.post(f"/api/v1/model-servers/{server['id']}/stop"))
    assert stopped["status"] == "Stopped"


def test_a_stopped_autoscaled_model_server_leaves_nothing(
    platform: on_kube.Platform, team: on_kube.Team
) -> None:
    api, ns = team.member, team.namespace
    kube = Kube(platform.kube.api_client)
    job = on_kube.submit_manifest(team, on_kube.manifest("stopped"))
    fake_export(platform, team, "stopped", 1)
    body = {"runtime": "tfkube", "cpu": "100m", "autoscale": {"maxReplicas": 2}}
    server = api.ok(api.post(f"/api/v1/jobs/{job['id']}/model-servers", json=body), 201)
    hpa = kube.get(HORIZONTAL_POD_AUTOSCALER, ns, "stopped-serving")
    assert hpa["spec"]["minReplicas"] == 1
    assert hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 70
    assert "behavior" not in hpa["spec"]  # Kubernetes' default scale-down
    api.ok(api.post(f"/api/v1/model-servers/{server['id']}/stop"))
    assert objects(kube, ns, "stopped-serving") == (None, None)
