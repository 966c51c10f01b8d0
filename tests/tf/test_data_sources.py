"""The between-graph example trains from S3 data on the local engine (issue 19): its digit
shards live in a real S3-compatible store (SeaweedFS, tests/s3store.py), are staged into
the job's read-only data folder before any replica starts, and the example reaches its
usual accuracy reading them there (it writes nothing into the data folder when the shards
are there)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_digits

from s3store import S3Store
from tfkube.engines.local import LocalBackend
from tfkube.engines.local._store import JobDir
from tfkube.planner import JobPhase

from .test_examples import EXAMPLES, MIN_ACCURACY, example, result_of

pytestmark = pytest.mark.tf


def digit_shards(num_shards: int) -> dict[str, bytes]:
    """The files the example would write into an empty data folder (its own seeded split:
    `load_shard` in examples/mnist-between-graph/train.py), as .npz bytes."""
    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = (x[order] / 16.0).astype(np.float32), y[order].astype(np.int64)
    n_test = len(x) // 5

    def npz(**arrays: np.ndarray) -> bytes:
        out = io.BytesIO()
        np.savez(out, **arrays)
        return out.getvalue()

    files = {"digits-test.npz": npz(x=x[:n_test], y=y[:n_test])}
    train_x, train_y = x[n_test:], y[n_test:]
    for i in range(num_shards):
        files[f"digits-train-{i}-of-{num_shards}.npz"] = npz(
            x=train_x[i::num_shards], y=train_y[i::num_shards]
        )
    return files


def test_between_graph_example_trains_from_s3(
    s3_store: S3Store, tfkube_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = s3_store.bucket()
    files = digit_shards(2)
    for name, body in files.items():
        s3_store.put(bucket, f"digits/v1/{name}", body)
    for key, value in s3_store.env.items():
        monkeypatch.setenv(key, value)
    job = example("mnist-between-graph")
    raw = job.model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["spec"]["storage"] = {
        "data": {"source": f"s3://{bucket}/digits/v1", "endpoint": s3_store.endpoint}
    }
    job = type(job).model_validate(raw)
    backend = LocalBackend(tfkube_home, cache=tmp_path / "cache")
    backend.submit(job, EXAMPLES / "mnist-between-graph")
    view = backend.wait(job.name, timeout=600)

    assert view.phase is JobPhase.SUCCEEDED, view.message
    result = result_of(view)
    assert result["test_accuracy"] >= MIN_ACCURACY
    assert result["global_step"] >= 1000
    data = JobDir(tfkube_home / "jobs" / job.name).read().data
    assert data is not None
    assert data.fetched_bytes == sum(len(b) for b in files.values())
    # Staged before any replica started; the example added nothing to the data folder.
    messages = [e.message for e in backend.events(job.name)]
    staged = next(i for i, m in enumerate(messages) if m.startswith("data staged"))
    started = next(i for i, m in enumerate(messages) if m.startswith("started "))
    assert staged < started, messages
    assert sorted(p.name for p in Path(view.data_dir or "").iterdir()) == sorted(files)
    for worker in ("worker-0", "worker-1"):
        assert any("shard" in line for line in backend.logs(job.name, worker))
