"""Resource use per replica on Kubernetes: the metrics API's PodMetrics mapped to replica
samples (`tfkube.kube.podmetrics`, pure) and kept by the server in the local engine's
files (`tfkube.server.outputs.usage`: real files in a temporary folder)."""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path

import pytest

from tfkube import contract
from tfkube.engines import UsageUnavailable
from tfkube.kube.podmetrics import (
    cpu_cores,
    memory_bytes,
    pod_sample,
    pods_path,
    quantity,
    replica_samples,
)
from tfkube.server.outputs.usage import (
    POLL_SECONDS,
    RETRY_SECONDS,
    UsagePoller,
    append_usage,
    at_poll,
    latest_usage,
    new_samples,
    read_usage,
    sample_line,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("12345678n", Decimal("0.012345678")),
        ("250m", Decimal("0.25")),
        ("1500u", Decimal("0.0015")),
        ("2", Decimal(2)),
        ("0", Decimal(0)),
        ("123456Ki", Decimal(123456 * 1024)),
        ("1.5Gi", Decimal(3 * 2**29)),
        ("64Mi", Decimal(64 * 2**20)),
        ("1k", Decimal(1000)),
        ("2M", Decimal(2_000_000)),
        ("1e3", Decimal(1000)),
    ],
)
def test_quantities(text: str, value: Decimal) -> None:
    assert quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "12x", "1..2", "Ki", None])
def test_a_quantity_that_is_not_one_names_the_text(text: object) -> None:
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        quantity(text)


def test_cpu_and_memory() -> None:
    assert cpu_cores("500m") == 0.5
    assert memory_bytes("1Mi") == 1048576
    assert isinstance(memory_bytes("1.5Ki"), int)


def _item(role: str | None, index: int | None, ts: str, *containers: tuple[str, str]) -> dict:
    labels = {}
    if role is not None:
        labels["tfkube.io/replica-type"] = role
    if index is not None:
        labels["batch.kubernetes.io/job-completion-index"] = str(index)
    return {
        "metadata": {"name": f"p-{role}-{index}", "labels": labels},
        "timestamp": ts,
        "window": "10.5s",
        "containers": [
            {"name": f"c{i}", "usage": {"cpu": cpu, "memory": mem}}
            for i, (cpu, mem) in enumerate(containers)
        ],
    }


def test_a_pods_containers_are_summed() -> None:
    item = _item("worker", 0, "2026-12-02T10:00:00Z", ("250m", "100Mi"), ("12500000n", "1Mi"))
    at, cores, used = pod_sample(item) or (0, 0, 0)
    assert at == 1796205600.0
    assert cores == pytest.approx(0.2625)
    assert used == 101 * 2**20


def test_pod_metrics_become_replica_samples() -> None:
    items = [
        _item("worker", 0, "2026-12-02T10:00:00Z", ("250m", "100Mi")),
        _item("worker", 1, "2026-12-02T10:00:01Z", ("1", "200Mi")),
        _item("ps", 0, "2026-12-02T10:00:02Z", ("3m", "50Mi")),
        # a restart's new pod of worker-1 beside the old one: the newest sample wins
        _item("worker", 1, "2026-12-02T10:00:11Z", ("500m", "150Mi")),
        # not a replica's pod (no role or no index): left out
        _item(None, 0, "2026-12-02T10:00:00Z", ("1", "1Mi")),
        _item("worker", None, "2026-12-02T10:00:00Z", ("1", "1Mi")),
        # no time, no containers, a quantity that is not one: skipped
        _item("chief", 0, "", ("1", "1Mi")),
        _item("evaluator", 0, "2026-12-02T10:00:00Z"),
        _item("worker", 2, "2026-12-02T10:00:00Z", ("lots", "1Mi")),
    ]
    got = replica_samples(items)
    assert set(got) == {"worker-0", "worker-1", "ps-0"}
    assert got["worker-1"] == (1796205611.0, 0.5, 150 * 2**20)
    assert got["ps-0"][1] == pytest.approx(0.003)


def test_the_metrics_api_path() -> None:
    assert pods_path("tfkube-a") == "/apis/metrics.k8s.io/v1beta1/namespaces/tfkube-a/pods"


