"""The TF cluster math: cluster_spec, TF_CONFIG, classic flags, shards, addresses."""

from __future__ import annotations

import json

import pytest

from tfkube.tfcluster import (
    CLUSTER_ROLES,
    ROLES,
    classic_flags,
    cluster_spec,
    local_address,
    rule_address,
    service_address,
    service_address_rule,
    shard_counts,
    shard_for,
    shard_of,
    shard_suffix,
    tf_config,
)


def fake(role: str, index: int) -> str:
    return f"{role}{index}:1"


FULL = {"chief": ["c0:1"], "ps": ["p0:1", "p1:1"], "worker": ["w0:1", "w1:1", "w2:1"]}
NO_CHIEF = {"ps": ["p0:1"], "worker": ["w0:1", "w1:1"]}
WORKERS_ONLY = {"worker": ["w0:1", "w1:1"]}


def test_role_constants():
    assert ROLES == ("chief", "ps", "worker", "evaluator")
    assert CLUSTER_ROLES == ("chief", "ps", "worker")


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        pytest.param({"worker": 1}, {"worker": ["worker0:1"]}, id="one-worker"),
        pytest.param(
            {"chief": 1, "ps": 2, "worker": 2, "evaluator": 1},
            {
                "chief": ["chief0:1"],
                "ps": ["ps0:1", "ps1:1"],
                "worker": ["worker0:1", "worker1:1"],
            },
            id="every-role-evaluator-left-out",
        ),
        pytest.param(
            {"chief": 0, "ps": 0, "worker": 3, "evaluator": 0},
            {"worker": ["worker0:1", "worker1:1", "worker2:1"]},
            id="zero-counts-omitted",
        ),
        pytest.param({"ps": 1, "worker": 1}, {"ps": ["ps0:1"], "worker": ["worker0:1"]}, id="ps"),
        pytest.param({"evaluator": 1}, {}, id="evaluator-only-gives-empty-cluster"),
        pytest.param({}, {}, id="no-counts"),
        pytest.param({"worker": -1}, {}, id="negative-count-treated-as-none"),
    ],
)
def test_cluster_spec(counts, expected):
    spec = cluster_spec(counts, fake)
    assert spec == expected
    # Order is chief, ps, worker whatever the order of the counts.
    assert list(spec) == [r for r in CLUSTER_ROLES if r in expected]


def test_cluster_spec_orders_roles_whatever_the_input_order():
    spec = cluster_spec({"worker": 1, "ps": 1, "chief": 1}, fake)
    assert list(spec) == ["chief", "ps", "worker"]


@pytest.mark.parametrize(
    "counts",
    [
        pytest.param({"master": 1, "worker": 1}, id="master"),
        pytest.param({"Worker": 1}, id="capitalised"),
        pytest.param({"worker": 1, "eval": 1}, id="eval"),
    ],
)
def test_cluster_spec_unknown_roles(counts):
    with pytest.raises(ValueError, match="unknown replica roles") as info:
        cluster_spec(counts, fake)
    unknown = sorted(set(counts) - set(ROLES))
    assert str(unknown) in str(info.value)
    assert "chief" in str(info.value)  # lists the valid roles


@pytest.mark.parametrize(
    ("cluster", "role", "index"),
    [
        pytest.param(FULL, "chief", 0, id="chief"),
        pytest.param(FULL, "ps", 0, id="ps-0"),
        pytest.param(FULL, "ps", 1, id="ps-1"),
        pytest.param(FULL, "worker", 0, id="worker-0"),
        pytest.param(FULL, "worker", 2, id="worker-last"),
        pytest.param(FULL, "evaluator", 0, id="evaluator"),
        pytest.param(WORKERS_ONLY, "worker", 1, id="workers-only"),
        pytest.param(WORKERS_ONLY, "evaluator", 0, id="evaluator-without-chief"),
        pytest.param({}, "evaluator", 0, id="evaluator-empty-cluster"),
    ],
)
def test_tf_config(cluster, role, index):
    text = tf_config(cluster, role, index)
    assert json.loads(text) == {
        "cluster": cluster,
        "task": {"type": role, "index": index},
        "environment": "cloud",
    }
    assert "evaluator" not in json.loads(text)["cluster"]
    assert text == json.dumps(json.loads(text), sort_keys=True)  # stable, sorted keys


