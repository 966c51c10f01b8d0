"""The platform with real TensorFlow: upload the between-graph example, submit 1 PS + 2
workers with the four fields, wait for Succeeded, read worker-1's log after the end, fetch
the accuracy series, download the final checkpoint. On SQLite only (PostgreSQL runs the
rest of the API suite): training is slow on two cores."""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import tfkube

from ._postgres import Postgres
from ._server import Api, ServerProc, api_for
from .conftest import start_server, stop_server

pytestmark = pytest.mark.tf
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mnist-between-graph"


@pytest.fixture(scope="module")
def sqlite_platform(
    tmp_path_factory: pytest.TempPathFactory, postgres: Postgres | None
) -> Iterator[tuple[ServerProc, Api]]:
    server, admin, tag = start_server(tmp_path_factory.mktemp("tf-server"), "sqlite", None)
    try:
        yield server, admin
    finally:
        stop_server(server, admin, tag)


def test_between_graph_example_through_the_server(
    sqlite_platform: tuple[ServerProc, Api], tmp_path: Path
) -> None:
    server, admin = sqlite_platform
    user = admin.new_user()
    admin.add_member("default", user, "member")
    api = api_for(server.url, user)
    try:
        with tfkube.Client(server.url, api.token, team="default") as c:
            art = c.upload(EXAMPLE, "mnist")
            job = c.submit(name="mnist", workers=2, ps=1, code="mnist", args=["--train_steps=300"])
            done = c.wait(job.id, timeout=600, poll=1.0)
            assert done.phase == "Succeeded", (done.reason, done.message)
            assert done.code == f"mnist:{art.version}"
            ps = next(r for r in done.replicas or [] if r.key == "ps-0")
            assert ps.state == "Stopped"  # ended by the platform, not waited for
            log = "\n".join(c.logs(job.id, "worker-1"))
            assert "worker 1:" in log
            assert "steps in" in log
            scalars = c.scalars(job.id)
            accuracy = next(s for s in scalars.series if s.tag == "accuracy")
            assert accuracy.points
            assert all(0.0 <= p.value <= 1.0 for p in accuracy.points)
            assert scalars.progress.total == 300
            assert scalars.progress.fraction is not None
            files = {f.path for f in c.outputs(job.id)}
            assert "checkpoint" in files
            index = c.download(job.id, "checkpoint", tmp_path / "checkpoint").read_text()
            latest = Path(index.split('"')[1]).name  # e.g. model.ckpt-301
            assert any(f.startswith(latest) for f in files)
            bundle = c.download(job.id, "", tmp_path / "outputs.tar.gz")
            with tarfile.open(bundle) as tar:
                names = tar.getnames()
            assert f"{latest}.index" in names
            assert ".tfkube/logs/worker-1/0.log" in names
        # TensorBoard through the server's authenticating proxy, started on demand.
        base = f"/proxy/tensorboard/{job.id}"
        page = api.get(f"{base}/", timeout=120)
        assert page.status_code == 200
        assert "<tf-tensorboard" in page.text or "tensorboard" in page.text.lower()
        tags = api.get(f"{base}/data/plugin/scalars/tags", timeout=120)
        assert tags.status_code == 200
        assert "accuracy" in tags.text
        import httpx

        assert httpx.get(f"{server.url}{base}/").status_code == 401
        outsider = admin.new_user()
        stranger = api_for(server.url, outsider)
        try:
            assert stranger.get(f"{base}/").status_code == 404
        finally:
            stranger.close()
    finally:
        api.close()