def test_only_newer_samples_are_kept() -> None:
    samples = {
        "worker-0": (100.0, 0.5, 10),
        "worker-1": (90.0, 0.5, 10),
        "ps-0": (100.0, -1.0, 10),  # negative: never
        "../x": (100.0, 0.5, 10),  # not a replica's name: never a file
        "chief-0": (float("nan"), 0.5, 10),
    }
    assert new_samples(samples, {"worker-1": 90.0}) == {"worker-0": (100.0, 0.5, 10)}


def test_the_replicas_samples_share_the_polls_time() -> None:
    got = at_poll({"worker-0": (100.2, 0.5, 1), "ps-0": (97.9, 0.1, 2)}, 110.0)
    assert got == {"worker-0": (110.0, 0.5, 1), "ps-0": (110.0, 0.1, 2)}


def test_a_sample_line_reads_back() -> None:
    assert sample_line((1796205600.04, 0.00312, 123)) == b"[1796205600.0,0.0031,123]\n"


def test_samples_are_appended_where_the_readers_look(tmp_path: Path) -> None:
    out = str(tmp_path / "job")  # made where missing (a shipped job's folder, at first)
    append_usage(out, {"worker-0": (100.0, 0.5, 1000), "ps-0": (100.0, 0.002, 500)})
    append_usage(out, {"worker-0": (110.0, 0.75, 2000)})
    series = {s.replica: s.points for s in read_usage(out)}
    assert series == {
        "ps-0": [[100.0, 0.002, 500]],
        "worker-0": [[100.0, 0.5, 1000], [110.0, 0.75, 2000]],
    }
    assert latest_usage(out)["worker-0"] == (110.0, 0.75, 2000)


def test_a_link_in_the_usage_folder_is_not_followed(tmp_path: Path) -> None:
    out = tmp_path / "job"
    folder = out.joinpath(*contract.USAGE_SUBDIR)
    folder.mkdir(parents=True)
    target = tmp_path / "elsewhere"
    target.write_text("")
    os.symlink(target, folder / "worker-0.jsonl")
    append_usage(str(out), {"worker-0": (100.0, 0.5, 1000), "worker-1": (100.0, 0.5, 1)})
    assert target.read_text() == ""
    assert (folder / "worker-1.jsonl").read_text() == "[100.0,0.5000,1]\n"


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_poller_keeps_each_new_sample_once(tmp_path: Path) -> None:
    clock = _Clock()
    poller = UsagePoller(clock)
    out = str(tmp_path / "job")
    answers = [{"worker-0": (100.0, 0.5, 1000)}, {"worker-0": (100.0, 0.5, 1000)},
               {"worker-0": (110.0, 0.6, 1100)}]  # fmt: skip
    calls = []

    def read() -> dict[str, tuple[float, float, int]]:
        calls.append(clock.now)
        return answers[len(calls) - 1]

    poller.poll("j1", out, read)
    poller.poll("j1", out, read)  # too soon: not asked
    assert len(calls) == 1
    for _ in range(2):
        clock.now += POLL_SECONDS
        poller.poll("j1", out, read)
    assert len(calls) == 3
    # Written at the polls' times (1000 and 1010), judged new by the kubelet's (100, 110).
    points = read_usage(out)[0].points
    assert points == [[1000.0, 0.5, 1000], [1000.0 + 2 * POLL_SECONDS, 0.6, 1100]]
    # A server started again reads what was kept before writing more.
    again = UsagePoller(clock)
    clock.now += POLL_SECONDS
    again.poll("j1", out, lambda: {"worker-0": (110.0, 0.6, 1100)})
    assert len(read_usage(out)[0].points) == 2


def test_without_a_metrics_api_the_poller_says_why_and_waits(tmp_path: Path) -> None:
    clock = _Clock()
    poller = UsagePoller(clock)
    calls = []

    def missing() -> dict[str, tuple[float, float, int]]:
        calls.append(clock.now)
        raise UsageUnavailable("the cluster has no metrics API")

    poller.poll("j1", str(tmp_path / "a"), missing)
    assert poller.reason == "the cluster has no metrics API"
    clock.now += POLL_SECONDS
    poller.poll("j2", str(tmp_path / "b"), missing)  # any job: the engine said it cannot
    assert len(calls) == 1
    clock.now += RETRY_SECONDS
    poller.poll("j1", str(tmp_path / "a"), lambda: {"worker-0": (1.0, 0.1, 1)})
    assert poller.reason == ""
    assert not (tmp_path / "b").exists()
