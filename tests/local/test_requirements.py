"""A code folder's requirements.txt: installed at submit (with uv, from the package index
given, `--package-index`) into a cached virtual environment that every replica runs with
and the next job reuses; an install failure is the job's set-up failing: exit code 2,
nothing started, not retried.

The index is the test's own, on 127.0.0.1 (`tests/pyindex.py`), holding a tiny wheel
that tfkube's own environment does not have: no test reaches PyPI.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyindex import TINY, PackageIndex, tiny_index
from tfkube.engines.local import LocalBackend
from tfkube.launcher import ensure_venv
from tfkube.planner import JobPhase
from tfkube.spec import SpecError

from .conftest import MakeJob
from .test_cli import tfkube, write_job
from .test_engine import WAIT

MISSING = "tfkube_test_tiny"

USES_IT = f"""
python3 -c 'import {MISSING}, yaml, sys
print("imported", {MISSING}.__name__, yaml.__name__, sys.prefix)'
"""


@pytest.fixture(autouse=True)
def _machine_lacks_the_package() -> None:
    assert importlib.util.find_spec(MISSING) is None, f"{MISSING} is installed here already"


@pytest.fixture
def index(tmp_path: Path) -> Iterator[PackageIndex]:
    served = tiny_index(tmp_path / "index")
    yield served
    served.stop()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("TFKUBE_CACHE", str(path))
    return path


def test_requirements_are_installed_once_and_shared(
    tfkube_home: Path, make_job: MakeJob, cache: Path, index: PackageIndex
) -> None:
    backend = LocalBackend(tfkube_home, package_indexes=(index.url,))
    job, base = make_job(
        "deps",
        USES_IT,
        workers=2,
        policy={"successPolicy": "AllWorkers", "restartPolicy": "Never"},
        extra_files={"requirements.txt": f"{TINY}\n"},
    )
    backend.submit(job, base)
    view = backend.wait(job.name, timeout=WAIT)
    assert view.phase is JobPhase.SUCCEEDED, view.message
    venvs = [p for p in (cache / "venvs").iterdir() if p.is_dir()]
    assert len(venvs) == 1
    for worker in ("worker-0", "worker-1"):
        # The job's package, and tfkube's own (yaml) seen through the environment.
        assert f"imported {MISSING} yaml {venvs[0]}" in list(backend.logs(job.name, worker))
    ready = (venvs[0] / ".ready").stat().st_mtime_ns

    again, _ = make_job("deps-again", USES_IT, extra_files={"requirements.txt": f"{TINY}\n"})
    backend.submit(again, base)
    assert backend.wait(again.name, timeout=WAIT).phase is JobPhase.SUCCEEDED
    assert [p for p in (cache / "venvs").iterdir() if p.is_dir()] == venvs, "reused"
    assert (venvs[0] / ".ready").stat().st_mtime_ns == ready, "not rebuilt"
    assert any(r.startswith("/files/") for r in index.requests), "installed from the index"


def test_a_requirement_that_does_not_install_fails_the_submit(
    tfkube_home: Path, tmp_path: Path, cache: Path, index: PackageIndex
) -> None:
    path = write_job(tmp_path, "baddeps", "exit 0\n")
    (tmp_path / "code" / "requirements.txt").write_text("tfkube-no-such-package-zz9==1.0\n")
    result = tfkube("run", "--package-index", index.url, str(path))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "spec.code.source" in result.stderr
    assert "requirements.txt does not install" in result.stderr
    assert "tfkube-no-such-package-zz9" in result.stderr
    jobs = tfkube_home / "jobs"
    assert not jobs.exists() or not any(jobs.iterdir()), "nothing half-created"
    venvs = cache / "venvs"
    assert not any(p.is_dir() for p in venvs.iterdir()), "no half-built environment"
    assert "/simple/tfkube-no-such-package-zz9/" in index.requests, "asked the index given"


def test_a_bad_package_index_is_refused(tmp_path: Path) -> None:
    path = write_job(tmp_path, "badindex", "exit 0\n")
    result = tfkube("run", "--package-index", "ftp://example.invalid/", str(path))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--package-index" in result.stderr
    assert "http:// or https://" in result.stderr


def test_backend_reports_the_failure_on_the_spec(
    tfkube_home: Path, make_job: MakeJob, cache: Path
) -> None:
    job, base = make_job(
        "baddeps2", "exit 0\n", extra_files={"requirements.txt": "not a requirement !!\n"}
    )
    with pytest.raises(SpecError) as err:
        LocalBackend(tfkube_home).submit(job, base)
    assert err.value.errors[0].field == "spec.code.source"


CONCURRENT = """
import sys
from collections.abc import Iterator
from pathlib import Path
from tfkube.launcher import ensure_venv
print(ensure_venv(Path(sys.argv[1]), Path(sys.argv[2]), uv=sys.argv[3], index_url=sys.argv[4]))
"""


def test_concurrent_builds_of_one_environment_share_it(tmp_path: Path, index: PackageIndex) -> None:
    from uv import find_uv_bin

    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"{TINY}\n")
    cache = tmp_path / "venvs"
    argv = [
        *(sys.executable, "-c", CONCURRENT, str(requirements), str(cache)),
        *(find_uv_bin(), index.url),
    ]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(3)]
    paths = {p.communicate(timeout=WAIT)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert len(paths) == 1
    venv = Path(paths.pop())
    assert (venv / ".ready").is_file()
    assert [p.name for p in cache.iterdir() if p.is_dir()] == [venv.name]
    assert ensure_venv(requirements, cache) == venv  # ready: no installer needed
