"""Model servers and notebooks in a cluster, as plain objects (pure).

A model server reads the job's exported SavedModels from the job's own output volume
(read-only), so what the job wrote is what is served, with no copy. Its runtime
(`ServingRuntime`) is the stock `tensorflow/serving` image (the default) or tfkube's own
native model server (`tfkube-modelserver`) in tfkube's image; both answer TensorFlow
Serving's REST API and its gRPC API on the same ports, so clients and the proxy do not
care which:

    ConfigMap  <name>-serving   tensorflow-serving only: models.config (the model's name,
                                base path, version policy)
    Deployment <name>-serving   tensorflow_model_server or tfkube's (non-root, read-only
                                root), REST on :8501 and gRPC on :8500; placed like the
                                job's exporting replica (`serving_placement`). Ready:
                                tfkube's when GET /tfkube/ready answers 200 (a version is
                                available and its gRPC door answered its own health check,
                                so the one probe Kubernetes allows covers both ports);
                                tensorflow/serving's when GET /v1/models/<name> answers
                                (REST only: tensorflow_model_server offers no standard
                                gRPC health check, tensorflow/serving issue 671)
    Service    <name>-serving   ClusterIP, ports `http` (the tfkube server proxies to it
                                through the API server's service proxy) and `grpc` (for
                                clients inside the cluster: that proxy speaks HTTP/1.1)
    HorizontalPodAutoscaler     with `autoscale` only (`render_autoscaler`): autoscaling/v2
               <name>-serving   on the pods' CPU utilization, scaling the Deployment, owned
                                by it (deleted with it); the Deployment then names no
                                `replicas`, so applying it again (a version roll) never
                                resets what the autoscaler chose

A notebook is a JupyterLab server per user, its home on a claim of its own:

    Secret      notebook-<id>   JUPYTER_TOKEN (the proxy adds it) and TFKUBE_TOKEN (the
                                user's client token); never in the pod spec itself
    Service     notebook-<id>   headless, port `http` (8888)
    StatefulSet notebook-<id>   `jupyter lab` below the proxy's base URL; home on the claim
                                from its volumeClaimTemplate (kept when the notebook stops)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tfkube import contract
from tfkube.kube.names import (
    LABEL_COMPONENT,
    LABEL_CREDENTIAL,
    LABEL_MANAGED_BY,
    LABEL_MODEL_SERVER,
    LABEL_NOTEBOOK,
    MANAGED_BY,
    model_server_name,
    notebook_name,
)
from tfkube.render._deploy import OPERATOR_IMAGE, Placement
from tfkube.render._render import _placement, _resources
from tfkube.render._security import WORKLOAD_USER, pod_security_context, secure_container
from tfkube.render._storage import job_volumes
from tfkube.render._tenant import DEFAULT_REQUEST
from tfkube.spec import (
    Autoscale,
    FieldError,
    Resources,
    Role,
    SpecError,
    TFJob,
    cpu_cores,
    memory_bytes,
)

Object = dict[str, Any]

TF_SERVING_IMAGE = "tensorflow/serving:2.20.0"
"""The stock TensorFlow Serving image (its `tensorflow_model_server` is the command)."""
REST_PORT = 8501
GRPC_PORT = 8500
CONFIG_DIR = "/etc/tfkube-serving"
MODELS_DIR = "/models"
DEFAULT_SERVING_RESOURCES = Resources(cpu="1", memory="2Gi")
TFKUBE_SERVING_IMAGE = OPERATOR_IMAGE
"""tfkube's own image (deploy/Dockerfile, and tools/kube/images.py on the test cluster's
real node): TensorFlow, the `serving` extra and tfkube."""
TFKUBE_SERVING_USER = WORKLOAD_USER
"""The image's non-root user (deploy/Dockerfile's USER), the user of every restricted pod."""


PRE_STOP_SECONDS = 5
"""A stopping model server keeps answering this long before its SIGTERM: endpoints are
removed asynchronously (kube-proxy's rules, the API server's service proxy), so requests
may still reach it for a moment after it is marked terminating."""
TERMINATION_GRACE_SECONDS = PRE_STOP_SECONDS + 25
"""The preStop wait plus time for in-flight requests (uvicorn's graceful stop)."""
ROLL_STRATEGY: dict[str, Any] = {
    "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
    "minReadySeconds": 2,
}
"""A new version's pod comes up beside the old one, which goes only once the new one is
ready (its readiness probe passes only when that version is loaded): no gap."""
ANNOTATION_MODEL_VERSION = "tfkube.io/model-version"


def version_label(version: int | None) -> str:
    """A served version as the pod template's annotation: the number, or `latest`."""
    return "latest" if version is None else str(version)


class ServingRuntime(StrEnum):
    """Which model server a model server's pod runs. Both speak TensorFlow Serving's REST
    API on port 8501 and its gRPC API on 8500 and read the same volume, so a client cannot
    tell them apart."""

    TENSORFLOW_SERVING = "tensorflow-serving"
    """The stock `tensorflow/serving` image (`tensorflow_model_server`)."""
    TFKUBE = "tfkube"
    """tfkube's native model server (`tfkube-modelserver`) in tfkube's image: the one the
    local engine runs, so what was tested here is what runs in the cluster."""


def parse_runtime(value: str | None, default: ServingRuntime) -> ServingRuntime:
    """A runtime by its name (None: `default`); ValueError names the choices."""
    if value is None or value == "":
        return default
    try:
        return ServingRuntime(value)
    except ValueError:
        choices = " or ".join(r.value for r in ServingRuntime)
        raise ValueError(f"{value!r} is not a model server runtime; choose {choices}") from None


NOTEBOOK_IMAGE = OPERATOR_IMAGE
"""tfkube's own image (deploy/Dockerfile): JupyterLab (the `notebook` extra) and the
tfkube client, so a cell can `tfkube.Client().submit(...)`."""
NOTEBOOK_PORT = 8888
NOTEBOOK_HOME = "/home/tfkube"
NOTEBOOK_USER = WORKLOAD_USER
DEFAULT_NOTEBOOK_RESOURCES = Resources(cpu="1", memory="2Gi")


def _labels(component: str, key: str, value: str) -> dict[str, str]:
    return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: component, key: value}


