"""Model servers and notebooks on Kubernetes: every object `render_model_server` and
`render_notebook` produce is accepted by the real API server (server-side dry run, strict
field validation; an autoscaled one's HorizontalPodAutoscaler too), and the server's own
path (server-side apply, read the Deployment, delete by name) creates, reports and removes
them; a notebook's home claim outlives it.

The pods run on KWOK fake nodes (no TensorFlow Serving or Jupyter runs here): the REST
answers of a real model server are tested on this machine (tests/server/test_serving.py).
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from tfkube.engines.kubernetes import apply_objects, delete_objects
from tfkube.engines.kubernetes._services import observe_deployment
from tfkube.kube.resources import CONFIG_MAP, DEPLOYMENT, SECRET, SERVICE, STATEFUL_SET
from tfkube.kube.rest import Kube
from tfkube.render import (
    ModelServerSpec,
    NotebookSpec,
    Placement,
    ServingRuntime,
    dump_yaml,
    render_autoscaler,
    render_model_server,
    render_notebook,
)
from tfkube.spec import Autoscale, Resources, load_job_text

from ._support import REPO, KubeCluster, wait_for


def _job(shared_claim: bool):
    raw = yaml.safe_load((REPO / "examples" / "mnist-between-graph" / "job.yaml").read_text())
    raw["spec"]["code"] = {"source": "http://code.example/job.tar.gz", "sha256": "ab" * 32}
    # The exports are on the team's outputs claim, or on a claim of the job's own.
    raw["spec"]["storage"] = {
        "logs": {"claimName": "team-outputs"} if shared_claim else {"size": "1Gi"}
    }
    return load_job_text(yaml.safe_dump(raw), "job")


def _notebook(namespace: str) -> NotebookSpec:
    return NotebookSpec(
        notebook_id="0123456789abcdef",
        namespace=namespace,
        user="ann",
        team="vision",
        base_url="/proxy/notebook/0123456789abcdef/",
        server_url="http://tfkube-server.tfkube.svc:8470",
        jupyter_token="j" * 64,
        client_token="tfk_" + "c" * 40,
        storage_class="standard",
        # Where the site puts notebooks (`tfkube server --notebook-node-selector ...`).
        placement=Placement(
            node_selector={"pool": "notebooks"},
            tolerations=({"key": "pool", "operator": "Exists", "effect": "NoSchedule"},),
        ),
    )


def _strict_dry_run(dynamic: DynamicClient, objects: list[dict[str, Any]], namespace: str) -> None:
    parsed = list(yaml.safe_load_all(dump_yaml(objects)))  # what `kubectl apply -f` reads
    assert parsed == objects
    for obj in parsed:
        resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        try:
            created = resource.create(
                body=obj,
                namespace=namespace,
                dry_run="All",
                query_params=[("fieldValidation", "Strict")],
            )
        except ApiException as exc:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']} refused: {exc.status} {exc.body}")
        assert created.metadata.name == obj["metadata"]["name"]


@pytest.mark.parametrize(
    ("shared_claim", "version", "runtime"),
    [
        (False, None, ServingRuntime.TENSORFLOW_SERVING),
        (True, 1001, ServingRuntime.TENSORFLOW_SERVING),
        (True, 1001, ServingRuntime.TFKUBE),
    ],
    ids=["own-claim", "pinned", "tfkube-runtime"],
)
def test_model_server_objects_pass_dry_run(
    kube_cluster: KubeCluster,
    kube_namespace: str,
    shared_claim: bool,
    version: int | None,
    runtime: ServingRuntime,
) -> None:
    spec = ModelServerSpec(
        "digits",
        kube_namespace,
        _job(shared_claim),
        version=version,
        resources=Resources(cpu="500m", memory="1Gi"),
        runtime=runtime,
    )
    _strict_dry_run(
        DynamicClient(kube_cluster.api_client), render_model_server(spec), kube_namespace
    )


def test_an_autoscaled_model_servers_objects_pass_dry_run(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    """The Deployment without a replica count and its HorizontalPodAutoscaler (issue 20
    point 5), with and without a scale-down window; strict field validation."""
    for down in (None, 15):
        spec = ModelServerSpec(
            "digits",
            kube_namespace,
            _job(True),
            runtime=ServingRuntime.TFKUBE,
            autoscale=Autoscale(
                min_replicas=1, max_replicas=3, scale_down_stabilization_seconds=down
            ),
        )
        objects = [*render_model_server(spec), render_autoscaler(spec)]
        _strict_dry_run(DynamicClient(kube_cluster.api_client), objects, kube_namespace)


def test_notebook_objects_pass_dry_run(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    objects = render_notebook(_notebook(kube_namespace))
    _strict_dry_run(DynamicClient(kube_cluster.api_client), objects, kube_namespace)


def test_the_servers_apply_status_and_delete(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    """What the tfkube server does on the Kubernetes engine: server-side apply (twice: it
    is idempotent), the Deployment read into a status, delete by name."""
    api = kube_cluster.api_client
    kube = Kube(api)
    served = render_model_server(ModelServerSpec("digits", kube_namespace, _job(True)))
    apply_objects(api, served)
    apply_objects(api, served)
    deployment = kube.get(DEPLOYMENT, kube_namespace, "digits-serving")
    assert deployment is not None
    assert observe_deployment(deployment).health.value in {"Starting", "Ready"}
    notebook = render_notebook(_notebook(kube_namespace))
    apply_objects(api, notebook)
    sts = kube.get(STATEFUL_SET, kube_namespace, "notebook-0123456789abcdef")
    assert sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "home"

    delete_objects(api, served)
    delete_objects(api, notebook)
    delete_objects(api, notebook)  # gone already is fine
    for resource, name in (
        (DEPLOYMENT, "digits-serving"),
        (STATEFUL_SET, "notebook-0123456789abcdef"),
    ):
        wait_for(
            f"{resource.kind} {name} to be deleted",
            lambda r=resource, name=name: kube.get(r, kube_namespace, name) is None,
            timeout=60,
        )
    for resource, name in (
        (SERVICE, "digits-serving"),
        (CONFIG_MAP, "digits-serving"),
        (SECRET, "notebook-0123456789abcdef"),
    ):
        assert kube.get(resource, kube_namespace, name) is None
