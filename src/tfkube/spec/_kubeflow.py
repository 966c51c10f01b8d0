"""Kubeflow `kubeflow.org/v1` TFJob manifests -> our TFJob. Pure: a mapping in, a model out.

What maps (docs/kubernetes.md has the whole table, with the reasons):

  tfReplicaSpecs PS/Worker/Chief/Master/Evaluator -> spec.replicas ps/worker/chief/evaluator
  replicas; restartPolicy per type                 -> replicas; the role's restartPolicy
                                                      (PS `Always` -> OnFailure: tfkube
                                                      ends the PS itself)
  template.metadata labels, annotations            -> the role's labels, annotations
  the `tensorflow` container (or the only one):
    image, command + args ("as given")             -> image, command, args
    args alone (no command)                        -> the command (images without an
                                                      ENTRYPOINT, such as TensorFlow's)
    env value / valueFrom secretKeyRef,            -> env (values and references)
      configMapKeyRef, fieldRef
    resources cpu, memory, nvidia.com/gpu          -> resources (the limit, else the request)
    volumeMounts + the pod's volumes (claim,       -> the role's volumes
      emptyDir, configMap, secret)
    workingDir; the `tfjob-port`                   -> workingDir; runPolicy.port
    other ports                                    -> dropped (informational in Kubernetes)
  other containers; initContainers                 -> sidecars (native); initContainers
  nodeSelector, tolerations, a required node       -> nodeSelector, tolerations
    affinity of `In` terms with one value each
  serviceAccountName, imagePullSecrets,            -> the role's serviceAccountName,
    terminationGracePeriodSeconds, schedulerName,     imagePullSecrets, the grace,
    priorityClassName                                 scheduling
  runPolicy (and the older top-level fields):      -> runPolicy.*; scheduling (gang from
    backoffLimit, activeDeadlineSeconds, ttl...,      the pods' schedulerName, minAvailable,
    cleanPodPolicy, suspend, schedulingPolicy         queue, priorityClass)
  successPolicy; the label kueue.x-k8s.io/         -> successPolicy; scheduling Kueue
    queue-name

Where the code comes from: a Kubeflow image carries its code, so the commands run as given
in the image. The annotation `tfkube.io/code-source` (a folder next to the manifest or a
.tar.gz URL; `tfkube.io/code-sha256` pins a URL's digest) ships code instead: every
replica fetches it and runs its command in the code folder.

Everything else is refused, every offending field named with the reason: silently dropping
a field would run something other than what the manifest says.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from tfkube.contract import KUEUE_QUEUE_LABEL
from tfkube.spec._errors import FieldError, SpecError, errors_from
from tfkube.spec._models import API_VERSION, KIND, RESERVED_VOLUMES, TFJob

KUBEFLOW_API_VERSION = "kubeflow.org/v1"
CODE_SOURCE_ANNOTATION = "tfkube.io/code-source"
CODE_SHA256_ANNOTATION = "tfkube.io/code-sha256"
MAIN_CONTAINER = "tensorflow"
"""Kubeflow's name for the TensorFlow container of a replica."""
GANG_SCHEDULERS = {"volcano": "Volcano", "scheduler-plugins-scheduler": "SchedulerPlugins"}
VOLUME_PREFIX = "kf-"
"""Prepended to a volume whose name is one of tfkube's own (`data`, `logs`, ...)."""

_ROLES = {
    "PS": "ps",
    "Worker": "worker",
    "Chief": "chief",
    "Master": "chief",
    "Evaluator": "evaluator",
}
_RESTART = {"Never", "OnFailure", "ExitCode"}
_CLEAN = {"None", "Running", "All"}
_RUN_POLICY = ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished", "suspend")
_OLD_TOP_LEVEL = ("cleanPodPolicy", *_RUN_POLICY[:3])
"""Run-policy fields early kubeflow.org/v1 manifests put straight under `spec`."""
_POD_KEYS = {
    "containers",
    "initContainers",
    "volumes",
    "nodeSelector",
    "tolerations",
    "affinity",
    "restartPolicy",  # tfkube restarts replicas itself (the role's restartPolicy)
    "schedulerName",
    "priorityClassName",
    "terminationGracePeriodSeconds",
    "imagePullSecrets",
    "serviceAccountName",
    "serviceAccount",
}
_MAIN_KEYS = {
    "name",
    "image",
    "command",
    "args",
    "env",
    "resources",
    "ports",
    "volumeMounts",
    "workingDir",
    "imagePullPolicy",
    "terminationMessagePolicy",  # tfkube sets its own
    "terminationMessagePath",
}
_HELPER_KEYS = _MAIN_KEYS - {"ports", "workingDir"}
_NO_POD = (
    "tfkube cannot express this pod setting (it renders the pod itself); remove it, or "
    "render with `tfkube render` and edit the objects"
)
_NO_CONTAINER = "tfkube cannot express this container setting; remove it"


