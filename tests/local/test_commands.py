"""A role's own command on the local engine, for real: Kubeflow manifests from the corpus
(tests/data/kubeflow) run as processes when their programs exist here, and are refused
before anything starts (exit 2, the field named) when they do not."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tfkube.engines.local import LocalBackend
from tfkube.planner import JobPhase
from tfkube.spec import SpecError, load_job_text, parse_job

from .test_cli import tfkube

CORPUS = Path(__file__).resolve().parents[1] / "data" / "kubeflow"
WAIT = 120


def test_sh_c_manifest_runs_here_with_the_cluster_wiring(tfkube_home: Path, tmp_path: Path):
    """02-sh-c.yaml: no code at all; `/bin/sh -c` with TF_CONFIG, no classic flags.
    Only worker-0's line is promised: its success ends the job (the default success
    policy), so worker-1 may be stopped before it prints."""
    job = load_job_text((CORPUS / "02-sh-c.yaml").read_text(), "02-sh-c.yaml")
    backend = LocalBackend(tfkube_home)
    backend.submit(job, tmp_path)
    view = backend.wait(job.name, timeout=WAIT)
    assert view.phase is JobPhase.SUCCEEDED, view
    logs = "\n".join(backend.logs(job.name))
    assert "task worker 0" in logs
    assert "--worker_hosts" not in logs  # the classic flags are for tfkube's own run.sh


def test_manifest_with_code_annotation_runs_its_command_in_the_code(
    tfkube_home: Path, tmp_path: Path
):
    """18-local-code.yaml through the CLI: `python train.py` finds train.py in the code
    folder named by tfkube.io/code-source; the PS serves until the job ends."""
    shutil.copytree(CORPUS, tmp_path / "corpus")
    manifest = tmp_path / "corpus" / "18-local-code.yaml"
    done = tfkube("run", str(manifest), timeout=WAIT)
    assert done.returncode == 0, done.stdout + done.stderr
    view = LocalBackend(tfkube_home).get("local-code")
    assert view.phase is JobPhase.SUCCEEDED
    out = Path(view.log_dir or "")
    assert (out / "worker-0.done").read_text() == "--steps=3"
    assert {r.key: r.state.value for r in view.replicas}["ps-0"] == "Stopped"


@pytest.mark.parametrize(
    ("manifest", "field", "words"),
    [
        pytest.param(
            "01-image-python-command.yaml",
            "spec.replicas.worker.command",
            "its script '/var/tf_dist_mnist/dist_mnist.py' is not on this machine",
            id="script-in-the-image",
        ),
        pytest.param(
            "08-volumes.yaml",
            "spec.replicas.worker.volumes",
            "only a cluster can provide this",
            id="volumes",
        ),
        pytest.param(
            "10-env-valuefrom.yaml",
            "spec.replicas.worker.env.AWS_ACCESS_KEY_ID",
            "only a cluster can provide this",
            id="secret-reference",
        ),
    ],
)
def test_what_this_machine_cannot_run_is_refused_before_anything_starts(
    tfkube_home: Path, tmp_path: Path, manifest: str, field: str, words: str
):
    done = tfkube("run", str(CORPUS / manifest), timeout=WAIT)
    assert done.returncode == 2, done.stdout + done.stderr
    text = " ".join(done.stderr.split())
    assert field in text, text
    assert words in text, text
    jobs = tfkube_home / "jobs"
    assert not jobs.exists() or not any(jobs.iterdir())  # nothing half-created


def test_a_program_missing_here_is_named(tfkube_home: Path, tmp_path: Path):
    job = parse_job(
        {
            "apiVersion": "tfkube.io/v1alpha1",
            "kind": "TFJob",
            "metadata": {"name": "nohorovod"},
            "spec": {"replicas": {"worker": {"command": ["horovodrun-not-here", "-np", "2"]}}},
        }
    )
    with pytest.raises(SpecError) as info:
        LocalBackend(tfkube_home).submit(job, tmp_path)
    [error] = info.value.errors
    assert error.field == "spec.replicas.worker.command"
    assert "'horovodrun-not-here' is not on this machine's PATH" in error.message


def test_python_is_tfkubes_interpreter_and_a_failing_command_is_retried_by_policy(
    tfkube_home: Path, tmp_path: Path
):
    """`python -c` (no code): the replica runs tfkube's own interpreter; its exit 3 is the
    program's own failure, so the role's restartPolicy (Never) fails the job at once."""
    job = parse_job(
        {
            "apiVersion": "tfkube.io/v1alpha1",
            "kind": "TFJob",
            "metadata": {"name": "pyexit"},
            "spec": {
                "replicas": {
                    "worker": {
                        "replicas": 1,
                        "restartPolicy": "Never",
                        "command": [
                            "python",
                            "-c",
                            "import json, os, sys; print(json.dumps([sys.executable, "
                            "os.environ['TFKUBE_ROLE']])); sys.exit(3)",
                        ],
                    }
                },
                "runPolicy": {"restartPolicy": "OnFailure", "backoffLimit": 3},
            },
        }
    )
    backend = LocalBackend(tfkube_home)
    backend.submit(job, tmp_path)
    view = backend.wait("pyexit", timeout=WAIT)
    assert view.phase is JobPhase.FAILED
    assert view.reason == "ReplicaFailed"
    assert view.restarts == 0
    printed = next(line for line in backend.logs("pyexit", "worker-0") if line.startswith('["'))
    executable, role = json.loads(printed)
    assert role == "worker"
    assert Path(executable).parent == Path(sys.executable).parent
