"""Can this machine run a job's commands? (backends/local/_commands.py, pure: table rows)."""

from __future__ import annotations

from typing import Any

import pytest

from tfkube.engines.local._commands import command_problems, script_of
from tfkube.spec import parse_job

ON_PATH = {"sh": "/bin/sh", "bash": "/bin/bash", "hadoop": "/opt/hadoop/bin/hadoop"}
FILES = {"/opt/tools/run", "/data/app/train.py", "/data/app", "/bin/bash"}
CODE = frozenset({"train.py", "bin/run.sh", "requirements.txt"})


def job(worker: dict[str, Any], code: bool = True) -> Any:
    spec: dict[str, Any] = {"replicas": {"worker": {"replicas": 1, **worker}}}
    if code:
        spec["code"] = {"source": "./code"}
    return parse_job(
        {
            "apiVersion": "tfkube.io/v1alpha1",
            "kind": "TFJob",
            "metadata": {"name": "j"},
            "spec": spec,
        }
    )


def problems(worker: dict[str, Any], code: frozenset[str] | None = CODE) -> dict[str, str]:
    found = command_problems(
        job(worker, code is not None),
        code,
        which=ON_PATH.get,
        exists=lambda p: p in FILES,
        is_dir=lambda p: p == "/data/app",
    )
    return {p.field: p.message for p in found}


@pytest.mark.parametrize(
    ("worker", "code"),
    [
        pytest.param({}, CODE, id="entrypoint-no-command"),
        pytest.param({"command": ["python", "train.py"]}, CODE, id="python-script-in-code"),
        pytest.param({"command": ["python3", "-u", "train.py"]}, CODE, id="python-option"),
        pytest.param({"command": ["python", "-m", "trainer.task"]}, None, id="python-module"),
        pytest.param({"command": ["python", "-c", "print(1)"]}, None, id="python-inline"),
        pytest.param({"command": ["sh", "-c", "echo $TF_CONFIG"]}, None, id="sh-c"),
        pytest.param({"command": ["bash", "-ec", "true"]}, None, id="bash-ec"),
        pytest.param(
            {"command": ["/bin/bash", "-c", "--"], "args": ["cd /x"]}, None, id="c-then-dashes"
        ),
        pytest.param({"command": ["bash", "bin/run.sh"]}, CODE, id="bash-script-in-code"),
        pytest.param({"command": ["./bin/run.sh"]}, CODE, id="relative-program-in-code"),
        pytest.param({"command": ["/opt/tools/run"]}, None, id="absolute-program-here"),
        pytest.param({"command": ["hadoop", "jar"]}, None, id="program-on-path"),
        pytest.param(
            {"command": ["python", "/data/app/train.py"]}, None, id="absolute-script-here"
        ),
        pytest.param(
            {"command": ["python", "train.py"], "workingDir": "/data/app"},
            None,
            id="in-working-dir",
        ),
        pytest.param({"command": ["python"], "args": ["train.py"]}, CODE, id="script-in-args"),
    ],
)
def test_runnable_here(worker: dict[str, Any], code: frozenset[str] | None):
    assert problems(worker, code) == {}


W = "spec.replicas.worker"


@pytest.mark.parametrize(
    ("worker", "code", "field", "words"),
    [
        pytest.param(
            {"command": ["python", "/opt/model/train.py"]},
            None,
            f"{W}.command",
            "its script '/opt/model/train.py' is not on this machine; run it on a cluster",
            id="script-in-the-image",
        ),
        pytest.param(
            {"command": ["/usr/local/bin/train"]},
            None,
            f"{W}.command",
            "its program '/usr/local/bin/train' is not on this machine",
            id="program-in-the-image",
        ),
        pytest.param(
            {"command": ["horovodrun", "-np", "2"]},
            None,
            f"{W}.command",
            "its program 'horovodrun' is not on this machine's PATH",
            id="program-not-on-path",
        ),
        pytest.param(
            {"command": ["python", "train.py"]},
            None,
            f"{W}.command",
            "is a relative path and the job has no code",
            id="relative-without-code",
        ),
        pytest.param(
            {"command": ["python", "other.py"]},
            CODE,
            f"{W}.command",
            "its script 'other.py' is not in the code",
            id="script-not-in-code",
        ),
        pytest.param(
            {"command": ["python", "x.py"], "workingDir": "/data/app"},
            None,
            f"{W}.command",
            "is not in workingDir /data/app",
            id="script-not-in-working-dir",
        ),
        pytest.param(
            {"command": ["sh", "-c", "x"], "workingDir": "/nowhere"},
            None,
            f"{W}.workingDir",
            "/nowhere is not a folder here",
            id="working-dir-missing",
        ),
        pytest.param(
            {
                "command": ["sh", "-c", "x"],
                "volumes": [{"name": "d", "mountPath": "/d", "claimName": "c"}],
            },
            None,
            f"{W}.volumes",
            "only a cluster can provide this",
            id="volumes",
        ),
        pytest.param(
            {"command": ["sh", "-c", "x"], "sidecars": [{"name": "s", "image": "busybox"}]},
            None,
            f"{W}.sidecars",
            "only a cluster can provide this",
            id="sidecars",
        ),
        pytest.param(
            {"command": ["sh", "-c", "x"], "initContainers": [{"name": "s", "image": "busybox"}]},
            None,
            f"{W}.initContainers",
            "only a cluster can provide this",
            id="init-containers",
        ),
        pytest.param(
            {
                "command": ["sh", "-c", "x"],
                "env": {"K": {"secretKeyRef": {"name": "s", "key": "k"}}},
            },
            None,
            f"{W}.env.K",
            "only a cluster can provide this",
            id="env-from-secret",
        ),
    ],
)
def test_refused_here(worker: dict[str, Any], code: frozenset[str] | None, field: str, words: str):
    found = problems(worker, code)
    assert field in found, found
    assert words in found[field]


@pytest.mark.parametrize(
    ("command", "script"),
    [
        pytest.param(["python", "t.py", "--x"], "t.py", id="python"),
        pytest.param(["python3.11", "-W", "ignore", "t.py"], "t.py", id="python-option-value"),
        pytest.param(["python", "-m", "pkg"], None, id="module"),
        pytest.param(["python", "-"], None, id="stdin"),
        pytest.param(["bash", "-x", "run.sh"], "run.sh", id="bash-option"),
        pytest.param(["sh", "-c", "echo"], None, id="sh-c"),
        pytest.param(["sh", "--", "run.sh"], "run.sh", id="double-dash"),
        pytest.param(["java", "-jar", "x.jar"], None, id="not-an-interpreter"),
    ],
)
def test_script_of(command: list[str], script: str | None):
    assert script_of(command) == script


def test_relative_paths_into_code_the_replicas_fetch_are_not_checked_here() -> None:
    """A URL fetched by each replica (the server's jobs): its names are not known at
    submit, so `python train.py` is left to the launcher; absolute paths still are."""
    fetched = job({"command": ["python", "train.py"]}, True)
    assert (
        command_problems(fetched, None, ON_PATH.get, FILES.__contains__, bool, fetched=True) == []
    )
    elsewhere = job({"command": ["python", "/opt/train.py"]}, True)
    found = command_problems(elsewhere, None, ON_PATH.get, FILES.__contains__, bool, fetched=True)
    assert [p.field for p in found] == ["spec.replicas.worker.command"]