def _meta(name: str, namespace: str, labels: dict[str, str]) -> Object:
    """Fresh each time: objects never share a mutable part."""
    return {"name": name, "namespace": namespace, "labels": dict(labels)}


def job_export_volume(job: TFJob) -> tuple[str, str]:
    """(claim, sub-path) of a job's export folder: the job's output volume as its pods
    mount it (a shared claim holds each job in a folder of its own name). Raises
    SpecError when its logs were no claim (each pod's own folder, gone with it)."""
    logs = job_volumes(job).logs
    if logs.claim is None:
        raise SpecError(
            [
                FieldError(
                    "spec.storage.logs",
                    "the job's logs and exports stayed in its pods (no claim): there is "
                    "nothing to serve; give the job a logs claim to keep its exports",
                )
            ],
            f"job {job.name!r}",
        )
    folder = (
        f"{logs.sub_path}/{contract.EXPORT_SUBDIR}" if logs.sub_path else contract.EXPORT_SUBDIR
    )
    return logs.claim, folder


def model_config(name: str, version: int | None) -> str:
    """TensorFlow Serving's model config (text protobuf): one model, its version policy."""
    policy = (
        "latest { num_versions: 1 }" if version is None else f"specific {{ versions: {version} }}"
    )
    return (
        "model_config_list {\n"
        "  config {\n"
        f'    name: "{name}"\n'
        f'    base_path: "{MODELS_DIR}/{name}"\n'
        '    model_platform: "tensorflow"\n'
        f"    model_version_policy {{ {policy} }}\n"
        "  }\n"
        "}\n"
    )