class _Errors:
    def __init__(self) -> None:
        self.items: list[FieldError] = []

    def add(self, where: str, message: str) -> None:
        self.items.append(FieldError(where, message))


def _mapping(value: Any, where: str, errors: _Errors) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        errors.add(where, "must be a mapping")
        return {}
    return value


def _list(value: Any, where: str, errors: _Errors) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        errors.add(where, "must be a list")
        return []
    return value


def _unsupported(keys: Any, allowed: set[str], where: str, errors: _Errors, why: str) -> None:
    for key in keys:
        if key not in allowed:
            errors.add(f"{where}.{key}", why)


def _resources(res: Mapping[str, Any], where: str, errors: _Errors) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _unsupported(
        res, {"limits", "requests"}, where, errors, "not supported; only limits and requests"
    )
    limits = _mapping(res.get("limits"), f"{where}.limits", errors)
    requests = _mapping(res.get("requests"), f"{where}.requests", errors)
    for part, values in (("limits", limits), ("requests", requests)):
        _unsupported(
            values,
            {"cpu", "memory", "nvidia.com/gpu"},
            f"{where}.{part}",
            errors,
            "tfkube expresses only cpu, memory and nvidia.com/gpu",
        )
    # tfkube uses one value as request and limit: the limit when given, else the request.
    for name in ("cpu", "memory"):
        value = limits.get(name, requests.get(name))
        if value is not None:
            out[name] = str(value)
    gpu = limits.get("nvidia.com/gpu", requests.get("nvidia.com/gpu"))
    if gpu is not None:
        try:
            out["gpu"] = int(str(gpu))
        except ValueError:
            errors.add(f"{where}.limits.nvidia.com/gpu", f"{gpu!r} is not a whole number")
    return out


def _env(items: Any, where: str, errors: _Errors) -> dict[str, Any]:
    env: dict[str, Any] = {}
    for i, item in enumerate(_list(items, where, errors)):
        at = f"{where}[{i}]"
        if not isinstance(item, Mapping) or "name" not in item:
            errors.add(at, "must be a mapping with name and value (or valueFrom)")
            continue
        if "valueFrom" not in item:
            env[str(item["name"])] = str(item.get("value", ""))
            continue
        source = _mapping(item["valueFrom"], f"{at}.valueFrom", errors)
        refs = {"secretKeyRef", "configMapKeyRef", "fieldRef"}
        _unsupported(
            source,
            refs,
            f"{at}.valueFrom",
            errors,
            "tfkube passes secretKeyRef, configMapKeyRef and fieldRef; give a value instead",
        )
        found = [k for k in source if k in refs]
        if len(found) == 1:
            ref = dict(_mapping(source[found[0]], f"{at}.valueFrom.{found[0]}", errors))
            ref.pop("apiVersion", None)  # fieldRef's optional, always v1
            env[str(item["name"])] = {found[0]: ref}
    return env


def _affinity(value: Any, where: str, errors: _Errors) -> dict[str, str]:
    """A required node affinity that only says "label K is V" (each term one `In` value)
    is a nodeSelector; anything else (preferences, pod (anti-)affinity) is refused."""
    why = (
        "tfkube places replicas with nodeSelector and tolerations; a required node "
        "affinity maps only when every expression is `In` with one value"
    )
    affinity = _mapping(value, where, errors)
    _unsupported(affinity, {"nodeAffinity"}, where, errors, why)
    node = _mapping(affinity.get("nodeAffinity"), f"{where}.nodeAffinity", errors)
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    _unsupported(node, {required}, f"{where}.nodeAffinity", errors, why)
    at = f"{where}.nodeAffinity.{required}"
    terms = _list(_mapping(node.get(required), at, errors).get("nodeSelectorTerms"), at, errors)
    selector: dict[str, str] = {}
    if len(terms) > 1:
        errors.add(f"{at}.nodeSelectorTerms", "several terms are alternatives (OR); " + why)
        return selector
    for term in terms:
        term = _mapping(term, f"{at}.nodeSelectorTerms[0]", errors)
        _unsupported(term, {"matchExpressions"}, f"{at}.nodeSelectorTerms[0]", errors, why)
        for j, expr in enumerate(_list(term.get("matchExpressions"), at, errors)):
            expr = _mapping(expr, at, errors)
            values = expr.get("values") or []
            if expr.get("operator") != "In" or len(values) != 1:
                errors.add(f"{at}.nodeSelectorTerms[0].matchExpressions[{j}]", why)
                continue
            selector[str(expr.get("key"))] = str(values[0])
    return selector


