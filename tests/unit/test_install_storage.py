"""`tfkube install`'s storage check (pure): what jobs and the server get on a cluster with
or without a default StorageClass, and what it refuses before applying anything. The
cluster half (a real API server without a StorageClass) is in
tests/cluster/test_server_kubernetes.py."""

from __future__ import annotations

from typing import Any

import pytest

from tfkube.engines.kubernetes._storage_check import (
    StorageFindings,
    default_classes,
    plan_storage,
)
from tfkube.render import ServerInstall, StorageDefaults, install_manifests, server_manifests

BARE = StorageFindings(classes=())
"""A bare cluster: no StorageClass at all (the test control plane)."""
NFS = StorageFindings(classes=("nfs",))
"""A class, but no default one."""
DEFAULTED = StorageFindings(classes=("fast", "standard"), default_classes=("standard",))
UNKNOWN = StorageFindings(classes=None)
"""The installer may not list StorageClasses."""


def _class(name: str, default: str | None = None) -> dict[str, Any]:
    annotations = {} if default is None else {default: "true"}
    return {"metadata": {"name": name, "annotations": annotations}}


def test_default_classes_by_either_annotation():
    classes = [
        _class("a"),
        _class("b", "storageclass.kubernetes.io/is-default-class"),
        _class("c", "storageclass.beta.kubernetes.io/is-default-class"),
        _class("d"),
    ]
    classes[3]["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] = "false"
    assert default_classes(classes) == ("b", "c")


@pytest.mark.parametrize(
    ("found", "jobs", "words"),
    [
        pytest.param(BARE, None, ["a job gets a claim only when it asks for one",
                                  "no default StorageClass", "StorageClasses: none"], id="bare"),
        pytest.param(DEFAULTED, None, ["the default StorageClass standard"], id="default-class"),
        pytest.param(UNKNOWN, None, ["could not list StorageClasses"], id="unreadable"),
        pytest.param(NFS, StorageDefaults(logs_storage_class="nfs"),
                     ["new claim <job>-logs (10Gi, ReadWriteMany) of the StorageClass nfs"],
                     id="admin-class"),
        pytest.param(BARE, StorageDefaults(logs_claim="outputs"),
                     ["a folder of the claim outputs", "in every namespace"], id="admin-claim"),
    ],
)  # fmt: skip
def test_what_jobs_get_is_said(found, jobs, words):
    plan = plan_storage(found, "tfkube-system", None, jobs)
    assert not plan.refusals
    text = " | ".join(plan.notes)
    for w in words:
        assert w in text, text


@pytest.mark.parametrize(
    ("found", "server", "words"),
    [
        pytest.param(DEFAULTED, ServerInstall(), ["new claim tfkube-server-data (20Gi) of the "
                                                  "default StorageClass standard"], id="default"),
        pytest.param(NFS, ServerInstall(storage_class="nfs"), ["of the StorageClass nfs"],
                     id="named-class"),
        pytest.param(StorageFindings(classes=(), claims={"mine": "Bound"}),
                     ServerInstall(data_claim="mine"),
                     ["its data folder from the claim mine in namespace ops (Bound)"],
                     id="admin-claim-bound"),
        pytest.param(StorageFindings(classes=(), claims={"mine": None}),
                     ServerInstall(data_claim="mine"),
                     ["warning: the claim mine in namespace ops (its data folder) does not "
                      "exist yet: the server's pod waits (Pending)"], id="admin-claim-missing"),
        pytest.param(StorageFindings(classes=(), claims={"mine": "Pending"}),
                     ServerInstall(data_claim="mine"),
                     ["is Pending: the server's pod (tfkube-server) starts once it is bound"],
                     id="admin-claim-pending"),
        pytest.param(StorageFindings(classes=(), claims={"mine": "Bound", "out": None}),
                     ServerInstall(data_claim="mine", outputs_claim="out"),
                     ["the claim out in namespace ops (the teams' kept outputs) does not exist"],
                     id="outputs-claim-missing"),
        pytest.param(UNKNOWN, ServerInstall(), ["not checked"], id="unreadable"),
    ],
)  # fmt: skip
def test_what_the_server_gets_is_said(found, server, words):
    plan = plan_storage(found, "ops", server)
    assert not plan.refusals, plan.refusals
    text = " | ".join(plan.notes)
    for w in words:
        assert w in text, text


@pytest.mark.parametrize(
    ("found", "server", "jobs", "words"),
    [
        pytest.param(BARE, ServerInstall(), None,
                     ["no default StorageClass, so the server's data claim tfkube-server-data "
                      "would never be bound", "never an emptyDir", "--storage-class NAME",
                      "--data-claim NAME", "tfkube-server-database"],
                     id="server-on-a-bare-cluster"),
        pytest.param(NFS, ServerInstall(), None, ["StorageClasses: nfs"],
                     id="server-without-a-default-class"),
        pytest.param(NFS, ServerInstall(storage_class="fast"), None,
                     ["--storage-class fast: this cluster has no such StorageClass (it has: nfs)"],
                     id="server-class-missing"),
        pytest.param(BARE, ServerInstall(storage_class="nfs", data_claim="x"), None,
                     ["give one"], id="both"),
        pytest.param(BARE, None, StorageDefaults(logs_storage_class="nfs"),
                     ["--logs-storage-class nfs: this cluster has no such StorageClass "
                      "(it has: none)"], id="jobs-class-missing"),
    ],
)  # fmt: skip
def test_what_cannot_work_is_refused(found, server, jobs, words):
    plan = plan_storage(found, "ops", server, jobs)
    text = " | ".join(plan.refusals)
    for w in words:
        assert w in text, text


def test_an_admins_claim_replaces_the_servers_own():
    objects = server_manifests("ops", "img", ServerInstall(data_claim="mine"))
    assert not [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "mine"}} in volumes


@pytest.mark.parametrize(
    ("storage", "env"),
    [
        (None, {}),
        (StorageDefaults(), {}),
        (StorageDefaults(logs_storage_class="nfs"), {"TFKUBE_LOGS_STORAGE_CLASS": "nfs"}),
        (
            StorageDefaults(logs_storage_class="nfs", logs_size="1Ti"),
            {"TFKUBE_LOGS_STORAGE_CLASS": "nfs", "TFKUBE_LOGS_SIZE": "1Ti"},
        ),
        (StorageDefaults(logs_claim="outputs"), {"TFKUBE_LOGS_CLAIM": "outputs"}),
    ],
)
def test_the_operators_storage_settings_reach_its_deployment(storage, env):
    from tfkube.operator import OperatorSettings

    deployment = next(o for o in install_manifests(storage=storage) if o["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    given = {e["name"]: e["value"] for e in container["env"] if e["name"].startswith("TFKUBE_LOGS")}
    assert given == env
    # ... and the operator reads them back as they were given.
    assert OperatorSettings.read(given).storage == (storage or StorageDefaults())


def test_contradicting_operator_settings_are_refused():
    from tfkube.operator import OperatorSettings

    with pytest.raises(ValueError, match="not both"):
        OperatorSettings.read({"TFKUBE_LOGS_STORAGE_CLASS": "a", "TFKUBE_LOGS_CLAIM": "b"})