@pytest.mark.parametrize(
    ("cluster", "role", "index", "match"),
    [
        pytest.param(FULL, "master", 0, "unknown role 'master'", id="unknown-role"),
        pytest.param(FULL, "", 0, "unknown role ''", id="empty-role"),
        pytest.param(FULL, "worker", 3, "worker index 3 is outside", id="worker-past-end"),
        pytest.param(FULL, "chief", 1, "chief index 1 is outside", id="second-chief"),
        pytest.param(FULL, "ps", 2, "ps index 2 is outside", id="ps-past-end"),
        pytest.param(WORKERS_ONLY, "ps", 0, "ps index 0 is outside", id="role-absent"),
        pytest.param(WORKERS_ONLY, "chief", 0, "chief index 0 is outside", id="chief-absent"),
        pytest.param(FULL, "worker", -1, "worker index -1 is outside", id="negative-worker"),
        pytest.param(FULL, "evaluator", -1, "evaluator index -1", id="negative-evaluator"),
    ],
)
def test_tf_config_errors(cluster, role, index, match):
    with pytest.raises(ValueError, match=match):
        tf_config(cluster, role, index)


@pytest.mark.parametrize(
    ("cluster", "role", "index", "expected"),
    [
        pytest.param(
            NO_CHIEF,
            "worker",
            1,
            [
                "--ps_hosts=p0:1",
                "--worker_hosts=w0:1,w1:1",
                "--job_name=worker",
                "--task_index=1",
            ],
            id="no-chief-worker",
        ),
        pytest.param(
            NO_CHIEF,
            "ps",
            0,
            ["--ps_hosts=p0:1", "--worker_hosts=w0:1,w1:1", "--job_name=ps", "--task_index=0"],
            id="no-chief-ps",
        ),
        pytest.param(
            FULL,
            "chief",
            0,
            [
                "--ps_hosts=p0:1,p1:1",
                "--worker_hosts=w0:1,w1:1,w2:1",
                "--chief_hosts=c0:1",
                "--job_name=chief",
                "--task_index=0",
            ],
            id="with-chief",
        ),
        pytest.param(
            WORKERS_ONLY,
            "worker",
            0,
            ["--ps_hosts=", "--worker_hosts=w0:1,w1:1", "--job_name=worker", "--task_index=0"],
            id="no-ps-empty-ps-hosts",
        ),
        pytest.param(
            FULL,
            "evaluator",
            0,
            [
                "--ps_hosts=p0:1,p1:1",
                "--worker_hosts=w0:1,w1:1,w2:1",
                "--chief_hosts=c0:1",
                "--job_name=evaluator",
                "--task_index=0",
            ],
            id="evaluator",
        ),
        pytest.param(
            {"chief": [], "worker": ["w0:1"]},
            "worker",
            0,
            ["--ps_hosts=", "--worker_hosts=w0:1", "--job_name=worker", "--task_index=0"],
            id="empty-chief-list-no-flag",
        ),
    ],
)
def test_classic_flags(cluster, role, index, expected):
    assert classic_flags(cluster, role, index) == expected


@pytest.mark.parametrize(
    ("role", "index", "num_workers", "expected"),
    [
        pytest.param("worker", 0, 1, (0, 1), id="single-worker"),
        pytest.param("worker", 0, 3, (0, 3), id="worker-0-of-3"),
        pytest.param("worker", 2, 3, (2, 3), id="worker-2-of-3"),
        pytest.param("chief", 0, 3, None, id="chief"),
        pytest.param("ps", 1, 3, None, id="ps"),
        pytest.param("evaluator", 0, 3, None, id="evaluator"),
    ],
)
def test_shard_for(role, index, num_workers, expected):
    assert shard_for(role, index, num_workers) == expected