_VOLUME_SOURCES = {"persistentVolumeClaim", "emptyDir", "configMap", "secret"}


def _volume_names(volumes: list[Any], where: str, errors: _Errors) -> dict[str, dict[str, Any]]:
    """The pod's volumes by their (possibly renamed) name: name -> our source fields."""
    out: dict[str, dict[str, Any]] = {}
    for i, volume in enumerate(volumes):
        at = f"{where}[{i}]"
        volume = _mapping(volume, at, errors)
        name = str(volume.get("name"))
        sources = [k for k in volume if k != "name"]
        source: dict[str, Any] = {}
        for key in sources:
            if key not in _VOLUME_SOURCES:
                errors.add(
                    f"{at}.{key}",
                    "tfkube mounts persistentVolumeClaim, emptyDir, configMap and secret "
                    "volumes; use a claim for this storage",
                )
        if len(sources) == 1 and sources[0] in _VOLUME_SOURCES:
            kind = sources[0]
            spec = _mapping(volume[kind], f"{at}.{kind}", errors)
            allowed = {
                "persistentVolumeClaim": {"claimName", "readOnly"},
                "emptyDir": {"medium", "sizeLimit"},
                "configMap": {"name"},
                "secret": {"secretName"},
            }[kind]
            _unsupported(spec, allowed, f"{at}.{kind}", errors, _NO_CONTAINER)
            if kind == "persistentVolumeClaim":
                source["claimName"] = spec.get("claimName")
            elif kind == "emptyDir":
                source["emptyDir"] = {k: spec[k] for k in ("medium", "sizeLimit") if k in spec}
            elif kind == "configMap":
                source["configMap"] = spec.get("name")
            else:
                source["secret"] = spec.get("secretName")
        out[name] = source
    return out


def _renamed(name: str) -> str:
    return VOLUME_PREFIX + name if name in RESERVED_VOLUMES else name


def _mounts(
    items: Any, volumes: Mapping[str, Any], where: str, errors: _Errors
) -> list[dict[str, Any]]:
    """volumeMounts -> ours (a volume named like one of tfkube's own is renamed)."""
    out = []
    for i, mount in enumerate(_list(items, where, errors)):
        at = f"{where}[{i}]"
        mount = _mapping(mount, at, errors)
        _unsupported(mount, {"name", "mountPath", "readOnly", "subPath"}, at, errors, _NO_CONTAINER)
        name = str(mount.get("name"))
        if name not in volumes:
            errors.add(f"{at}.name", f"{name!r} is not one of the pod's volumes")
            continue
        item: dict[str, Any] = {"name": _renamed(name), "mountPath": mount.get("mountPath")}
        for key in ("readOnly", "subPath"):
            if key in mount:
                item[key] = mount[key]
        out.append(item)
    return out


def _command(container: Mapping[str, Any], where: str, errors: _Errors) -> dict[str, Any]:
    """command + args as Kubernetes runs them; args alone are the command line of an image
    without an ENTRYPOINT (the TensorFlow images have none)."""
    command = [str(w) for w in _list(container.get("command"), f"{where}.command", errors)]
    args = [str(w) for w in _list(container.get("args"), f"{where}.args", errors)]
    if command:
        return {"command": command, **({"args": args} if args else {})}
    if args and not args[0].startswith("-"):
        return {"command": args}
    errors.add(
        f"{where}.command",
        "missing: the image's own ENTRYPOINT would run"
        + (f" with {args!r}" if args else "")
        + ", and tfkube starts its launcher in the container instead, so it needs the "
        "program; add command (e.g. [python, /opt/train.py])",
    )
    return {}