@dataclass(frozen=True)
class ModelServerSpec:
    name: str
    """The model's name (`/v1/models/<name>`); names the objects `<name>-serving`."""
    namespace: str
    job: TFJob
    """The job whose exports are served, as it runs (its storage says where they are)."""
    version: int | None = None
    """None: the latest export, and newer ones as they appear; else that version only."""
    resources: Resources = field(default_factory=lambda: DEFAULT_SERVING_RESOURCES)
    runtime: ServingRuntime = ServingRuntime.TENSORFLOW_SERVING
    """Which model server runs (the stock TensorFlow Serving, or tfkube's)."""
    image: str | None = None
    """None: the runtime's image (`TF_SERVING_IMAGE`, or tfkube's `TFKUBE_SERVING_IMAGE`)."""
    poll_seconds: int = 5
    """How often the model server looks for a newer export."""
    autoscale: Autoscale | None = None
    """None: one replica. Else a HorizontalPodAutoscaler (`render_autoscaler`) keeps
    between its min and max replicas at its CPU target."""

    @property
    def serving_resources(self) -> Resources:
        """What each replica requests (and is limited to). An autoscaled one always
        requests CPU, the default's when none was asked for: utilization is use over
        request, meaningless without one."""
        if self.autoscale is not None and not self.resources.cpu:
            return self.resources.model_copy(update={"cpu": DEFAULT_SERVING_RESOURCES.cpu})
        return self.resources


def replica_request(resources: Resources | None) -> tuple[float, int]:
    """(cores, bytes) one replica of an autoscaled model server requests, as rendered for
    `resources` (None: the default, 1 CPU and 2Gi): CPU always
    (`ModelServerSpec.serving_resources`), memory not asked for being what a team
    namespace's LimitRange gives."""
    asked = resources or DEFAULT_SERVING_RESOURCES
    cpu = asked.cpu or DEFAULT_SERVING_RESOURCES.cpu or "1"
    return cpu_cores(cpu), memory_bytes(asked.memory or DEFAULT_REQUEST["memory"])


def serving_placement(job: TFJob) -> Object:
    """nodeSelector and tolerations of the job's exporting replica (the chief, else the
    workers): the model server mounts the job's output volume, so it belongs where the job's
    own pods may run (a node-local or zonal volume, a tainted pool the team owns)."""
    replicas = job.spec.replicas
    return _placement(replicas.get(Role.CHIEF) or replicas.get(Role.WORKER))


