"""The TFJob CustomResourceDefinition, generated from the same pydantic models the local
engine validates with, so the API server and `tfkube run` can never disagree on the
format (deploy/crd.yaml is this output; a test keeps it so). Pure.

    TFJob.model_json_schema(by_alias=True)     JSON Schema 2020-12 with $defs
      -> _structural()                          OpenAPI v3 as Kubernetes wants it:
         $ref inlined, `X | None` -> X (a null is pruned, i.e. absent = the default),
         const -> enum, exclusiveMinimum: n -> minimum: n + exclusiveMinimum: true,
         titles and defaults dropped (pydantic applies the defaults, so the stored object
         stays what the user wrote), descriptions kept for `kubectl explain`
      + metadata: {type: object} (Kubernetes validates it itself) and a CEL rule for the
        40-character name limit; + the status schema the operator writes.

What the schema cannot say is left to pydantic in the operator (which reports it on the
TFJob's status and events): cross-field rules (one chief at most, Kueue needs a queue) and
environment values, which are a string or `{command: ...}` - a union a structural schema
cannot express, so that one map value preserves unknown fields. Unknown fields are
rejected by the API server's strict field validation (kubectl's default, and what
`tfkube submit` asks for); a structural schema alone would silently prune them.
"""

from __future__ import annotations

from typing import Any

from tfkube.kube.names import CRD_NAME, GROUP, LABEL_MANAGED_BY, MANAGED_BY, PLURAL, VERSION
from tfkube.spec import KIND, MAX_NAME_LENGTH, TFJob

SINGULAR = "tfjob"
SHORT_NAMES = ("tfj",)

Schema = dict[str, Any]

_KEEP = {
    "type",
    "description",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "format",
}
_EXTRA_REQUIRED: dict[str, list[str]] = {"Replicas": ["worker"]}
"""Fields pydantic requires through a validator rather than the schema (a job needs workers)."""

PHASES = ("Pending", "Running", "Restarting", "Succeeded", "Failed")
"""`tfkube.planner.JobPhase` values (render may not import the planner; a test checks)."""


def _structural(node: Schema, defs: dict[str, Schema], name: str | None = None) -> Schema:
    if "$ref" in node:
        ref = node["$ref"].rsplit("/", 1)[-1]
        out = _structural(defs[ref], defs, ref)
        if "description" in node:
            out["description"] = node["description"]
        return out
    for junctor in ("anyOf", "oneOf", "allOf"):
        if junctor in node:
            branches = [b for b in node[junctor] if b.get("type") != "null"]
            if len(branches) == 1:
                out = _structural(branches[0], defs)
            else:
                # str | {command: ...}: not expressible structurally; pydantic checks it.
                out = {"x-kubernetes-preserve-unknown-fields": True}
            if "description" in node:
                out["description"] = node["description"]
            return out
    out = {k: v for k, v in node.items() if k in _KEEP}
    if "const" in node:
        out["enum"] = [node["const"]]
        out.setdefault("type", "string")
    if "exclusiveMinimum" in node:
        out["minimum"] = node["exclusiveMinimum"]
        out["exclusiveMinimum"] = True
    if "exclusiveMaximum" in node:
        out["maximum"] = node["exclusiveMaximum"]
        out["exclusiveMaximum"] = True
    if node.get("type") == "object":
        props = node.get("properties")
        if props:
            out["properties"] = {k: _structural(v, defs) for k, v in props.items()}
            required = [*node.get("required", []), *_EXTRA_REQUIRED.get(name or "", [])]
            if required:
                out["required"] = sorted(set(required))
        elif isinstance(node.get("additionalProperties"), dict):
            out["additionalProperties"] = _structural(node["additionalProperties"], defs)
    if node.get("type") == "array" and "items" in node:
        out["items"] = _structural(node["items"], defs)
    return out


def spec_schema() -> Schema:
    """The structural OpenAPI v3 schema of `spec`, from the pydantic models."""
    full = TFJob.model_json_schema(by_alias=True)
    defs = full.get("$defs", {})
    return _structural(full["properties"]["spec"], defs)


def _counts(description: str) -> Schema:
    return {"type": "integer", "minimum": 0, "description": description}


