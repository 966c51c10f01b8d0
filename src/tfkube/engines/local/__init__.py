"""The local engine: replicas as processes on this machine (the embedded default).

With a `TenantIsolation` (a tfkube server's team, on a machine where
`isolation_support()` says so) every replica runs confined, as the team's own OS user
(`ensure_identity`); the team's notebooks, model servers and TensorBoards are confined the
same way (`_services.py`, with `confinement_for`, `launch` and `release` of `_sandbox.py`)."""

from tfkube.engines.local._cgroups import Limits
from tfkube.engines.local._engine import LocalBackend
from tfkube.engines.local._host import LocalEngine
from tfkube.engines.local._interrupts import interrupts_held
from tfkube.engines.local._procs import free_ports
from tfkube.engines.local._sandbox import (
    Confinement,
    Launch,
    SandboxError,
    Support,
    TenantIsolation,
    confinement_for,
    isolation_support,
    launch,
    release,
)
from tfkube.engines.local._store import tfkube_home
from tfkube.engines.local._tenants import TenantError, TenantIdentity, ensure_identity, hand_over

__all__ = [
    "Confinement",
    "Launch",
    "Limits",
    "LocalBackend",
    "LocalEngine",
    "SandboxError",
    "Support",
    "TenantError",
    "TenantIdentity",
    "TenantIsolation",
    "confinement_for",
    "ensure_identity",
    "free_ports",
    "hand_over",
    "interrupts_held",
    "isolation_support",
    "launch",
    "release",
    "tfkube_home",
]
