"""The server's pure rules for a cluster: a team's namespace, its NetworkPolicy, quota and
default requests; which submit refusals only make a job wait."""

from __future__ import annotations

import pytest

from tfkube.engines.kubernetes._backend import passing_refusal
from tfkube.engines.kubernetes._cluster import api_server_sources
from tfkube.kube.errors import ApiError, Unreachable, error_from
from tfkube.render._tenant import (
    DEFAULT_REQUEST,
    TenantNetwork,
    network_policy,
    parse_egress_deny,
    quota_hard,
    tenant_objects,
)


@pytest.mark.parametrize(
    ("quota", "hard"),
    [
        ({}, {}),
        ({"cpu": 8}, {"requests.cpu": "8"}),
        ({"cpu": 0.5}, {"requests.cpu": "0.5"}),
        ({"memory": 2**30}, {"requests.memory": str(2**30)}),
        ({"gpu": 2}, {"requests.nvidia.com/gpu": "2"}),
        ({"jobs": 3}, {"count/tfjobs.tfkube.io": "3"}),
        (
            {"cpu": 4, "memory": 1024, "gpu": 0, "jobs": 1},
            {
                "requests.cpu": "4",
                "requests.memory": "1024",
                "requests.nvidia.com/gpu": "0",
                "count/tfjobs.tfkube.io": "1",
            },
        ),
    ],
)
def test_quota_counts_requests_only(quota, hard):
    assert quota_hard(quota) == hard
    assert not any(key.startswith("limits.") for key in quota_hard(quota))


@pytest.mark.parametrize(
    ("quota", "kinds"),
    [
        ({}, ["Namespace", "NetworkPolicy"]),
        ({"jobs": 2}, ["Namespace", "NetworkPolicy", "ResourceQuota"]),
        ({"gpu": 1}, ["Namespace", "NetworkPolicy", "ResourceQuota"]),
        ({"cpu": 1}, ["Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange"]),
        ({"memory": 10}, ["Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange"]),
    ],
)
def test_tenant_objects(quota, kinds):
    objects = tenant_objects("tfkube-vision", quota)
    assert [o["kind"] for o in objects] == kinds
    assert objects[0]["metadata"]["name"] == "tfkube-vision"
    for obj in objects[1:]:
        assert obj["metadata"] == {
            "name": "tfkube-tenant",
            "namespace": "tfkube-vision",
            "labels": {"app.kubernetes.io/managed-by": "tfkube", "tfkube.io/component": "tenant"},
        }
    if "LimitRange" in kinds:
        # Pods that ask for nothing must still be admitted where the quota counts requests.
        limits = objects[-1]["spec"]["limits"]
        assert limits == [{"type": "Container", "defaultRequest": DEFAULT_REQUEST}]
        assert limits[0]["defaultRequest"] is not DEFAULT_REQUEST  # no shared state


@pytest.mark.parametrize("level", ["restricted", "baseline"])
def test_a_team_namespace_enforces_its_pod_security_level(level):
    """Kubernetes' own Pod Security admission, at the team's level (restricted unless a
    site admin allowed baseline): whatever creates a pod there is held to it."""
    namespace, _ = tenant_objects("tfkube-vision", {}, level)
    assert namespace["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "tfkube",
        "tfkube.io/component": "tenant",
        "pod-security.kubernetes.io/enforce": level,
        "pod-security.kubernetes.io/warn": level,
        "pod-security.kubernetes.io/audit": level,
    }
    assert (
        tenant_objects("tfkube-vision", {})[0]
        == tenant_objects("tfkube-vision", {}, "restricted")[0]
    )


def _api(status: int, message: str) -> ApiError:
    return error_from(status, "", f'{{"kind": "Status", "message": "{message}"}}')


@pytest.mark.parametrize(
    ("error", "waits"),
    [
        (_api(403, "status unknown for quota: tfkube-tenant, resources: count/tfjobs"), True),
        (_api(403, "exceeded quota: tfkube-tenant, requested: count/tfjobs.tfkube.io=1"), True),
        (_api(429, "too many requests"), True),
        (_api(500, "etcdserver: request timed out"), True),
        (_api(503, "the server is currently unable to handle the request"), True),
        (_api(403, 'tfjobs.tfkube.io is forbidden: User "x" cannot create resource'), False),
        (_api(422, "spec.replicas: Invalid value"), False),
        (_api(404, "namespaces not found"), False),
        (Unreachable("MaxRetryError"), True),  # the API server restarting: Kube's own words
        (ConnectionRefusedError(111, "Connection refused"), True),
        (ValueError("bad"), False),
    ],
)
def test_which_refusals_only_make_a_job_wait(error, waits):
    reason = passing_refusal(error)
    assert (reason is not None) is waits
    if reason is not None:
        assert reason.startswith("waiting for ")


def test_job_view_names_the_node_of_each_replicas_pod():
    """The server's replica detail shows where a replica runs: the current pod's node."""
    from tfkube.engines.kubernetes import job_view

    from ._kube_objects import NOW, T0, pod, role_job
    from .test_kube_observe import tfjob

    running = pod("ps", 0)
    running["spec"] = {"nodeName": "node-a"}
    pending = pod("worker", 0, "Pending")
    view = job_view(
        tfjob({"phase": "Running"}), [role_job("ps"), role_job("worker")], [running, pending], NOW
    )
    nodes = {r.key: r.node for r in view.replicas}
    assert nodes == {"ps-0": "node-a", "worker-0": None, "worker-1": None}
    assert view.created_at == T0