def status_schema() -> Schema:
    """What the operator writes under `status`. Unknown fields are preserved because kopf
    keeps its own bookkeeping there (`status.kopf`, handler results)."""
    role_status = {
        "type": "object",
        "properties": {
            "active": _counts("Pods running or starting."),
            "ready": _counts("Pods Ready."),
            "succeeded": _counts("Replicas that exited 0."),
            "failed": _counts("Failed pods (each retry that failed counts)."),
            "restarts": _counts("Restarts of this role's replicas."),
        },
    }
    condition = {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": {"type": "string"},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": {"type": "string"},
            "message": {"type": "string"},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
        },
    }
    return {
        "type": "object",
        "description": "Written by the tfkube operator only.",
        "x-kubernetes-preserve-unknown-fields": True,
        "properties": {
            "phase": {
                "type": "string",
                "enum": list(PHASES),
                "description": "Succeeded and Failed are terminal.",
            },
            "reason": {"type": "string", "description": "Why the phase is what it is."},
            "message": {"type": "string"},
            "observedGeneration": {"type": "integer"},
            "startTime": {"type": "string", "format": "date-time"},
            "completionTime": {"type": "string", "format": "date-time"},
            "restarts": _counts("Restarts over all replicas (bounded by backoffLimit)."),
            "preemptions": _counts(
                "Times the scheduler preempted the job's pods for pods of higher priority: "
                "the whole job started again from its checkpoint; never counted as restarts."
            ),
            "preemptedAt": {
                "type": "string",
                "format": "date-time",
                "description": "When the operator counted the last preemption.",
            },
            "disruptions": _counts(
                "Times a PS's pod was evicted (its node drained, the Eviction API): the "
                "whole job started again from its checkpoint; never counted as restarts."
            ),
            "replicas": _counts("Replicas the job has in all (PS included)."),
            "readyReplicas": _counts("Replicas whose pod is Ready."),
            "succeededReplicas": _counts("Replicas that exited 0."),
            "workers": _counts(
                "Workers the worker Job runs with: spec.replicas.worker.replicas once the "
                "operator resized it (tfkube scale)."
            ),
            "refusedWorkers": _counts(
                "A worker count the spec asks for that the job cannot change to while it "
                "runs (only asynchronous PS training can): the Job kept its size."
            ),
            "podsPerJob": _counts(
                "At most this many replicas per Indexed Job (the operator's "
                "--max-pods-per-job when the job was made): a role with more is several "
                "Jobs, <job>-<role> and <job>-<role>-s<k>; fixed for the job's life."
            ),
            "replicaStatuses": {
                "type": "object",
                "description": "Per role (chief, ps, worker, evaluator).",
                "additionalProperties": role_status,
            },
            "conditions": {
                "type": "array",
                "items": condition,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
        },
    }


def openapi_schema() -> Schema:
    return {
        "type": "object",
        "description": (TFJob.__doc__ or "").strip(),
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": status_schema(),
        },
        "x-kubernetes-validations": [
            {
                "rule": f"self.metadata.name.size() <= {MAX_NAME_LENGTH}",
                "message": (
                    f"metadata.name must be at most {MAX_NAME_LENGTH} characters: replica "
                    "hostnames <job>-<role>-<index> must fit a 63-character DNS label"
                ),
            }
        ],
    }


PRINTER_COLUMNS: tuple[dict[str, str], ...] = (
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
    {"name": "Succeeded", "type": "integer", "jsonPath": ".status.succeededReplicas"},
    {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas", "priority": "1"},
    {"name": "Workers", "type": "integer", "jsonPath": ".status.workers", "priority": "1"},
    {"name": "Restarts", "type": "integer", "jsonPath": ".status.restarts"},
    {
        "name": "Preempted",
        "type": "integer",
        "jsonPath": ".status.preemptions",
        "priority": "1",
    },
    {
        "name": "Disrupted",
        "type": "integer",
        "jsonPath": ".status.disruptions",
        "priority": "1",
    },
    {"name": "Reason", "type": "string", "jsonPath": ".status.reason", "priority": "1"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
)


def crd() -> dict[str, Any]:
    """The TFJob CustomResourceDefinition (apiextensions.k8s.io/v1)."""
    columns = [
        {k: (int(v) if k == "priority" else v) for k, v in c.items()} for c in PRINTER_COLUMNS
    ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": {LABEL_MANAGED_BY: MANAGED_BY}},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": ["tfkube"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                }
            ],
        },
    }
