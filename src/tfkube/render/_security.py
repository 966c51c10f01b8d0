"""How every pod tfkube renders is secured: Kubernetes' Pod Security levels. Pure.

Every workload (job replicas and their helper containers, TensorBoard, model servers,
notebooks) meets the `restricted` level unless its job asks for `baseline`
(`spec.podSecurity`, which a team namespace allows only when a site admin did):

    restricted  pod:       runAsNonRoot, runAsUser/runAsGroup/fsGroup 65532
                           (fsGroupChangePolicy OnRootMismatch), seccomp RuntimeDefault
                containers: allowPrivilegeEscalation false, capabilities drop ALL
                env:       HOME=/tmp where the container sets none (stock images have no
                           home for 65532; /tmp is writable in them)
    baseline    pod:       seccomp RuntimeDefault; containers run as their image's user

No pod gets host namespaces, host ports, hostPath volumes or privileged containers, and
no service account token unless a role names its service account (an allowed one:
`tfkube.engines.admission_refusals`). A team namespace enforces the level too
(`pod-security.kubernetes.io/enforce`), so what a controller or person creates there
beside tfkube is held to it; `tfkube.kube.pod_security` checks rendered pods the same way
(tests/unit/test_pod_security.py).
"""

from __future__ import annotations

from typing import Any

from tfkube.spec import PodSecurity

WORKLOAD_USER = 65532
"""The user, group and fsGroup of every restricted pod (tfkube's own image's user)."""
HOME_DIR = "/tmp"
"""HOME of restricted containers: stock images (TensorFlow's runs as root) have no home
for WORKLOAD_USER, and `/` is not writable for it."""

Object = dict[str, Any]


def pod_security_context(level: PodSecurity = PodSecurity.RESTRICTED) -> Object:
    """A pod's `securityContext` at `level`."""
    seccomp: Object = {"seccompProfile": {"type": "RuntimeDefault"}}
    if level is PodSecurity.BASELINE:
        return seccomp
    return {
        "runAsNonRoot": True,
        "runAsUser": WORKLOAD_USER,
        "runAsGroup": WORKLOAD_USER,
        # Volumes that support ownership (emptyDir, most claims) are made group-writable;
        # only when their root differs, so a big data claim is not walked on every start.
        "fsGroup": WORKLOAD_USER,
        "fsGroupChangePolicy": "OnRootMismatch",
        **seccomp,
    }


def container_security_context(level: PodSecurity = PodSecurity.RESTRICTED) -> Object | None:
    """A container's `securityContext` at `level` (None: the runtime's defaults)."""
    if level is PodSecurity.BASELINE:
        return None
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def secure_container(
    container: Object, level: PodSecurity = PodSecurity.RESTRICTED, home: bool = True
) -> Object:
    """`container` with its security context at `level` (merged over what it has, ours
    winning) and, at restricted, HOME=/tmp unless its env sets HOME (`home=False`: leave
    HOME to the image, e.g. an image whose own HOME is writable by its user)."""
    context = container_security_context(level)
    out = dict(container)
    if context is not None:
        out["securityContext"] = {**(container.get("securityContext") or {}), **context}
    if level is PodSecurity.RESTRICTED and home:
        env = list(container.get("env") or [])
        if not any(e.get("name") == "HOME" for e in env):
            out["env"] = [{"name": "HOME", "value": HOME_DIR}, *env]
    return out
