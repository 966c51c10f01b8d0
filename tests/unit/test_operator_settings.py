"""The operator's settings: its flags and environment, read in one place, and the same names
the Deployment `tfkube install` renders sets (tests/cluster/test_operator.py installs into
another namespace and watches the registry secret reach a job)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tfkube.operator import OperatorSettings
from tfkube.render import OPERATOR_NAMESPACE, REGISTRY_SECRET, install_manifests


@pytest.mark.parametrize(
    ("environ", "namespace", "secret"),
    [
        pytest.param({}, OPERATOR_NAMESPACE, REGISTRY_SECRET, id="unset-the-install-defaults"),
        pytest.param(
            {"TFKUBE_OPERATOR_NAMESPACE": "platform"}, "platform", REGISTRY_SECRET, id="namespace"
        ),
        pytest.param(
            {"TFKUBE_OPERATOR_NAMESPACE": ""}, OPERATOR_NAMESPACE, REGISTRY_SECRET, id="empty-ns"
        ),
        pytest.param({"TFKUBE_REGISTRY_SECRET": "pull"}, OPERATOR_NAMESPACE, "pull", id="secret"),
        pytest.param({"TFKUBE_REGISTRY_SECRET": ""}, OPERATOR_NAMESPACE, None, id="no-secret"),
    ],
)
def test_read_from_the_environment(environ: dict[str, str], namespace: str, secret: str | None):
    settings = OperatorSettings.read(environ)
    assert settings.operator_namespace == namespace
    assert settings.registry_secret == secret


def test_flags_are_kept():
    settings = OperatorSettings.read({}, namespaces=("a", "b"), kubeconfig=Path("/k"), verbose=True)
    assert settings.namespaces == ("a", "b")
    assert settings.kubeconfig == Path("/k")
    assert settings.verbose


def _pod_environment(deployment: dict[str, Any], namespace: str) -> dict[str, str]:
    """The operator container's environment as the kubelet resolves it."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {}
    for var in container["env"]:
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            assert var["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
            env[var["name"]] = namespace
    return env


def test_the_operator_reads_what_its_installed_deployment_sets():
    """`tfkube install -n platform`: the operator finds the pull secret in `platform`."""
    (deployment,) = [o for o in install_manifests("platform") if o["kind"] == "Deployment"]
    settings = OperatorSettings.read(_pod_environment(deployment, "platform"))
    assert settings.operator_namespace == "platform"
    assert settings.registry_secret == REGISTRY_SECRET


def test_the_operators_identity_needs_no_password_database_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """tfkube's image runs as uid 65532, which has no passwd entry: kopf's default identity
    (getpass.getuser) raised KeyError there and the operator's pod never started."""
    import pwd

    from tfkube.operator._operator import operator_identity

    def no_entry(uid: int) -> None:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)
    assert operator_identity("tfkube-operator-5d9c", 7) == "tfkube-operator@tfkube-operator-5d9c/7"
    assert operator_identity().startswith("tfkube-operator@")


@pytest.mark.parametrize("namespace", ["team-*", "Team", "-a", "a" * 64, ""])
def test_a_namespace_is_a_name_not_a_pattern(namespace: str):
    """The operator lists and watches each namespace's pods by its name."""
    with pytest.raises(ValueError, match="not a namespace's name"):
        OperatorSettings.read({}, namespaces=(namespace,))
    assert OperatorSettings.read({}, namespaces=("team-a", "b")).namespaces == ("team-a", "b")