def _serving_container(spec: ModelServerSpec, sub_path: str) -> Object:
    """The model server's container: the runtime's command, the same port, probe, volume."""
    model_dir = f"{MODELS_DIR}/{spec.name}"
    mounts: list[Object] = [
        {"name": "model", "mountPath": model_dir, "subPath": sub_path, "readOnly": True}
    ]
    ports: list[Object] = [
        {"name": "http", "containerPort": REST_PORT, "protocol": "TCP"},
        {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
    ]
    container: Object = {"name": "serving", "imagePullPolicy": "IfNotPresent"}
    ready = f"/v1/models/{spec.name}"
    if spec.runtime is ServingRuntime.TENSORFLOW_SERVING:
        container["image"] = spec.image or TF_SERVING_IMAGE
        container["command"] = ["tensorflow_model_server"]
        container["args"] = [
            f"--port={GRPC_PORT}",
            f"--rest_api_port={REST_PORT}",
            f"--model_config_file={CONFIG_DIR}/models.config",
            f"--file_system_poll_wait_seconds={spec.poll_seconds}",
        ]
        mounts.append({"name": "config", "mountPath": CONFIG_DIR, "readOnly": True})
    else:
        container["image"] = spec.image or TFKUBE_SERVING_IMAGE
        container["command"] = [contract.MODEL_SERVER_BINARY]
        container["args"] = [
            "--rest_api_host=0.0.0.0",
            f"--rest_api_port={REST_PORT}",
            f"--port={GRPC_PORT}",
            f"--model_name={spec.name}",
            f"--model_base_path={model_dir}",
            f"--file_system_poll_wait_seconds={spec.poll_seconds}",
        ]
        if spec.version is not None:
            container["args"].append(f"--model_version={spec.version}")
        # A read-only root: only /tmp (HOME in the image) is writable.
        container["securityContext"] = {"readOnlyRootFilesystem": True}
        mounts.append({"name": "tmp", "mountPath": "/tmp"})
        ready = contract.SERVING_READY_PATH
    container["ports"] = ports
    # 10 s, not Kubernetes' 1 s: a model server busy predicting on a loaded node answers
    # late, and a missed probe takes it out of its Service.
    container["readinessProbe"] = {
        "httpGet": {"path": ready, "port": "http"},
        "periodSeconds": 5,
        "timeoutSeconds": 10,
    }
    # A roll (a new version): the old pod keeps answering while kube-proxy and the API
    # server's service proxy drop it from the Service's endpoints (asynchronously, after
    # the pod is marked terminating); only then does it get SIGTERM.
    container["lifecycle"] = {"preStop": {"sleep": {"seconds": PRE_STOP_SECONDS}}}
    container["resources"] = _resources(spec.serving_resources)
    container["volumeMounts"] = mounts
    # Pod Security restricted, as every workload: non-root (the pod's user), no privilege
    # escalation, no capabilities. TensorFlow Serving's image runs as root by default and
    # only reads its config and the model.
    return secure_container(container)


def render_model_server(spec: ModelServerSpec) -> list[Object]:
    name = model_server_name(spec.name)
    labels = _labels("model-server", LABEL_MODEL_SERVER, spec.name)
    selector = {LABEL_COMPONENT: "model-server", LABEL_MODEL_SERVER: spec.name}
    claim, sub_path = job_export_volume(spec.job)
    stock = spec.runtime is ServingRuntime.TENSORFLOW_SERVING
    volumes: list[Object] = [
        {"name": "model", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}},
        {"name": "config", "configMap": {"name": name}}
        if stock
        else {"name": "tmp", "emptyDir": {}},
    ]
    deployment: Object = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, spec.namespace, labels),
        "spec": {
            # Autoscaled: no replica count here; the HorizontalPodAutoscaler owns it.
            **({} if spec.autoscale is not None else {"replicas": 1}),
            "selector": {"matchLabels": selector},
            **ROLL_STRATEGY,
            "template": {
                "metadata": {
                    "labels": dict(labels),
                    # The version in the template: changing it rolls the pods for either
                    # runtime (the stock one's version is only in its ConfigMap).
                    "annotations": {ANNOTATION_MODEL_VERSION: version_label(spec.version)},
                },
                "spec": {
                    "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
                    "enableServiceLinks": False,
                    "automountServiceAccountToken": False,
                    "securityContext": pod_security_context(),
                    "containers": [_serving_container(spec, sub_path)],
                    "volumes": volumes,
                    **serving_placement(spec.job),
                },
            },
        },
    }
    ports: list[Object] = [
        {"name": "http", "port": REST_PORT, "targetPort": "http", "protocol": "TCP"},
        {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc", "protocol": "TCP"},
    ]
    service: Object = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, spec.namespace, labels),
        "spec": {"type": "ClusterIP", "selector": selector, "ports": ports},
    }
    if not stock:
        return [deployment, service]
    config_map: Object = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(name, spec.namespace, labels),
        "data": {"models.config": model_config(spec.name, spec.version)},
    }
    return [config_map, deployment, service]


def render_autoscaler(spec: ModelServerSpec, deployment_uid: str | None = None) -> Object:
    """The HorizontalPodAutoscaler of an autoscaled model server (`spec.autoscale`):
    autoscaling/v2 on the average CPU utilization of its pods (the Deployment's container
    requests CPU: `ModelServerSpec.serving_resources`), scaling the Deployment
    `<name>-serving`, owned by it when `deployment_uid` is given (the garbage collector
    deletes it with the Deployment; no `blockOwnerDeletion`, which would need the right to
    update the Deployment's finalizers). Raises ValueError without `autoscale`."""
    asked = spec.autoscale
    if asked is None:
        raise ValueError(f"model server {spec.name!r} asked for no autoscaling")
    name = model_server_name(spec.name)
    meta = _meta(name, spec.namespace, _labels("model-server", LABEL_MODEL_SERVER, spec.name))
    if deployment_uid is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": deployment_uid}
        ]
    body: Object = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
        "minReplicas": asked.min_replicas,
        "maxReplicas": asked.max_replicas,
        "metrics": [
            {
                "type": "Resource",
                "resource": {
                    "name": "cpu",
                    "target": {
                        "type": "Utilization",
                        "averageUtilization": asked.target_cpu_utilization,
                    },
                },
            }
        ],
    }
    if asked.scale_down_stabilization_seconds is not None:
        body["behavior"] = {
            "scaleDown": {"stabilizationWindowSeconds": asked.scale_down_stabilization_seconds}
        }
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": meta,
        "spec": body,
    }


