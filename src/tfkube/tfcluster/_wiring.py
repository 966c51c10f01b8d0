"""Turn replica counts and an addressing scheme into TensorFlow's view of the cluster.

Two placers address replicas differently, and nothing else differs:
- locally every replica is `127.0.0.1:<port>` with a port chosen by the engine;
- in a cluster every replica is `<job>-<role>-<i>.<job>-<role>:<port>`, the stable DNS
  name the headless Service of its Indexed Job gives the Job's pods.

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


def service_address(
    job: str,
    port: int,
    namespace: str | None = None,
    shard_size: int | None = None,
    one_service: bool = False,
) -> Callable[[str, int], str]:
    """Addressing through a headless Service per Indexed Job.

    Pods of the Indexed Job `<job>-<role>` get hostname `<job>-<role>-<i>` and, as
    subdomain, the name of the Job's own headless Service (the Job's name), so
    `<job>-<role>-<i>.<job>-<role>` resolves to the pod IP within the namespace (DNS
    only: no cluster IP, no iptables rule per replica). With `shard_size` S a role of more
    than S replicas is several Indexed Jobs (`shard_of`): replica `g` is index `g % S` of
    Job `<job>-<role>` (g < S) or `<job>-<role>-s<k>` (k = g // S), so its name is
    `<job>-<role>-<g>.<job>-<role>` or `<job>-<role>-s<k>-<g % S>.<job>-<role>-s<k>`.
    A Service per Job keeps what a Service selects to one Job's pods: Kubernetes'
    default topology spread counts, for each pod it places, the pods its Service selects
    on every node, so one Service for 11,000 pods made that work grow with the square of
    the replicas (1.77x slower to start them all: docs/benchmarks.md, runs Q6).

    `one_service`: the replicas share one headless Service named after the job,
    `<job>-<role>-<i>.<job>`, as every job made before 2026-12-04 did (such a job keeps
    it: `tfkube.kube.observe.one_service`).
    """
    return rule_address(service_address_rule(job, port, namespace, shard_size, one_service))


def service_address_rule(
    job: str,
    port: int,
    namespace: str | None = None,
    shard_size: int | None = None,
    one_service: bool = False,
) -> str:
    """`service_address` as one rule, `<job>-{role}-{index}.<job>-{role}:<port>` (filled
    in with `str.format`), or with `shard_size` S
    `<job>-{role}{shard:S}-{index}.<job>-{role}{shard:S}:<port>` (`rule_address` says how
    it expands); with `one_service` the part after the dot is `<job>`. A cluster's pods
    carry this rule and the replica counts instead of every address: at 11,000 replicas
    the list is 330 KB, copied into every pod the Job controller creates (3.6 GB through
    etcd and every watch); the launcher expands it."""
    suffix = f".{namespace}.svc" if namespace else ""
    shard = "" if shard_size is None else f"{{shard:{_shard_size(shard_size)}}}"
    host = f"{job}-{{role}}{shard}"
    service = job if one_service else host
    return f"{host}-{{index}}.{service}{suffix}:{port}"


def _shard_size(size: int) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"a shard size is a whole number of at least 1, not {size!r}")
    return size


def shard_of(index: int, shard_size: int) -> tuple[int, int]:
    """(shard, index within the shard) of a role's replica `index` when each of the role's
    Indexed Jobs holds at most `shard_size` replicas: shard k holds k*S .. k*S+S-1."""
    if index < 0:
        raise ValueError(f"a replica index is at least 0, not {index}")
    return divmod(index, _shard_size(shard_size))


def shard_suffix(shard: int) -> str:
    """What a role's Job (and so its pods' hostnames) adds for shard `shard`: nothing for
    shard 0, so a role within one shard keeps its one Job's name; `-s<k>` after that."""
    if shard < 0:
        raise ValueError(f"a shard is at least 0, not {shard}")
    return "" if shard == 0 else f"-s{shard}"


def shard_counts(replicas: int, shard_size: int) -> list[int]:
    """How many replicas each of a role's Indexed Jobs holds, shard 0 first: every shard
    full but the last (`[]` for no replica)."""
    size = _shard_size(shard_size)
    if replicas < 0:
        raise ValueError(f"a replica count is at least 0, not {replicas}")
    full, rest = divmod(replicas, size)
    return [size] * full + ([rest] if rest else [])


def rule_address(rule: str) -> Callable[[str, int], str]:
    """Addressing by a rule with `{role}` and `{index}` fields (`service_address_rule`),
    and optionally `{shard:S}`: then `{index}` is the index within the replica's shard
    and `{shard}` the shard's suffix (`shard_of`, `shard_suffix`). A field may appear more
    than once (every `{shard}` with the same S). Raises ValueError for a rule with any
    other field, without both of the first two, or a shard size that is not a whole
    number of at least 1."""
    parsed = list(Formatter().parse(rule))
    fields = {name for _, name, _, _ in parsed if name is not None}
    if fields - {"shard"} != {"role", "index"}:
        raise ValueError(
            f"an address rule needs exactly the fields {{role}} and {{index}} (and may have "
            f"{{shard:<size>}}): {rule!r}"
        )
    size: int | None = None
    template = ""
    for literal, name, spec, conversion in parsed:
        template += literal.replace("{", "{{").replace("}", "}}")
        if name is None:
            continue
        if conversion or (spec and name != "shard"):
            raise ValueError(f"an address rule's fields take no format or conversion: {rule!r}")
        if name == "shard":
            if not (spec and spec.isascii() and spec.isdigit() and int(spec) >= 1):
                raise ValueError(
                    f"an address rule's {{shard:<size>}} needs a size of at least 1: {rule!r}"
                )
            if size is not None and int(spec) != size:
                raise ValueError(f"an address rule's {{shard}} fields differ in size: {rule!r}")
            size = int(spec)
        template += f"{{{name}}}"

    def address(role: str, index: int) -> str:
        if size is None:
            return template.format(role=role, index=index)
        shard, local = shard_of(index, size)
        return template.format(role=role, shard=shard_suffix(shard), index=local)

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
