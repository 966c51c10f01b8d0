"""TensorFlow cluster math: addresses, TF_CONFIG and the classic flags. Pure, stdlib only.

This package is deliberately free of tfkube's models and of third-party imports: the
launcher, which runs inside every replica (also in stock TensorFlow images that have no
tfkube installed), computes each replica's TF_CONFIG and flags with these same functions.
"""

from tfkube.tfcluster._wiring import (
    CLUSTER_ROLES,
    REPLICA_KEY,
    ROLES,
    ClusterSpec,
    classic_flags,
    cluster_spec,
    local_address,
    parse_replica_key,
    replica_key,
    replica_order,
    rule_address,
    service_address,
    service_address_rule,
    shard_counts,
    shard_for,
    shard_of,
    shard_suffix,
    tf_config,
)

__all__ = [
    "CLUSTER_ROLES",
    "REPLICA_KEY",
    "ROLES",
    "ClusterSpec",
    "classic_flags",
    "cluster_spec",
    "local_address",
    "parse_replica_key",
    "replica_key",
    "replica_order",
    "rule_address",
    "service_address",
    "service_address_rule",
    "shard_counts",
    "shard_for",
    "shard_of",
    "shard_suffix",
    "tf_config",
]