@dataclass(frozen=True)
class NotebookSpec:
    notebook_id: str
    namespace: str
    user: str
    team: str
    base_url: str
    """The proxy's path for it (`/proxy/notebook/<id>/`): JupyterLab serves below it."""
    server_url: str
    """How the notebook's client reaches the tfkube server from inside the cluster."""
    jupyter_token: str
    """Jupyter's own token (kept on): the proxy sends it, so the Service alone grants
    nothing."""
    client_token: str
    """The user's API token for `tfkube.Client()` (TFKUBE_TOKEN)."""
    image: str = NOTEBOOK_IMAGE
    resources: Resources = field(default_factory=lambda: DEFAULT_NOTEBOOK_RESOURCES)
    storage: str = "10Gi"
    """Size of the home claim."""
    storage_class: str | None = None
    placement: Placement = field(default_factory=Placement)
    """Where notebooks run (`tfkube server --notebook-node-selector --notebook-toleration`,
    a site admin's choice: e.g. a pool of nodes kept for notebooks by a taint)."""


def render_notebook(spec: NotebookSpec) -> list[Object]:
    name = notebook_name(spec.notebook_id)
    labels = _labels("notebook", LABEL_NOTEBOOK, spec.notebook_id)
    selector = {LABEL_COMPONENT: "notebook", LABEL_NOTEBOOK: spec.notebook_id}
    base = "/" + spec.base_url.strip("/") + "/"
    secret: Object = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(name, spec.namespace, {**labels, LABEL_CREDENTIAL: "notebook"}),
        "type": "Opaque",
        "stringData": {
            contract.JUPYTER_TOKEN: spec.jupyter_token,
            contract.CLIENT_TOKEN: spec.client_token,
        },
    }

    def from_secret(key: str) -> Object:
        return {"name": key, "valueFrom": {"secretKeyRef": {"name": name, "key": key}}}

    container: Object = {
        "name": "notebook",
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": [
            "jupyter",
            "lab",
            "--no-browser",
            "--ServerApp.ip=0.0.0.0",
            f"--ServerApp.port={NOTEBOOK_PORT}",
            f"--ServerApp.base_url={base}",
            f"--ServerApp.root_dir={NOTEBOOK_HOME}",
            # No calls to the internet from the pod (as the local engine's notebooks).
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",
        ],
        "env": [
            {"name": "HOME", "value": NOTEBOOK_HOME},
            {"name": contract.CLIENT_URL, "value": spec.server_url},
            {"name": contract.CLIENT_TEAM, "value": spec.team},
            from_secret(contract.JUPYTER_TOKEN),
            from_secret(contract.CLIENT_TOKEN),
        ],
        "ports": [{"name": "http", "containerPort": NOTEBOOK_PORT, "protocol": "TCP"}],
        # `<base>api` answers without a token: ready means Jupyter serves.
        "readinessProbe": {"httpGet": {"path": f"{base}api", "port": "http"}, "periodSeconds": 5},
        "resources": _resources(spec.resources),
        "volumeMounts": [{"name": "home", "mountPath": NOTEBOOK_HOME}],
    }
    container = secure_container(container)  # HOME is its own (above)
    claim: Object = {
        "metadata": {"name": "home", "labels": dict(labels)},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": spec.storage}},
        },
    }
    if spec.storage_class:
        claim["spec"]["storageClassName"] = spec.storage_class
    service: Object = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, spec.namespace, labels),
        "spec": {
            "clusterIP": "None",
            "selector": selector,
            "ports": [{"name": "http", "port": NOTEBOOK_PORT, "targetPort": "http"}],
        },
    }
    stateful_set: Object = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(name, spec.namespace, labels),
        "spec": {
            "serviceName": name,
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "enableServiceLinks": False,
                    "automountServiceAccountToken": False,
                    **spec.placement.pod_fields(),
                    "securityContext": pod_security_context(),  # NOTEBOOK_USER's
                    "containers": [container],
                },
            },
            "volumeClaimTemplates": [claim],
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": "Retain",
                "whenScaled": "Retain",
            },
        },
    }
    return [secret, service, stateful_set]