def _helper(
    container: Mapping[str, Any], volumes: Mapping[str, Any], where: str, errors: _Errors
) -> dict[str, Any]:
    _unsupported(container, _HELPER_KEYS, where, errors, _NO_CONTAINER)
    out: dict[str, Any] = {"name": container.get("name"), "image": container.get("image")}
    if container.get("command"):
        out["command"] = [str(w) for w in container["command"]]
    if container.get("args"):
        out["args"] = [str(w) for w in container["args"]]
    env = _env(container.get("env"), f"{where}.env", errors)
    if env:
        out["env"] = env
    resources = _resources(
        _mapping(container.get("resources"), f"{where}.resources", errors),
        f"{where}.resources",
        errors,
    )
    if resources:
        out["resources"] = resources
    mounts = _mounts(container.get("volumeMounts"), volumes, f"{where}.volumeMounts", errors)
    if mounts:
        out["volumeMounts"] = mounts
    return out


@dataclass
class _Role:
    """One replica type, converted, plus what only the job as a whole can hold."""

    spec: dict[str, Any] = field(default_factory=dict)
    restart: str | None = None
    port: int | None = None
    grace: float | None = None
    pull_policy: str | None = None
    pull_secrets: list[str] = field(default_factory=list)
    scheduler: str | None = None
    priority_class: str | None = None


def _main_container(
    containers: list[Any], where: str, errors: _Errors
) -> tuple[int | None, list[int]]:
    """(index of the TensorFlow container, indexes of the others)."""
    named = [
        i
        for i, c in enumerate(containers)
        if isinstance(c, Mapping) and c.get("name") == MAIN_CONTAINER
    ]
    if named:
        main = named[0]
    elif len(containers) == 1:
        main = 0
    else:
        errors.add(
            where,
            f"found {len(containers)} containers and none named {MAIN_CONTAINER!r}; name the "
            "TensorFlow one so (the others become sidecars)",
        )
        return None, []
    return main, [i for i in range(len(containers)) if i != main]


def _restart(spec: Mapping[str, Any], role: str, where: str, errors: _Errors) -> str | None:
    restart = spec.get("restartPolicy", "Never")
    if restart == "Always":
        if role == "ps":
            return "OnFailure"  # a PS never ends on its own; tfkube ends it with the job
        errors.add(
            f"{where}.restartPolicy",
            "Always restarts a replica even when it succeeded, so the job could never end; "
            "use OnFailure or ExitCode",
        )
        return None
    if restart not in _RESTART:
        errors.add(f"{where}.restartPolicy", f"{restart!r}: must be Never, OnFailure or ExitCode")
        return None
    return str(restart)


def _replica(spec: Mapping[str, Any], role: str, where: str, errors: _Errors) -> _Role:
    """One replica type -> our ReplicaSpec dict and the job-level bits it carries."""
    _unsupported(
        spec,
        {"replicas", "template", "restartPolicy"},
        where,
        errors,
        "not supported by tfkube; remove it",
    )
    out = _Role(spec={"replicas": spec.get("replicas", 1)})
    out.restart = _restart(spec, role, where, errors)
    template = _mapping(spec.get("template"), f"{where}.template", errors)
    meta = _mapping(template.get("metadata"), f"{where}.template.metadata", errors)
    _unsupported(
        meta,
        {"annotations", "labels"},
        f"{where}.template.metadata",
        errors,
        "tfkube names the pods itself; only labels and annotations carry over",
    )
    for key in ("annotations", "labels"):
        if meta.get(key):
            out.spec[key] = {str(k): str(v) for k, v in meta[key].items()}
    pod_at = f"{where}.template.spec"
    pod = _mapping(template.get("spec"), pod_at, errors)
    _unsupported(pod, _POD_KEYS, pod_at, errors, _NO_POD)
    volumes = _volume_names(
        _list(pod.get("volumes"), f"{pod_at}.volumes", errors), f"{pod_at}.volumes", errors
    )
    containers = _list(pod.get("containers"), f"{pod_at}.containers", errors)
    if not containers:
        errors.add(f"{pod_at}.containers", "required: the TensorFlow container")
        return out
    main, others = _main_container(containers, f"{pod_at}.containers", errors)
    if main is not None:
        _container(containers[main], volumes, out, f"{pod_at}.containers[{main}]", errors)
    sidecars = [
        _helper(
            _mapping(containers[i], f"{pod_at}.containers[{i}]", errors),
            volumes,
            f"{pod_at}.containers[{i}]",
            errors,
        )
        for i in others
    ]
    if sidecars:
        out.spec["sidecars"] = sidecars
    inits = [
        _helper(
            _mapping(c, f"{pod_at}.initContainers[{i}]", errors),
            volumes,
            f"{pod_at}.initContainers[{i}]",
            errors,
        )
        for i, c in enumerate(_list(pod.get("initContainers"), f"{pod_at}.initContainers", errors))
    ]
    if inits:
        out.spec["initContainers"] = inits
    _pod_placement(pod, out, pod_at, errors)
    return out


