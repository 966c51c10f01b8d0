"""Helpers shared by the tests in tests/cluster (not a test module)."""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TypeVar

from kubernetes import client

REPO = Path(__file__).resolve().parents[2]
KUBE_TOOLS = REPO / "tools" / "kube"

T = TypeVar("T")


@dataclass
class KubeCluster:
    """What the `kube_cluster` fixture yields."""

    kubeconfig: Path  # admin kubeconfig (token auth, CA file): also for kubectl/subprocesses
    server: str  # https://127.0.0.1:<port>
    api_client: client.ApiClient  # official `kubernetes` client, verifying the apiserver CA
    core: client.CoreV1Api
    batch: client.BatchV1Api
    discovery: client.DiscoveryV1Api
    kubectl: Path  # kubectl v1.34 from the cache
    cpu_nodes: list[str]  # fake node names without GPUs
    gpu_nodes: list[str]  # fake node names with nvidia.com/gpu capacity
    logs_dir: Path  # one log file per component


def load_cluster_module() -> ModuleType:
    """Import tools/kube/cluster.py (a stdlib-only script, not part of the package)."""
    name = "tfkube_tools_kube_cluster"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, KUBE_TOOLS / "cluster.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def wait_for(
    what: str, check: Callable[[], T | None], timeout: float = 60.0, interval: float = 0.25
) -> T:
    """Call `check` until it returns something truthy; fail with `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
