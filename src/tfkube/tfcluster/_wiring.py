"""Turn replica counts and an addressing scheme into TensorFlow's view of the cluster.

Two placers address replicas differently, and nothing else differs:
- locally every replica is `127.0.0.1:<port>` with a port chosen by the engine;
- in a cluster every replica is `<job>-<role>-<i>.<job>:<port>`, the stable DNS name a
  headless Service gives the pods of an Indexed Job.

TensorFlow's conventions that these functions encode:
- `TF_CONFIG["cluster"]` lists chief, ps and worker tasks. The evaluator is *not* part of
  the cluster (it neither serves variables nor joins training); it only gets a `task` of
  type `evaluator`. Both TF1's Estimator and TF2's ParameterServerStrategy expect this.
- The classic between-graph scripts take `--ps_hosts --worker_hosts --job_name
  --task_index`; `--chief_hosts` is added only when the job has a chief, so scripts that
  predate chiefs keep parsing their flags.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from string import Formatter

ROLES: tuple[str, ...] = ("chief", "ps", "worker", "evaluator")
"""Every replica role, in the order replicas are listed and started."""

CLUSTER_ROLES: tuple[str, ...] = ("chief", "ps", "worker")
"""The roles that appear in TF_CONFIG's cluster (the evaluator does not)."""

ClusterSpec = dict[str, list[str]]

REPLICA_KEY = re.compile(rf"^(?P<role>{'|'.join(ROLES)})-(?P<index>0|[1-9][0-9]{{0,5}})$")
"""What `replica_key` makes: a role, `-`, and an index written as a plain whole number
(no sign, no leading zero, at most six digits). Anything else is no replica's name, so a
name that passes may become a path component (the server's log folders)."""


def replica_key(role: str, index: int) -> str:
    """A replica's one name, `<role>-<index>` (`worker-0`): in status tables and events,
    in the planner's actions, in the local engine's files, as the launcher's log folder
    (`<log dir>/.tfkube/logs/<key>/`) and in the server's API. Every other module builds
    or reads it through these functions."""
    return f"{role}-{index}"


def parse_replica_key(key: str) -> tuple[str, int]:
    """`worker-3` -> ("worker", 3). Raises ValueError for anything `replica_key` never
    makes (`REPLICA_KEY`)."""
    found = REPLICA_KEY.fullmatch(key)
    if found is None:
        raise ValueError(f"{key!r} is not a replica name (e.g. worker-0)")
    return found["role"], int(found["index"])


def replica_order(role: str, index: int) -> tuple[int, int]:
    """Sort key: by role in `ROLES` order (unknown roles last), then by index."""
    return (ROLES.index(role) if role in ROLES else len(ROLES), index)


def cluster_spec(counts: Mapping[str, int], address: Callable[[str, int], str]) -> ClusterSpec:
    """The `cluster` part of TF_CONFIG: role -> addresses, roles with no replica left out."""
    unknown = set(counts) - set(ROLES)
    if unknown:
        raise ValueError(f"unknown replica roles {sorted(unknown)}; roles are {list(ROLES)}")
    return {
        role: [address(role, i) for i in range(counts[role])]
        for role in CLUSTER_ROLES
        if counts.get(role, 0) > 0
    }


def local_address(
    ports: Mapping[str, Sequence[int]], host: str = "127.0.0.1"
) -> Callable[[str, int], str]:
    """Addressing for the local engine: each replica on its own port of one host."""

    def address(role: str, index: int) -> str:
        return f"{host}:{ports[role][index]}"

    return address


def service_address(job: str, port: int, namespace: str | None = None) -> Callable[[str, int], str]:
    """Addressing through a headless Service named after the job.

    Pods of the Indexed Job `<job>-<role>` get hostname `<job>-<role>-<i>` and the
    Service's name as subdomain, so `<job>-<role>-<i>.<job>` resolves to the pod IP
    within the namespace (DNS only: no cluster IP, no iptables rule per replica).
    """
    return rule_address(service_address_rule(job, port, namespace))


def service_address_rule(job: str, port: int, namespace: str | None = None) -> str:
    """`service_address` as one rule, `<job>-{role}-{index}.<job>:<port>` (filled in with
    `str.format`). A cluster's pods carry this rule and the replica counts instead of
    every address: at 11,000 replicas the list is 330 KB, copied into every pod the Job
    controller creates (3.6 GB through etcd and every watch); the launcher expands it."""
    suffix = f".{namespace}.svc" if namespace else ""
    return f"{job}-{{role}}-{{index}}.{job}{suffix}:{port}"


def rule_address(rule: str) -> Callable[[str, int], str]:
    """Addressing by a rule with `{role}` and `{index}` fields (`service_address_rule`).
    Raises ValueError for a rule with any other field, or without both."""
    fields = {name for _, name, _, _ in Formatter().parse(rule) if name is not None}
    if fields != {"role", "index"}:
        raise ValueError(
            f"an address rule needs exactly the fields {{role}} and {{index}}: {rule!r}"
        )

    def address(role: str, index: int) -> str:
        return rule.format(role=role, index=index)

    return address


def tf_config(cluster: ClusterSpec, role: str, index: int) -> str:
    """TF_CONFIG for one replica, as the JSON string TensorFlow reads from the environment."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; roles are {list(ROLES)}")
    if index < 0 or (role in CLUSTER_ROLES and index >= len(cluster.get(role, []))):
        raise ValueError(f"{role} index {index} is outside the cluster {cluster}")
    config = {
        "cluster": cluster,
        "task": {"type": role, "index": index},
        "environment": "cloud",
    }
    return json.dumps(config, sort_keys=True)


def classic_flags(cluster: ClusterSpec, role: str, index: int) -> list[str]:
    """The flags of TF1-era between-graph scripts (`--ps_hosts=... --task_index=...`)."""
    flags = [
        f"--ps_hosts={','.join(cluster.get('ps', []))}",
        f"--worker_hosts={','.join(cluster.get('worker', []))}",
    ]
    if cluster.get("chief"):
        flags.append(f"--chief_hosts={','.join(cluster['chief'])}")
    flags += [f"--job_name={role}", f"--task_index={index}"]
    return flags


def shard_for(role: str, index: int, num_workers: int) -> tuple[int, int] | None:
    """(shard index, number of shards) of the data a replica reads, or None.

    Worker `i` reads shard `i` of `num_workers`; other roles read no shard of their own.
    """
    if role != "worker":
        return None
    return index, num_workers