def test_a_team_namespace_admits_only_its_own_pods_tfkubes_and_the_api_server():
    """Every pod of the namespace selected (none left open), ingress only: the team's own
    pods, tfkube's namespace (by the name label the API server sets), and each source as
    a CIDR (an address becomes a /32)."""
    network = TenantNetwork(
        "tfkube-platform", ("198.19.0.1", "198.19.32.0/30", "fd00::1"), denied=()
    )
    policy = network_policy("tfkube-vision", network)
    assert policy["metadata"]["name"] == "tfkube-tenant"
    assert policy["metadata"]["namespace"] == "tfkube-vision"
    spec = policy["spec"]
    assert spec["podSelector"] == {}
    assert spec["policyTypes"] == ["Ingress"]  # nothing denied: egress not limited
    assert "egress" not in spec
    (rule,) = spec["ingress"]
    assert "ports" not in rule  # every port of the allowed peers; nothing else, any port
    assert rule["from"] == [
        {"podSelector": {}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "tfkube-platform"}}},
        {"ipBlock": {"cidr": "198.19.0.1/32"}},
        {"ipBlock": {"cidr": "198.19.32.0/30"}},
        {"ipBlock": {"cidr": "fd00::1/128"}},
    ]
    # The default: tfkube-system, no address outside the pod network.
    assert network_policy("t", TenantNetwork())["spec"]["ingress"][0]["from"][1] == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "tfkube-system"}}
    }
    assert tenant_objects("tfkube-vision", {}, network=network)[1] == policy


def test_a_team_namespace_may_not_reach_the_clouds_metadata_services_by_default():
    """Egress: every pod of the cluster and every address but the denied ones, each family
    its own block (an except must lie inside its cidr); by default the metadata services
    (AWS, GCP, Azure, OpenStack at 169.254.169.254; AWS's IPv6 one)."""
    spec = network_policy("tfkube-vision", TenantNetwork())["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    (rule,) = spec["egress"]
    assert "ports" not in rule
    assert rule["to"] == [
        {"namespaceSelector": {}},
        {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}},
        {"ipBlock": {"cidr": "::/0", "except": ["fd00:ec2::254/128"]}},
    ]
    # A site's own list replaces it; an address becomes its /32, a family without one
    # is whole.
    (rule,) = network_policy("t", TenantNetwork(denied=("198.19.250.1", "198.19.251.0/24")))[
        "spec"
    ]["egress"]
    assert rule["to"][1:] == [
        {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["198.19.250.1/32", "198.19.251.0/24"]}},
        {"ipBlock": {"cidr": "::/0"}},
    ]


@pytest.mark.parametrize(
    ("given", "denied"),
    [
        (None, ("169.254.169.254/32", "fd00:ec2::254/128")),
        ([], ("169.254.169.254/32", "fd00:ec2::254/128")),
        (["none"], ()),
        (["198.19.250.1/32"], ("198.19.250.1/32",)),
    ],
)
def test_the_egress_deny_flag_names_the_denied_addresses(given, denied):
    assert parse_egress_deny(given) == denied


@pytest.mark.parametrize(
    ("given", "says"),
    [
        (["none", "198.19.250.1"], "'none' cannot be given with addresses"),
        (["0.0.0.0/0"], "'0.0.0.0/0' denies every address"),
        (["::/0"], "'::/0' denies every address"),
        (["metadata"], "'metadata' is not an address or a CIDR"),
    ],
)
def test_a_bad_egress_deny_is_named(given, says):
    with pytest.raises(ValueError, match=says):
        TenantNetwork(denied=parse_egress_deny(given))


@pytest.mark.parametrize(
    ("namespace", "sources", "says"),
    [
        ("Tfkube", (), "not a namespace name"),
        ("-tfkube", (), "not a namespace name"),
        ("a" * 64, (), "not a namespace name"),
        ("tfkube-system", ("198.19.0.300",), "'198.19.0.300' is not an address or a CIDR"),
        ("tfkube-system", ("everywhere",), "'everywhere' is not an address or a CIDR"),
    ],
)
def test_a_bad_platform_namespace_or_source_is_named(namespace, sources, says):
    with pytest.raises(ValueError, match=says):
        TenantNetwork(namespace, sources)


class _Slices:
    """`Kube.list` over fixed EndpointSlices (the `kubernetes` Service's)."""

    def __init__(self, slices):
        self.slices, self.asked = slices, []

    def list(self, resource, namespace, selector=""):
        self.asked.append((resource.plural, namespace, selector))
        return self.slices


def test_the_api_servers_addresses_come_from_the_kubernetes_services_endpoints():
    kube = _Slices(
        [
            {"addressType": "IPv4", "endpoints": [{"addresses": ["198.19.0.1"]},
                                                  {"addresses": ["198.19.1.1"]}]},
            {"addressType": "IPv6", "endpoints": [{"addresses": ["fd00::1"]}]},
            {"addressType": "FQDN", "endpoints": [{"addresses": ["api.example"]}]},
            {"addressType": "IPv4", "endpoints": [{"addresses": ["198.19.0.1"]}]},
            {"addressType": "IPv4"},
        ]
    )  # fmt: skip
    assert api_server_sources(kube) == ("198.19.0.1/32", "198.19.1.1/32", "fd00::1/128")
    assert kube.asked == [("endpointslices", "default", "kubernetes.io/service-name=kubernetes")]
    assert api_server_sources(_Slices([])) == ()
