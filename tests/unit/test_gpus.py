"""GPU placement for the local engine (pure parts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfkube.engines.local._gpus import NotEnoughGpus, assign_gpus, available_gpus


@pytest.mark.parametrize(
    ("env", "devices", "expected"),
    [
        pytest.param({"TFKUBE_GPUS": "0,1"}, [], ["0", "1"], id="configured"),
        pytest.param({"TFKUBE_GPUS": " 2 , 3 "}, [], ["2", "3"], id="spaces"),
        pytest.param({"TFKUBE_GPUS": ""}, ["nvidia0"], [], id="empty-overrides-devices"),
        pytest.param({"TFKUBE_GPUS": "none"}, ["nvidia0"], [], id="none"),
        pytest.param(
            {},
            ["nvidia1", "nvidia0", "nvidia10", "nvidiactl", "nvidia-uvm"],
            ["0", "1", "10"],
            id="detected-from-dev",
        ),
        pytest.param({}, [], [], id="no-gpus"),
    ],
)
def test_available_gpus(
    tmp_path: Path, env: dict[str, str], devices: list[str], expected: list[str]
) -> None:
    for name in devices:
        (tmp_path / name).touch()
    assert available_gpus(env, tmp_path) == expected


@pytest.mark.parametrize(
    ("requests", "available", "in_use", "expected"),
    [
        pytest.param(
            [("ps-0", 0), ("worker-0", 1), ("worker-1", 1)],
            ["0", "1"],
            [],
            {"ps-0": [], "worker-0": ["0"], "worker-1": ["1"]},
            id="one-each",
        ),
        pytest.param(
            [("worker-0", 2)], ["0", "1", "2"], ["0"], {"worker-0": ["1", "2"]}, id="skips-busy"
        ),
        pytest.param([("ps-0", 0)], [], [], {"ps-0": []}, id="cpu-only-on-no-gpus"),
    ],
)
def test_assign_gpus(
    requests: list[tuple[str, int]],
    available: list[str],
    in_use: list[str],
    expected: dict[str, list[str]],
) -> None:
    assert assign_gpus(requests, available, in_use) == expected


def test_assign_gpus_refuses_more_than_free() -> None:
    with pytest.raises(NotEnoughGpus, match="asks for 3 GPUs; 1 of this machine's 2 are free"):
        assign_gpus([("worker-0", 3)], ["0", "1"], ["1"])