@pytest.mark.parametrize(
    ("job", "port", "namespace", "role", "index", "expected"),
    [
        pytest.param(
            "mnist", 2222, None, "worker", 0, "mnist-worker-0.mnist-worker:2222", id="no-ns"
        ),
        pytest.param("mnist", 2222, None, "ps", 3, "mnist-ps-3.mnist-ps:2222", id="no-ns-ps"),
        pytest.param(
            "mnist", 2222, "", "chief", 0, "mnist-chief-0.mnist-chief:2222", id="empty-ns"
        ),
        pytest.param(
            "mnist", 2222, "ml", "worker", 1, "mnist-worker-1.mnist-worker.ml.svc:2222", id="ns"
        ),
        pytest.param(
            "j-1", 5000, "team-a", "chief", 0, "j-1-chief-0.j-1-chief.team-a.svc:5000", id="port"
        ),
    ],
)
def test_service_address(job, port, namespace, role, index, expected):
    assert service_address(job, port, namespace)(role, index) == expected


@pytest.mark.parametrize(
    ("namespace", "shard_size", "role", "index", "expected"),
    [
        pytest.param(None, None, "worker", 0, "mnist-worker-0.mnist:2222", id="plain"),
        pytest.param("ml", None, "ps", 1, "mnist-ps-1.mnist.ml.svc:2222", id="ns"),
        pytest.param(None, 3, "worker", 4, "mnist-worker-s1-1.mnist:2222", id="shard"),
    ],
)
def test_one_service_addresses_every_replica_through_the_job_s_service(
    namespace, shard_size, role, index, expected
):
    """Jobs made before 2026-12-04 keep the one Service named after the job."""
    address = service_address("mnist", 2222, namespace, shard_size, one_service=True)
    assert address(role, index) == expected


@pytest.mark.parametrize(
    ("job", "port", "namespace", "expected"),
    [
        pytest.param("mnist", 2222, None, "mnist-{role}-{index}.mnist-{role}:2222", id="no-ns"),
        pytest.param(
            "j-1", 5000, "team-a", "j-1-{role}-{index}.j-1-{role}.team-a.svc:5000", id="ns"
        ),
    ],
)
def test_service_address_rule(job, port, namespace, expected):
    rule = service_address_rule(job, port, namespace)
    assert rule == expected
    assert rule_address(rule)("ps", 7) == service_address(job, port, namespace)("ps", 7)


@pytest.mark.parametrize(
    "rule",
    [
        pytest.param("j-{role}.j:1", id="no-index"),
        pytest.param("j-{index}.j:1", id="no-role"),
        pytest.param("j-{role}-{index}-{port}.j:1", id="unknown-field"),
        pytest.param("j-{role}-{index}.j:1{", id="unbalanced"),
        pytest.param("j-ps-0.j:1", id="plain-address"),
    ],
)
def test_rule_address_refuses_other_rules(rule):
    with pytest.raises(ValueError, match=r"rule|Single"):
        rule_address(rule)


@pytest.mark.parametrize(
    ("index", "size", "expected"),
    [
        pytest.param(0, 500, (0, 0), id="first"),
        pytest.param(499, 500, (0, 499), id="last-of-shard-0"),
        pytest.param(500, 500, (1, 0), id="first-of-shard-1"),
        pytest.param(4499, 500, (8, 499), id="last-of-4500"),
        pytest.param(5, 1, (5, 0), id="size-1"),
        pytest.param(4, 3, (1, 1), id="size-3"),
    ],
)
def test_shard_of(index, size, expected):
    assert shard_of(index, size) == expected
    shard, local = expected
    assert shard * size + local == index


@pytest.mark.parametrize(
    ("replicas", "size", "expected"),
    [
        pytest.param(0, 3, [], id="none"),
        pytest.param(2, 3, [2], id="within-one"),
        pytest.param(3, 3, [3], id="exactly-one"),
        pytest.param(5, 3, [3, 2], id="two"),
        pytest.param(9, 3, [3, 3, 3], id="full"),
        pytest.param(4500, 500, [500] * 9, id="4500"),
    ],
)
def test_shard_counts(replicas, size, expected):
    assert shard_counts(replicas, size) == expected
    assert sum(expected) == replicas