def _container(
    raw: Any, volumes: Mapping[str, dict[str, Any]], out: _Role, where: str, errors: _Errors
) -> None:
    container = _mapping(raw, where, errors)
    _unsupported(container, _MAIN_KEYS, where, errors, _NO_CONTAINER)
    if "image" in container:
        out.spec["image"] = str(container["image"])
    out.spec.update(_command(container, where, errors))
    if container.get("workingDir"):
        out.spec["workingDir"] = str(container["workingDir"])
    env = _env(container.get("env"), f"{where}.env", errors)
    if env:
        out.spec["env"] = env
    resources = _resources(
        _mapping(container.get("resources"), f"{where}.resources", errors),
        f"{where}.resources",
        errors,
    )
    if resources:
        out.spec["resources"] = resources
    out.pull_policy = container.get("imagePullPolicy")
    for port in _list(container.get("ports"), f"{where}.ports", errors):
        if isinstance(port, Mapping) and port.get("name") == "tfjob-port":
            out.port = int(port.get("containerPort", 2222))
    mounts: dict[str, dict[str, Any]] = {}
    for mount in _mounts(container.get("volumeMounts"), volumes, f"{where}.volumeMounts", errors):
        if mount["name"] in mounts:
            errors.add(
                f"{where}.volumeMounts",
                f"volume {mount['name']!r} is mounted twice; tfkube mounts a volume once",
            )
        mounts[mount["name"]] = mount
    extra = [
        # A volume only helper containers mount has no mountPath in the replica container.
        {**mounts.get(_renamed(name), {"name": _renamed(name)}), **source}
        for name, source in volumes.items()
    ]
    if extra:
        out.spec["volumes"] = extra


def _pod_placement(pod: Mapping[str, Any], out: _Role, where: str, errors: _Errors) -> None:
    selector = {
        str(k): str(v)
        for k, v in _mapping(pod.get("nodeSelector"), f"{where}.nodeSelector", errors).items()
    }
    if "affinity" in pod:
        selector.update(_affinity(pod["affinity"], f"{where}.affinity", errors))
    if selector:
        out.spec["nodeSelector"] = selector
    if pod.get("tolerations"):
        out.spec["tolerations"] = list(_list(pod["tolerations"], f"{where}.tolerations", errors))
    account = pod.get("serviceAccountName") or pod.get("serviceAccount")
    if account:
        out.spec["serviceAccountName"] = str(account)
    if pod.get("terminationGracePeriodSeconds") is not None:
        out.grace = float(pod["terminationGracePeriodSeconds"])
    for i, secret in enumerate(
        _list(pod.get("imagePullSecrets"), f"{where}.imagePullSecrets", errors)
    ):
        name = secret.get("name") if isinstance(secret, Mapping) else None
        if not name:
            errors.add(f"{where}.imagePullSecrets[{i}]", "must be {name: SECRET}")
        else:
            out.pull_secrets.append(str(name))
    out.scheduler = pod.get("schedulerName")
    out.priority_class = pod.get("priorityClassName")


def _one(values: dict[str, Any], what: str, errors: _Errors) -> Any:
    """The one value every role that sets it agrees on (tfkube holds it per job)."""
    given = {k: v for k, v in values.items() if v is not None}
    if len(set(map(str, given.values()))) > 1:
        errors.add(
            "spec.tfReplicaSpecs",
            f"tfkube has one {what} per job; the replica types differ: "
            + ", ".join(f"{k}={v}" for k, v in given.items()),
        )
        return None
    return next(iter(given.values()), None)


