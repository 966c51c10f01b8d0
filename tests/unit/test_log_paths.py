"""A log as the dashboard shows it names the server's folders as the job knows them
(`tfkube.server.outputs.logs.job_paths`, pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfkube.engines import JobStorage
from tfkube.server.outputs.logs import job_paths

DATA = Path("/srv/tfkube")
STORAGE = JobStorage(
    DATA / "teams/v/outputs/j1",
    log_path=str(DATA / "teams/v/outputs/j1"),
    data_path=str(DATA / "teams/v/data/j1"),
    work_path=str(DATA / "teams/v/engine/jobs/mnist/work"),
)
WORK = "/srv/tfkube/teams/v/engine/jobs/mnist/work"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (
            "saving /srv/tfkube/teams/v/outputs/j1/model.ckpt-7",
            "saving $TFKUBE_LOG_DIR/model.ckpt-7",
        ),
        ("'/srv/tfkube/teams/v/data/j1': 3 files", "'$TFKUBE_DATA_DIR': 3 files"),
        (f"{WORK}/worker-0/code/run.sh", "$TFKUBE_WORK_DIR/code/run.sh"),
        (
            f"{WORK}/worker-1/code",
            "\N{HORIZONTAL ELLIPSIS}/teams/v/engine/jobs/mnist/work/worker-1/code",
        ),
        ("/srv/tfkube/teams/v/outputs/j10/x", "\N{HORIZONTAL ELLIPSIS}/teams/v/outputs/j10/x"),
        ("/srv/tfkube2/x and /srv/tfkube", "/srv/tfkube2/x and \N{HORIZONTAL ELLIPSIS}"),
        ("no path here", "no path here"),
    ],
)
def test_a_replicas_log_names_its_folders(text: str, shown: str) -> None:
    assert job_paths(STORAGE, [DATA], "worker-0").shown(text) == shown


def test_the_jobs_text_names_any_replicas_working_folder() -> None:
    paths = job_paths(STORAGE, [DATA])
    assert paths.shown(f"worker-3 failed: {WORK}/worker-3/code/train.py") == (
        "worker-3 failed: $TFKUBE_WORK_DIR/code/train.py"
    )
    assert (
        paths.shown(f"{WORK}/worker-03")
        == "\N{HORIZONTAL ELLIPSIS}/teams/v/engine/jobs/mnist/work/worker-03"
    )


def test_a_cluster_job_has_only_what_the_server_knows() -> None:
    storage = JobStorage(DATA / "teams/v/outputs/mnist", kept=False)
    paths = job_paths(storage, [DATA, Path("/real/tfkube")], "worker-0")
    assert paths.shown("/srv/tfkube/teams/v/outputs/mnist/x") == "$TFKUBE_LOG_DIR/x"
    assert paths.shown("/real/tfkube/blobs") == "\N{HORIZONTAL ELLIPSIS}/blobs"
    assert paths.shown("/tfkube/logs/x") == "/tfkube/logs/x"  # the pod's own folder