@pytest.mark.parametrize("bad", [0, -1, True, 2.0])
def test_shard_size_must_be_a_whole_number_of_at_least_one(bad):
    with pytest.raises(ValueError, match="shard size"):
        shard_counts(4, bad)
    with pytest.raises(ValueError, match="shard size"):
        service_address_rule("j", 1, None, bad)


def test_shard_suffix():
    assert [shard_suffix(k) for k in range(3)] == ["", "-s1", "-s2"]
    with pytest.raises(ValueError, match="at least 0"):
        shard_suffix(-1)


def test_sharded_rule_maps_a_global_index_to_its_shard_hostname():
    rule = service_address_rule("j", 2222, None, 3)
    assert rule == "j-{role}{shard:3}-{index}.j-{role}{shard:3}:2222"
    address = rule_address(rule)
    assert [address("worker", i) for i in range(7)] == [
        "j-worker-0.j-worker:2222",
        "j-worker-1.j-worker:2222",
        "j-worker-2.j-worker:2222",
        "j-worker-s1-0.j-worker-s1:2222",
        "j-worker-s1-1.j-worker-s1:2222",
        "j-worker-s1-2.j-worker-s1:2222",
        "j-worker-s2-0.j-worker-s2:2222",
    ]
    assert service_address("j", 2222, "ns", 3)("ps", 4) == "j-ps-s1-1.j-ps-s1.ns.svc:2222"


def test_sharded_rule_keeps_the_addresses_of_the_first_shard():
    """A role within shard 0 is addressed exactly as without shards."""
    plain, sharded = service_address("j", 2222), service_address("j", 2222, None, 500)
    assert [plain("ps", i) for i in range(500)] == [sharded("ps", i) for i in range(500)]


@pytest.mark.parametrize(
    "rule",
    [
        pytest.param("j-{role}{shard}-{index}.j:1", id="shard-without-size"),
        pytest.param("j-{role}{shard:0}-{index}.j:1", id="shard-size-0"),
        pytest.param("j-{role}{shard:x}-{index}.j:1", id="shard-size-text"),
        pytest.param("j-{role}{shard:2}-{index}.j{shard:3}:1", id="two-shard-sizes"),
        pytest.param("j-{role}-{index:03}.j:1", id="format-spec"),
        pytest.param("j-{role!r}-{index}.j:1", id="conversion"),
    ],
)
def test_rule_address_refuses_bad_shard_rules(rule):
    with pytest.raises(ValueError, match="rule"):
        rule_address(rule)


def test_rule_with_literal_braces_keeps_them():
    assert rule_address("{{x}}-{role}-{index}")("ps", 1) == "{x}-ps-1"


def test_service_address_builds_a_cluster():
    spec = cluster_spec({"ps": 1, "worker": 2}, service_address("j", 2222))
    assert spec == {
        "ps": ["j-ps-0.j-ps:2222"],
        "worker": ["j-worker-0.j-worker:2222", "j-worker-1.j-worker:2222"],
    }


@pytest.mark.parametrize(
    ("host", "role", "index", "expected"),
    [
        pytest.param("127.0.0.1", "worker", 0, "127.0.0.1:4000", id="worker-0"),
        pytest.param("127.0.0.1", "worker", 1, "127.0.0.1:4001", id="worker-1"),
        pytest.param("127.0.0.1", "ps", 0, "127.0.0.1:5000", id="ps"),
        pytest.param("localhost", "ps", 0, "localhost:5000", id="other-host"),
    ],
)
def test_local_address(host, role, index, expected):
    ports = {"worker": [4000, 4001], "ps": [5000]}
    assert local_address(ports, host)(role, index) == expected


def test_local_address_default_host_is_loopback():
    assert local_address({"worker": [1234]})("worker", 0) == "127.0.0.1:1234"


def test_local_address_builds_a_cluster():
    ports = {"chief": [3000], "worker": [4000, 4001], "evaluator": [6000]}
    spec = cluster_spec({"chief": 1, "worker": 2, "evaluator": 1}, local_address(ports))
    assert spec == {
        "chief": ["127.0.0.1:3000"],
        "worker": ["127.0.0.1:4000", "127.0.0.1:4001"],
    }
