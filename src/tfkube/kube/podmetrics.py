"""The kubelet's resource metrics as the metrics API serves them (`pods.metrics.k8s.io`,
metrics-server) mapped to tfkube's per-replica samples: `[time, cpu cores, memory bytes]`,
the shape the local engine's supervisor keeps (`tfkube.contract.USAGE_SUBDIR`). Pure.

A PodMetrics item carries its pod's labels (metrics-server copies them), a `timestamp`
(the end of the sampled `window`) and per container `usage.cpu` / `usage.memory`
quantities ("12345678n" cores, "123456Ki" bytes of working set). A replica's sample is the
sum over its pod's containers; of several pods of one replica (a restart's new pod beside
the old one that is going) the newest sample is kept.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from tfkube.kube._observe import parse_time, pod_index, pod_role
from tfkube.tfcluster import replica_key

METRICS_GROUP_VERSION = "metrics.k8s.io/v1beta1"


def pods_path(namespace: str) -> str:
    """The metrics API's PodMetrics of a namespace (an aggregated API: absent, 404 or 503,
    where the cluster has no metrics-server)."""
    return f"/apis/{METRICS_GROUP_VERSION}/namespaces/{namespace}/pods"


_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
_SUFFIX: dict[str, Decimal] = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def quantity(text: object) -> Decimal:
    """A Kubernetes quantity ("250m", "12345678n", "1.5Gi", "1e3") as a number; ValueError
    naming the text when it is not one."""
    m = _QUANTITY.match(str(text).strip())
    if not m or m.group(2) not in _SUFFIX:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    try:
        return Decimal(m.group(1)) * _SUFFIX[m.group(2)]
    except InvalidOperation:
        raise ValueError(f"not a Kubernetes quantity: {text!r}") from None


def cpu_cores(text: object) -> float:
    return float(quantity(text))


def memory_bytes(text: object) -> int:
    return int(quantity(text))


Sample = tuple[float, float, int]
"""(epoch seconds, cores, bytes)."""


def pod_sample(item: Mapping[str, Any]) -> Sample | None:
    """One PodMetrics item as a sample; None when it has no time or a quantity that is not
    one (such an item is skipped, never an error)."""
    try:
        at = parse_time(item.get("timestamp"))
        containers = item.get("containers") or []
        cores = sum(cpu_cores((c.get("usage") or {}).get("cpu", "0")) for c in containers)
        used = sum(memory_bytes((c.get("usage") or {}).get("memory", "0")) for c in containers)
    except (ValueError, TypeError, AttributeError):
        return None
    if at is None or not containers:
        return None
    return (at, cores, used)


def replica_samples(items: Iterable[Mapping[str, Any]]) -> dict[str, Sample]:
    """Replica key ("worker-1") -> its newest sample, from a PodMetrics list's items; items
    of pods that are no replica (no role or index label) are left out."""
    out: dict[str, Sample] = {}
    for item in items:
        role, index = pod_role(item), pod_index(item)
        if role is None or index is None:
            continue
        sample = pod_sample(item)
        if sample is None:
            continue
        key = replica_key(role, index)
        if key not in out or sample[0] > out[key][0]:
            out[key] = sample
    return out
