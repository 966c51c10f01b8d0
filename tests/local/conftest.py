"""Jobs made of small shell entrypoints: the local engine's machinery without TensorFlow."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tfkube.engines.local import LocalBackend
from tfkube.spec import TFJob, parse_job

MakeJob = Callable[..., tuple[TFJob, Path]]


@pytest.fixture
def backend(tfkube_home: Path) -> LocalBackend:
    return LocalBackend(tfkube_home)


@pytest.fixture
def make_job(tmp_path: Path) -> MakeJob:
    """Write a code folder whose run.sh is `script`; return (job, folder to submit from)."""

    def make(
        name: str,
        script: str,
        *,
        workers: int = 1,
        ps: int = 0,
        chief: int = 0,
        evaluator: int = 0,
        policy: dict[str, Any] | None = None,
        extra_files: dict[str, str] | None = None,
    ) -> tuple[TFJob, Path]:
        folder = tmp_path / f"code-{name}"
        folder.mkdir()
        run = folder / "run.sh"
        run.write_text("#!/usr/bin/env bash\n" + textwrap.dedent(script))
        run.chmod(0o755)
        for rel, text in (extra_files or {}).items():
            (folder / rel).write_text(text)
        replicas: dict[str, Any] = {"worker": {"replicas": workers}}
        if ps:
            replicas["ps"] = {"replicas": ps}
        if chief:
            replicas["chief"] = {"replicas": chief}
        if evaluator:
            replicas["evaluator"] = {"replicas": evaluator}
        job = parse_job(
            {
                "apiVersion": "tfkube.io/v1alpha1",
                "kind": "TFJob",
                "metadata": {"name": name},
                "spec": {
                    "replicas": replicas,
                    "code": {"source": folder.name},
                    "runPolicy": {"terminationGraceSeconds": 2, **(policy or {})},
                },
            }
        )
        return job, tmp_path

    return make
