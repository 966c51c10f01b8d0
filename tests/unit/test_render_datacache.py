"""`tfkube install --server --data-cache`: the node data cache's DaemonSet and node-local
Service, the operator naming it, and the replicas' TFKUBE_DATA_CACHE_URL (render's own
unit tests; the program itself: test_datacache.py, tests/cluster/test_datacache.py)."""

from __future__ import annotations

import subprocess
import sys

import yaml

from tfkube import contract
from tfkube.kube.names import DATA_CACHE_ENV
from tfkube.operator import OperatorSettings
from tfkube.render import (
    DATACACHE_NAME,
    OPERATOR_IMAGE,
    DataCacheInstall,
    RenderOptions,
    ServerInstall,
    install_manifests,
    render_job,
    server_manifests,
)
from tfkube.spec import load_job_text

CACHED = ServerInstall(data_cache=DataCacheInstall("/srv/cache", "5GiB"))


def _named(objects: list[dict], kind: str, name: str) -> dict:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def test_the_daemonset_and_its_node_local_service() -> None:
    objects = server_manifests("ops", "img:1", CACHED)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects][-2:] == [
        ("DaemonSet", DATACACHE_NAME),
        ("Service", DATACACHE_NAME),
    ]
    ds = _named(objects, "DaemonSet", DATACACHE_NAME)
    pod = ds["spec"]["template"]["spec"]
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert pod["volumes"] == [
        {"name": "cache", "hostPath": {"path": "/srv/cache", "type": "DirectoryOrCreate"}}
    ]
    (main,) = pod["containers"]
    assert main["image"] == "img:1"
    assert main["command"] == [
        "python3", "-m", "tfkube.datacache", "--server", "http://tfkube-server.ops.svc:8470",
        "--dir", "/cache", "--limit", "5GiB", "--port", "8470",
    ]  # fmt: skip
    service = _named(objects, "Service", DATACACHE_NAME)
    assert service["spec"]["internalTrafficPolicy"] == "Local"
    assert service["spec"]["selector"] == ds["spec"]["selector"]["matchLabels"]
    assert service["metadata"]["namespace"] == "ops"
    assert DATACACHE_NAME not in str(server_manifests("ops", "img:1", ServerInstall()))


def test_the_operator_names_the_cache_to_replicas_that_fetch_data() -> None:
    url = "http://tfkube-datacache.ops.svc:8470"
    operator = _named(install_manifests("ops", data_cache=url), "Deployment", "tfkube-operator")
    env = operator["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": DATA_CACHE_ENV, "value": url} in env
    assert OperatorSettings.read({DATA_CACHE_ENV: url}).data_cache == url
    assert OperatorSettings.read({}).data_cache is None
    job = load_job_text(
        yaml.safe_dump(
            {
                "apiVersion": "tfkube.io/v1alpha1",
                "kind": "TFJob",
                "metadata": {"name": "d"},
                "spec": {
                    "code": {"source": "https://x/c.tar.gz"},
                    "replicas": {"ps": {"replicas": 1}, "worker": {"replicas": 1}},
                },
            }
        ),
        "job",
    )
    door = "http://tfkube-server.ops.svc:8470/api/v1/data/abc123"

    def envs(cache: str | None) -> dict[str, dict[str, str]]:
        objects = render_job(
            job, RenderOptions(namespace="t", managed=True, data_url=door, data_cache=cache)
        )
        out = {}
        for o in objects:
            if o["kind"] == "Job":
                c = o["spec"]["template"]["spec"]["containers"][0]
                role = o["metadata"]["labels"]["tfkube.io/replica-type"]
                out[role] = {e["name"]: e.get("value", "") for e in c["env"]}
        return out

    cached = envs(url)
    assert cached["worker"][contract.DATA_CACHE_URL] == f"{url}/api/v1/data/abc123"
    assert contract.DATA_CACHE_URL not in cached["ps"]  # PS never read data
    assert contract.DATA_CACHE_URL not in envs(None)["worker"]


def test_the_cli_installs_it_only_when_asked() -> None:
    argv = [sys.executable, "-m", "tfkube", "install", "--server", "--print", "-n", "ml"]
    plain = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0, plain.stderr
    assert DATACACHE_NAME not in plain.stdout
    asked = subprocess.run(
        [*argv, "--data-cache", "--data-cache-size", "7GiB"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert asked.returncode == 0, asked.stderr
    objects = list(yaml.safe_load_all(asked.stdout))
    expected = install_manifests(
        "ml", OPERATOR_IMAGE, data_cache="http://tfkube-datacache.ml.svc:8470"
    )
    assert objects[: len(expected)] == expected
    ds = _named(objects, "DaemonSet", DATACACHE_NAME)
    assert "7GiB" in ds["spec"]["template"]["spec"]["containers"][0]["command"]
    bad = subprocess.run(
        [*argv, "--data-cache", "--data-cache-size", "lots"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2
    assert "--data-cache-size" in bad.stderr + bad.stdout