def _scheduling(
    roles: dict[str, _Role], run: Mapping[str, Any], labels: Mapping[str, Any], errors: _Errors
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    scheduler = _one({k: r.scheduler for k, r in roles.items()}, "schedulerName", errors)
    if scheduler in GANG_SCHEDULERS:
        out["gang"] = GANG_SCHEDULERS[scheduler]
    elif scheduler not in (None, "default-scheduler"):
        out["schedulerName"] = scheduler
    priority = _one({k: r.priority_class for k, r in roles.items()}, "priorityClassName", errors)
    policy_at = "spec.runPolicy.schedulingPolicy"
    policy = _mapping(run.get("schedulingPolicy"), policy_at, errors)
    _unsupported(
        policy,
        {"minAvailable", "queue", "priorityClass", "scheduleTimeoutSeconds"},
        policy_at,
        errors,
        "tfkube does not set a PodGroup's minResources (the scheduler adds up the pods' "
        "requests); remove it",
    )
    priority = policy.get("priorityClass") or priority
    if priority:
        out["priorityClassName"] = priority
    gang_fields = {
        k: policy[k] for k in ("minAvailable", "queue", "scheduleTimeoutSeconds") if k in policy
    }
    if gang_fields and "gang" not in out:
        errors.add(
            policy_at,
            "gang scheduling needs to know its scheduler: set schedulerName: volcano (or "
            "scheduler-plugins-scheduler) in the pod templates, as the Kubeflow operator's "
            "gang scheduler is configured outside the manifest",
        )
    if "minAvailable" in gang_fields:
        out["minAvailable"] = gang_fields["minAvailable"]
    if "scheduleTimeoutSeconds" in gang_fields:
        out["scheduleTimeoutSeconds"] = gang_fields["scheduleTimeoutSeconds"]
    if "queue" in gang_fields:
        if out.get("gang") == "SchedulerPlugins":
            errors.add(f"{policy_at}.queue", "scheduler-plugins has no queues; remove it")
        out["queue"] = gang_fields["queue"]
    kueue = labels.get(KUEUE_QUEUE_LABEL)
    if kueue:
        if "gang" in out:
            errors.add(
                f"metadata.labels.{KUEUE_QUEUE_LABEL}",
                f"Kueue and the {out['gang']} gang scheduler both want to admit the job; keep one",
            )
        else:
            out.update(gang="Kueue", queue=str(kueue))
    return out


def _run_policy(
    spec: Mapping[str, Any], roles: dict[str, _Role], errors: _Errors
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    run = _mapping(spec.get("runPolicy"), "spec.runPolicy", errors)
    _unsupported(
        run,
        {*_RUN_POLICY, "cleanPodPolicy", "schedulingPolicy", "managedBy"},
        "spec.runPolicy",
        errors,
        "not supported by tfkube; remove it",
    )
    if run.get("managedBy") not in (None, "", "kubeflow.org/training-operator"):
        errors.add("spec.runPolicy.managedBy", "tfkube manages its own jobs; remove it")
    merged = {**{k: spec[k] for k in _OLD_TOP_LEVEL if k in spec}, **run}
    for key in _RUN_POLICY:
        if merged.get(key) is not None:
            out[key] = merged[key]
    if "cleanPodPolicy" in merged:
        clean = merged["cleanPodPolicy"]
        where = (
            "spec.runPolicy.cleanPodPolicy" if "cleanPodPolicy" in run else "spec.cleanPodPolicy"
        )
        if clean in _CLEAN:
            out["cleanPodPolicy"] = clean
        else:
            errors.add(where, f"{clean!r}: must be None, Running or All")
    restarts = {k: r.restart for k, r in roles.items() if r.restart is not None}
    if restarts and len(set(restarts.values())) == 1:
        out["restartPolicy"] = next(iter(restarts.values()))
    else:
        for role in roles.values():
            if role.restart is not None:
                role.spec["restartPolicy"] = role.restart
    port = _one({k: r.port for k, r in roles.items()}, "tfjob-port", errors)
    if port is not None:
        out["port"] = port
    graces = [r.grace for r in roles.values() if r.grace is not None]
    if graces:
        out["terminationGraceSeconds"] = min(max(graces), 300.0)
    success = spec.get("successPolicy")
    if success == "AllWorkers":
        out["successPolicy"] = "AllWorkers"
    elif success not in (None, ""):
        errors.add("spec.successPolicy", f"{success!r}: must be empty or AllWorkers")
    return out


def kubeflow_to_dict(data: Mapping[str, Any], source: str = "job") -> dict[str, Any]:
    """Our TFJob as a plain mapping, or `SpecError` naming every field that does not map."""
    errors = _Errors()
    if data.get("kind", KIND) != KIND:
        errors.add("kind", f"{data.get('kind')!r}: only Kubeflow TFJobs convert")
    metadata = _mapping(data.get("metadata"), "metadata", errors)
    if "generateName" in metadata and "name" not in metadata:
        errors.add("metadata.generateName", "tfkube needs a fixed name; set metadata.name")
    spec = _mapping(data.get("spec"), "spec", errors)
    annotations = _mapping(metadata.get("annotations"), "metadata.annotations", errors)
    labels = dict(_mapping(metadata.get("labels"), "metadata.labels", errors))
    meta_out: dict[str, Any] = {"name": metadata.get("name")}
    if metadata.get("namespace"):
        meta_out["namespace"] = metadata["namespace"]
    if {k: v for k, v in labels.items() if k != KUEUE_QUEUE_LABEL}:
        meta_out["labels"] = {k: v for k, v in labels.items() if k != KUEUE_QUEUE_LABEL}
    _unsupported(
        spec,
        {"tfReplicaSpecs", "runPolicy", "successPolicy", "enableDynamicWorker", *_OLD_TOP_LEVEL},
        "spec",
        errors,
        "not supported by tfkube; remove it",
    )
    if spec.get("enableDynamicWorker"):
        errors.add("spec.enableDynamicWorker", "tfkube runs a fixed set of workers; remove it")

    roles: dict[str, _Role] = {}
    specs = _mapping(spec.get("tfReplicaSpecs"), "spec.tfReplicaSpecs", errors)
    if not specs:
        errors.add("spec.tfReplicaSpecs", "required: at least a Worker replica spec")
    for kind, rspec in specs.items():
        where = f"spec.tfReplicaSpecs.{kind}"
        role = _ROLES.get(kind)
        if role is None:
            errors.add(where, f"unknown replica type; use one of {', '.join(_ROLES)}")
            continue
        if role in roles:
            errors.add(where, "a job has either a Chief or a Master, not both")
            continue
        roles[role] = _replica(_mapping(rspec, where, errors), role, where, errors)

    run_policy = _run_policy(spec, roles, errors)
    if labels.get(KUEUE_QUEUE_LABEL):
        # Kueue's integration suspends a Kubeflow TFJob until it admits it; tfkube's role
        # Jobs are created suspended for Kueue instead (scheduling.gang Kueue).
        run_policy.pop("suspend", None)
    scheduling = _scheduling(
        roles, _mapping(spec.get("runPolicy"), "spec.runPolicy", errors), labels, errors
    )
    pull_policy = _one({k: r.pull_policy for k, r in roles.items()}, "imagePullPolicy", errors)
    pull_secrets = sorted({s for r in roles.values() for s in r.pull_secrets})
    if errors.items:
        raise SpecError(errors.items, f"{source} (Kubeflow TFJob)")

    job_spec: dict[str, Any] = {"replicas": {role: r.spec for role, r in roles.items()}}
    if CODE_SOURCE_ANNOTATION in annotations:
        code: dict[str, Any] = {"source": str(annotations[CODE_SOURCE_ANNOTATION])}
        if CODE_SHA256_ANNOTATION in annotations:
            code["sha256"] = str(annotations[CODE_SHA256_ANNOTATION])
        job_spec["code"] = code
    if run_policy:
        job_spec["runPolicy"] = run_policy
    if scheduling:
        job_spec["scheduling"] = scheduling
    if pull_policy:
        job_spec["imagePullPolicy"] = pull_policy
    if pull_secrets:
        job_spec["imagePullSecrets"] = pull_secrets
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta_out, "spec": job_spec}


def from_kubeflow(data: Mapping[str, Any], source: str = "job") -> TFJob:
    """Convert a Kubeflow `kubeflow.org/v1` TFJob manifest; `SpecError` names what does not
    map (Kubeflow field paths) or what our rules reject after conversion (tfkube paths)."""
    raw = kubeflow_to_dict(data, source)
    try:
        return TFJob.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(errors_from(exc), f"{source} (converted from Kubeflow)") from None
