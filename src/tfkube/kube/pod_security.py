"""Kubernetes' Pod Security Standards as a pure check of a pod spec.

`violations(pod_spec, level)` lists what keeps a pod (a plain dict, e.g. a rendered pod
template's `spec`) from meeting the `baseline` or `restricted` level, each naming the
field, in the terms of https://kubernetes.io/docs/concepts/security/pod-security-standards/
(the rules of Kubernetes 1.34). A team namespace enforces its level with Kubernetes' own
Pod Security admission (`pod-security.kubernetes.io/enforce`); this check is how tfkube's
tests hold every rendered workload to the same rules without a cluster
(tests/unit/test_pod_security.py), and the cluster tests check both agree.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from tfkube.spec import PodSecurity

BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
"""What baseline lets a container add (the runtime's defaults)."""
RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
SELINUX_TYPES = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"

Object = Mapping[str, Any]


def _containers(pod: Object) -> Iterator[tuple[str, Object]]:
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for i, container in enumerate(pod.get(kind) or []):
            yield f"spec.{kind}[{i}]", container


def _seccomp_unconfined(context: Object | None) -> bool:
    profile = (context or {}).get("seccompProfile") or {}
    return profile.get("type") == "Unconfined"


def _apparmor_unconfined(context: Object | None) -> bool:
    profile = (context or {}).get("appArmorProfile") or {}
    return profile.get("type") == "Unconfined"


def _selinux(where: str, context: Object | None) -> list[str]:
    options = (context or {}).get("seLinuxOptions") or {}
    out = []
    if options.get("type", "") not in SELINUX_TYPES:
        out.append(f"{where}.seLinuxOptions.type: {options['type']!r} is not allowed")
    for key in ("user", "role"):
        if options.get(key):
            out.append(f"{where}.seLinuxOptions.{key}: must not be set")
    return out


def _baseline(pod: Object, annotations: Mapping[str, str]) -> list[str]:
    out: list[str] = []
    context = pod.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            out.append(f"spec.{key}: host namespaces are not allowed")
    if (context.get("windowsOptions") or {}).get("hostProcess"):
        out.append("spec.securityContext.windowsOptions.hostProcess: not allowed")
    if _seccomp_unconfined(context):
        out.append("spec.securityContext.seccompProfile.type: Unconfined is not allowed")
    if _apparmor_unconfined(context):
        out.append("spec.securityContext.appArmorProfile.type: Unconfined is not allowed")
    out += _selinux("spec.securityContext", context)
    for sysctl in context.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            out.append(f"spec.securityContext.sysctls: {sysctl.get('name')!r} is not safe")
    for i, volume in enumerate(pod.get("volumes") or []):
        if "hostPath" in volume:
            out.append(f"spec.volumes[{i}].hostPath: hostPath volumes are not allowed")
    for key, value in annotations.items():
        allowed = value in ("runtime/default", "") or value.startswith("localhost/")
        if key.startswith(APPARMOR_ANNOTATION) and not allowed:
            out.append(f"metadata.annotations[{key!r}]: {value!r} is not allowed")
    for where, container in _containers(pod):
        c = container.get("securityContext") or {}
        if c.get("privileged"):
            out.append(f"{where}.securityContext.privileged: privileged is not allowed")
        if (c.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"{where}.securityContext.windowsOptions.hostProcess: not allowed")
        added = set((c.get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
        if added:
            out.append(f"{where}.securityContext.capabilities.add: {sorted(added)} not allowed")
        if c.get("procMount") not in (None, "Default"):
            out.append(f"{where}.securityContext.procMount: must be Default")
        if _seccomp_unconfined(c):
            out.append(f"{where}.securityContext.seccompProfile.type: Unconfined not allowed")
        if _apparmor_unconfined(c):
            out.append(f"{where}.securityContext.appArmorProfile.type: Unconfined not allowed")
        out += _selinux(f"{where}.securityContext", c)
        for j, port in enumerate(container.get("ports") or []):
            if port.get("hostPort"):
                out.append(f"{where}.ports[{j}].hostPort: host ports are not allowed")
    return out


def _restricted(pod: Object) -> list[str]:
    out: list[str] = []
    context = pod.get("securityContext") or {}
    for i, volume in enumerate(pod.get("volumes") or []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"spec.volumes[{i}]: {', '.join(sorted(kinds))} volumes are not allowed")
    if context.get("runAsUser") == 0:
        out.append("spec.securityContext.runAsUser: 0 (root) is not allowed")
    pod_profile = (context.get("seccompProfile") or {}).get("type")
    for where, container in _containers(pod):
        c = container.get("securityContext") or {}
        if c.get("allowPrivilegeEscalation") is not False:
            out.append(f"{where}.securityContext.allowPrivilegeEscalation: must be false")
        non_root = c.get("runAsNonRoot", context.get("runAsNonRoot"))
        if non_root is not True:
            out.append(f"{where}.securityContext.runAsNonRoot: must be true (here or the pod's)")
        if c.get("runAsUser") == 0:
            out.append(f"{where}.securityContext.runAsUser: 0 (root) is not allowed")
        profile = (c.get("seccompProfile") or {}).get("type", pod_profile)
        if profile not in ("RuntimeDefault", "Localhost"):
            out.append(
                f"{where}.securityContext.seccompProfile.type: must be RuntimeDefault or "
                "Localhost (here or the pod's)"
            )
        capabilities = c.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            out.append(f"{where}.securityContext.capabilities.drop: must include ALL")
        added = set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}
        if added:
            out.append(f"{where}.securityContext.capabilities.add: {sorted(added)} not allowed")
    return out


def violations(
    pod: Object,
    level: PodSecurity = PodSecurity.RESTRICTED,
    annotations: Mapping[str, str] | None = None,
) -> list[str]:
    """What keeps the pod spec `pod` (with its `annotations`) from meeting `level`."""
    out = _baseline(pod, annotations or {})
    if level is PodSecurity.RESTRICTED:
        out += _restricted(pod)
    return out


def template_violations(obj: Object, level: PodSecurity = PodSecurity.RESTRICTED) -> list[str]:
    """The violations of a workload's pod template (Job, Deployment, StatefulSet, ...),
    or of a Pod; [] for objects that make no pods."""
    if obj.get("kind") == "Pod":
        pod, meta = obj.get("spec") or {}, obj.get("metadata") or {}
    else:
        template = (obj.get("spec") or {}).get("template")
        if not template:
            return []
        pod, meta = template.get("spec") or {}, template.get("metadata") or {}
    return violations(pod, level, meta.get("annotations") or {})
