"""Kubeflow `kubeflow.org/v1` TFJob manifests -> our TFJob. Pure: a mapping in, a model out.

What maps:
  tfReplicaSpecs PS/Worker/Chief/Master/Evaluator -> spec.replicas ps/worker/chief/evaluator
  replicas, template.metadata.annotations          -> replicas, annotations
  the one container's image, args, env (value),   -> image, args, env, resources
    resources (requests/limits: cpu, memory, nvidia.com/gpu)
  the container's command `[python|python3|bash|sh] SCRIPT ARGS...` or `SCRIPT ARGS...`
    with SCRIPT relative                           -> spec.code.entrypoint (+ args)
  restartPolicy (the same on every role)           -> runPolicy.restartPolicy
  runPolicy backoffLimit, activeDeadlineSeconds, ttlSecondsAfterFinished, cleanPodPolicy,
    suspend; successPolicy                         -> runPolicy.*
  a container port named `tfjob-port`              -> runPolicy.port

Where the code comes from: Kubeflow images carry their code, tfkube replicas fetch it. The
manifest's annotation `tfkube.io/code-source` names it (a folder next to the file or a
.tar.gz URL; default `.`), `tfkube.io/code-sha256` pins a URL's digest.

Everything else is rejected, naming the field and why: a replica that restarts `Always`
never finishes, sidecars and volumes cannot be expressed (tfkube mounts its own shared
storage), a script inside the image cannot be fetched, and so on. Silently dropping a
field would run something other than what the manifest says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from tfkube.api._load import FieldError, SpecError, errors_from
from tfkube.api._models import API_VERSION, KIND, TFJob

KUBEFLOW_API_VERSION = "kubeflow.org/v1"
CODE_SOURCE_ANNOTATION = "tfkube.io/code-source"
CODE_SHA256_ANNOTATION = "tfkube.io/code-sha256"

_ROLES = {
    "PS": "ps",
    "Worker": "worker",
    "Chief": "chief",
    "Master": "chief",
    "Evaluator": "evaluator",
}
_INTERPRETERS = {"python", "python3", "bash", "sh"}
_RESTART = {"Never": "Never", "OnFailure": "OnFailure", "ExitCode": "ExitCode"}
_CLEAN = {"None": "None", "Running": "Running", "All": "All"}
_POD_KEYS_IGNORED = {"restartPolicy"}  # tfkube sets it per its own restart handling
_CONTAINER_KEYS = {"name", "image", "command", "args", "env", "resources", "ports"}
_CONTAINER_KEYS_IGNORED = {"imagePullPolicy", "terminationMessagePolicy", "terminationMessagePath"}
_RUN_POLICY_KEYS = {
    "backoffLimit": "backoffLimit",
    "activeDeadlineSeconds": "activeDeadlineSeconds",
    "ttlSecondsAfterFinished": "ttlSecondsAfterFinished",
    "suspend": "suspend",
}


class _Errors:
    def __init__(self) -> None:
        self.items: list[FieldError] = []

    def add(self, field: str, message: str) -> None:
        self.items.append(FieldError(field, message))


def _mapping(value: Any, field: str, errors: _Errors) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        errors.add(field, "must be a mapping")
        return {}
    return value


def _unsupported(keys: Any, allowed: set[str], field: str, errors: _Errors, why: str) -> None:
    for key in keys:
        if key not in allowed:
            errors.add(f"{field}.{key}", why)


def _resources(res: Mapping[str, Any], field: str, errors: _Errors) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _unsupported(
        res, {"limits", "requests"}, field, errors, "not supported; only limits and requests"
    )
    limits = _mapping(res.get("limits"), f"{field}.limits", errors)
    requests = _mapping(res.get("requests"), f"{field}.requests", errors)
    for part, values in (("limits", limits), ("requests", requests)):
        _unsupported(
            values,
            {"cpu", "memory", "nvidia.com/gpu"},
            f"{field}.{part}",
            errors,
            "tfkube expresses only cpu, memory and nvidia.com/gpu",
        )
    # tfkube uses one value as request and limit: the limit when given, else the request.
    for ours, theirs in (("cpu", "cpu"), ("memory", "memory")):
        value = limits.get(theirs, requests.get(theirs))
        if value is not None:
            out[ours] = str(value)
    gpu = limits.get("nvidia.com/gpu", requests.get("nvidia.com/gpu"))
    if gpu is not None:
        try:
            out["gpu"] = int(str(gpu))
        except ValueError:
            errors.add(f"{field}.limits.nvidia.com/gpu", f"{gpu!r} is not a whole number")
    return out


def _entrypoint(command: list[Any], field: str, errors: _Errors) -> tuple[str | None, list[str]]:
    words = [str(w) for w in command]
    if words and words[0].rsplit("/", 1)[-1] in _INTERPRETERS:
        words = words[1:]
    if not words:
        errors.add(field, "names no script to run; tfkube needs `[python] SCRIPT ARGS...`")
        return None, []
    script, rest = words[0], words[1:]
    if script.startswith("-"):
        errors.add(field, f"{script!r}: tfkube runs a script file, not an interpreter option")
        return None, []
    if script.startswith("/") or ".." in script.split("/"):
        errors.add(
            field,
            f"{script!r} lives in the image; tfkube fetches the code instead: put the script "
            f"in the folder named by the annotation {CODE_SOURCE_ANNOTATION} (default: the "
            "manifest's folder) and name it by a relative path",
        )
        return None, []
    return script, rest


def _replica(
    spec: Mapping[str, Any], field: str, errors: _Errors
) -> tuple[dict[str, Any], str | None, str | None, int | None]:
    """One replica type -> (our ReplicaSpec dict, entrypoint, restartPolicy, port)."""
    _unsupported(
        spec,
        {"replicas", "template", "restartPolicy"},
        field,
        errors,
        "not supported by tfkube; remove it",
    )
    out: dict[str, Any] = {"replicas": spec.get("replicas", 1)}
    restart = spec.get("restartPolicy", "Never")
    if restart == "Always":
        errors.add(
            f"{field}.restartPolicy",
            "Always restarts a replica even when it succeeded, so the job could never end; "
            "use OnFailure or ExitCode",
        )
    elif restart not in _RESTART:
        errors.add(f"{field}.restartPolicy", f"{restart!r}: must be Never, OnFailure or ExitCode")
    template = _mapping(spec.get("template"), f"{field}.template", errors)
    meta = _mapping(template.get("metadata"), f"{field}.template.metadata", errors)
    _unsupported(
        meta,
        {"annotations"},
        f"{field}.template.metadata",
        errors,
        "tfkube sets its own pod labels and names; only annotations carry over",
    )
    if meta.get("annotations"):
        out["annotations"] = {str(k): str(v) for k, v in meta["annotations"].items()}
    pod = _mapping(template.get("spec"), f"{field}.template.spec", errors)
    _unsupported(
        pod,
        {"containers"} | _POD_KEYS_IGNORED,
        f"{field}.template.spec",
        errors,
        "tfkube cannot express this pod setting (it renders the pod itself, with its own "
        "shared storage); remove it or write a tfkube TFJob",
    )
    containers = pod.get("containers") or []
    if not isinstance(containers, list) or len(containers) != 1:
        errors.add(
            f"{field}.template.spec.containers",
            f"needs exactly one container (the TensorFlow one), found "
            f"{len(containers) if isinstance(containers, list) else containers!r}; "
            "sidecars are not supported",
        )
        return out, None, restart, None
    cfield = f"{field}.template.spec.containers[0]"
    container = _mapping(containers[0], cfield, errors)
    _unsupported(
        container,
        _CONTAINER_KEYS | _CONTAINER_KEYS_IGNORED,
        cfield,
        errors,
        "tfkube cannot express this container setting; remove it",
    )
    if "image" in container:
        out["image"] = str(container["image"])
    entrypoint: str | None = None
    args: list[str] = []
    if "command" in container:
        entrypoint, args = _entrypoint(list(container["command"]), f"{cfield}.command", errors)
    args += [str(a) for a in container.get("args") or []]
    if entrypoint is None and "command" not in container:
        if args and not args[0].startswith("-"):
            entrypoint, args = args[0], args[1:]
        else:
            errors.add(
                f"{cfield}.command",
                "missing: tfkube needs the script to run, e.g. [python, train.py]",
            )
    if args:
        out["args"] = args
    env: dict[str, str] = {}
    for i, item in enumerate(container.get("env") or []):
        efield = f"{cfield}.env[{i}]"
        if not isinstance(item, Mapping) or "name" not in item:
            errors.add(efield, "must be a mapping with name and value")
            continue
        if "valueFrom" in item:
            errors.add(
                f"{efield}.valueFrom",
                "references to secrets, config maps or fields are not supported; give a value",
            )
            continue
        env[str(item["name"])] = str(item.get("value", ""))
    if env:
        out["env"] = env
    resources = _resources(
        _mapping(container.get("resources"), f"{cfield}.resources", errors),
        f"{cfield}.resources",
        errors,
    )
    if resources:
        out["resources"] = resources
    port: int | None = None
    for i, p in enumerate(container.get("ports") or []):
        if isinstance(p, Mapping) and p.get("name") == "tfjob-port":
            port = int(p.get("containerPort", 2222))
        else:
            errors.add(
                f"{cfield}.ports[{i}]",
                "only the port named tfjob-port (the TF server's) is supported",
            )
    return out, entrypoint, restart, port


def kubeflow_to_dict(data: Mapping[str, Any], source: str = "job") -> dict[str, Any]:
    """Our TFJob as a plain mapping, or `SpecError` naming every field that does not map."""
    errors = _Errors()
    if data.get("kind", KIND) != KIND:
        errors.add("kind", f"{data.get('kind')!r}: only Kubeflow TFJobs convert")
    metadata = _mapping(data.get("metadata"), "metadata", errors)
    spec = _mapping(data.get("spec"), "spec", errors)
    annotations = _mapping(metadata.get("annotations"), "metadata.annotations", errors)
    meta_out: dict[str, Any] = {"name": metadata.get("name")}
    if metadata.get("namespace"):
        meta_out["namespace"] = metadata["namespace"]
    if metadata.get("labels"):
        meta_out["labels"] = dict(metadata["labels"])
    _unsupported(
        spec,
        {"tfReplicaSpecs", "runPolicy", "successPolicy", "enableDynamicWorker"},
        "spec",
        errors,
        "not supported by tfkube; remove it",
    )
    if spec.get("enableDynamicWorker"):
        errors.add("spec.enableDynamicWorker", "tfkube runs a fixed set of workers; remove it")

    replicas: dict[str, Any] = {}
    entrypoints: dict[str, str] = {}
    restarts: dict[str, str] = {}
    ports: set[int] = set()
    specs = _mapping(spec.get("tfReplicaSpecs"), "spec.tfReplicaSpecs", errors)
    if not specs:
        errors.add("spec.tfReplicaSpecs", "required: at least a Worker replica spec")
    for kind, rspec in specs.items():
        field = f"spec.tfReplicaSpecs.{kind}"
        role = _ROLES.get(kind)
        if role is None:
            errors.add(field, f"unknown replica type; use one of {', '.join(_ROLES)}")
            continue
        if role in replicas:
            errors.add(field, "a job has either a Chief or a Master, not both")
            continue
        out, entrypoint, restart, port = _replica(_mapping(rspec, field, errors), field, errors)
        replicas[role] = out
        if entrypoint is not None:
            entrypoints[field] = entrypoint
        if restart is not None:
            restarts[field] = restart
        if port is not None:
            ports.add(port)
    if len(set(entrypoints.values())) > 1:
        errors.add(
            "spec.tfReplicaSpecs",
            "tfkube runs one entrypoint for every role (it tells them apart by TF_CONFIG); "
            "the roles run different scripts: "
            + ", ".join(f"{f.rsplit('.', 1)[-1]}={e}" for f, e in entrypoints.items()),
        )
    if len(set(restarts.values())) > 1:
        errors.add(
            "spec.tfReplicaSpecs",
            "tfkube has one restartPolicy per job; the roles differ: "
            + ", ".join(f"{f.rsplit('.', 1)[-1]}={r}" for f, r in restarts.items()),
        )
    if len(ports) > 1:
        errors.add("spec.tfReplicaSpecs", f"the roles use different tfjob-ports {sorted(ports)}")

    run_policy: dict[str, Any] = {}
    if restarts and len(set(restarts.values())) == 1:
        value = next(iter(restarts.values()))
        if value in _RESTART:
            run_policy["restartPolicy"] = _RESTART[value]
    kf_run = _mapping(spec.get("runPolicy"), "spec.runPolicy", errors)
    _unsupported(
        kf_run,
        {*_RUN_POLICY_KEYS, "cleanPodPolicy"},
        "spec.runPolicy",
        errors,
        "not supported by tfkube (gang scheduling and queues are configured by tfkube "
        "itself); remove it",
    )
    for theirs, ours in _RUN_POLICY_KEYS.items():
        if kf_run.get(theirs) is not None:
            run_policy[ours] = kf_run[theirs]
    if "cleanPodPolicy" in kf_run:
        clean = kf_run["cleanPodPolicy"]
        if clean in _CLEAN:
            run_policy["cleanPodPolicy"] = _CLEAN[clean]
        else:
            errors.add("spec.runPolicy.cleanPodPolicy", f"{clean!r}: must be None, Running or All")
    success = spec.get("successPolicy")
    if success in (None, ""):
        pass
    elif success == "AllWorkers":
        run_policy["successPolicy"] = "AllWorkers"
    else:
        errors.add("spec.successPolicy", f"{success!r}: must be empty or AllWorkers")
    if ports:
        run_policy["port"] = min(ports)

    if errors.items:
        raise SpecError(errors.items, f"{source} (Kubeflow TFJob)")
    code: dict[str, Any] = {"source": str(annotations.get(CODE_SOURCE_ANNOTATION, "."))}
    if entrypoints:
        code["entrypoint"] = next(iter(entrypoints.values()))
    if CODE_SHA256_ANNOTATION in annotations:
        code["sha256"] = str(annotations[CODE_SHA256_ANNOTATION])
    job_spec: dict[str, Any] = {"replicas": replicas, "code": code}
    if run_policy:
        job_spec["runPolicy"] = run_policy
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta_out, "spec": job_spec}


def from_kubeflow(data: Mapping[str, Any], source: str = "job") -> TFJob:
    """Convert a Kubeflow `kubeflow.org/v1` TFJob manifest; `SpecError` names what does not
    map (Kubeflow field paths) or what our rules reject after conversion (tfkube paths)."""
    raw = kubeflow_to_dict(data, source)
    try:
        return TFJob.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(errors_from(exc), f"{source} (converted from Kubeflow)") from None
