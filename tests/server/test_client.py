"""`tfkube.Client` and the CLI (`tfkube login`, `--engine server`) against a real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tfkube
from tfkube.spec import SpecError

from ._server import PASSWORD, ServerProc
from .conftest import TeamCtx


def _code(folder: Path) -> Path:
    folder.mkdir()
    (folder / "run.sh").write_text(
        "#!/usr/bin/env bash\n"
        'for i in 1 2 3; do echo "$TFKUBE_ROLE-$TFKUBE_INDEX line $i"; done\n'
        # worker-0 decides success (and then the rest is stopped): with a worker-1, it waits
        # for worker-1's lines first.
        'if [ "$TFKUBE_ROLE-$TFKUBE_INDEX" = worker-1 ]; then touch "$TFKUBE_LOG_DIR/w1"; fi\n'
        'if [ "$TFKUBE_ROLE-$TFKUBE_INDEX" = worker-0 ]; then\n'
        '  if [ "${TFKUBE_NUM_WORKERS:-1}" -gt 1 ]; then\n'
        '    for _ in $(seq 1200); do [ -e "$TFKUBE_LOG_DIR/w1" ] && break; sleep 0.1; done\n'
        "  fi\n"
        '  echo model > "$TFKUBE_LOG_DIR/model.txt"\n'
        # The job's result (tfkube.contract.RESULT_FILE), written whole.
        '  echo \'{"test_accuracy": 0.93, "global_step": 3}\' > "$TFKUBE_LOG_DIR/r.tmp"\n'
        '  mv "$TFKUBE_LOG_DIR/r.tmp" "$TFKUBE_LOG_DIR/result.json"\n'
        "fi\n"
    )
    (folder / "run.sh").chmod(0o755)
    return folder


def test_python_client(server: ServerProc, team: TeamCtx, tmp_path: Path) -> None:
    with tfkube.Client(server.url, team.member.token, team=team.name) as c:
        assert c.me().name == team.member.name
        art = c.upload(_code(tmp_path / "code"), "demo")
        assert (art.name, art.version, art.files) == ("demo", 1, 1)
        with pytest.raises(SpecError) as bad:
            c.submit(name="demo", workers=0, code="demo")
        assert bad.value.errors[0].field == "workers"
        job = c.submit(name="demo", workers=2, ps=1, code="demo")
        lines = list(c.logs(job.id, "worker-1", follow=True)) if _has_log(c, job.id) else []
        done = c.wait(job.id, timeout=120, poll=0.3)
        assert done.phase == "Succeeded"
        assert done.result == {"test_accuracy": 0.93, "global_step": 3}
        if not lines:
            lines = list(c.logs(job.id, "worker-1"))
        assert "worker-1 line 3" in lines
        assert c.download(job.id, "model.txt", tmp_path / "model.txt").read_text() == "model\n"
        assert [j.id for j in c.jobs(name="demo")] == [job.id]
        copy = c.copy(job.id)
        assert copy.name == "demo-2"
        assert copy.code_sha256 == job.code_sha256
        c.wait(copy.id, timeout=120, poll=0.3)
        c.delete(copy.id)


def _has_log(c: tfkube.Client, job_id: str) -> bool:
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if any(f.replica == "worker-1" for f in c.log_files(job_id)):
            return True
        time.sleep(0.2)
    return False


def tfkube_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tfkube", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )


def test_cli_login_and_every_command(server: ServerProc, team: TeamCtx, tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "TFKUBE_ENGINE": "server"}
    env.pop("TFKUBE_URL", None)
    env.pop("TFKUBE_TOKEN", None)
    signed = tfkube_cli(
        "login", server.url, "--token", team.member.token, "--team", team.name, env=env
    )
    assert signed.returncode == 0, signed.stderr
    saved = tmp_path / "config" / "tfkube" / "login.json"
    assert saved.stat().st_mode & 0o777 == 0o600
    folder = _code(tmp_path / "job")
    (folder / "job.yaml").write_text(
        textwrap.dedent(
            """\
            apiVersion: tfkube.io/v1alpha1
            kind: TFJob
            metadata: {name: cli-job}
            spec:
              replicas: {worker: {replicas: 1}}
              code: {source: .}
            """
        )
    )
    sub = tfkube_cli("submit", str(folder / "job.yaml"), env=env)
    assert sub.returncode == 0, sub.stderr
    listed = tfkube_cli("list", env=env)
    assert "cli-job" in listed.stdout
    with tfkube.Client(server.url, team.member.token, team=team.name) as c:
        found = c.find("cli-job")
        assert found is not None
        c.wait(found.id, timeout=120, poll=0.3)
    status = tfkube_cli("status", "cli-job", env=env)
    assert status.returncode == 0
    assert "Succeeded" in status.stdout
    assert "test_accuracy=0.93  global_step=3" in status.stdout
    listed = tfkube_cli("list", env={**env, "COLUMNS": "160"}).stdout
    assert "test_accuracy" in listed.splitlines()[0]  # a column per result name
    assert "0.93" in next(line for line in listed.splitlines() if "cli-job" in line)
    logs = tfkube_cli("logs", "cli-job", "-r", "worker-0", env=env)
    assert "worker-0 line 3" in logs.stdout
    deleted = tfkube_cli("delete", "cli-job", env=env)
    assert deleted.returncode == 0, deleted.stderr
    assert "cli-job" not in tfkube_cli("list", env=env).stdout


def test_cli_login_with_a_password_makes_a_token(
    server: ServerProc, team: TeamCtx, tmp_path: Path
) -> None:
    """`tfkube login URL --user NAME` asks for the password, signs in through the client
    and keeps a fresh personal token; a wrong password is the API's own refusal."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    env.pop("TFKUBE_URL", None)
    env.pop("TFKUBE_TOKEN", None)
    name = team.member.name

    def login(password: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tfkube", "login", server.url, "--user", name],
            input=password + "\n",
            capture_output=True,
            text=True,
            env=env,
            timeout=180,
        )

    wrong = login("not the password at all")
    assert wrong.returncode == 1
    assert "password" in wrong.stderr.lower()
    assert not (tmp_path / "config" / "tfkube" / "login.json").exists()
    right = login(PASSWORD)
    assert right.returncode == 0, right.stderr
    saved = json.loads((tmp_path / "config" / "tfkube" / "login.json").read_text())
    assert saved["token"] != team.member.token  # a new token of its own
    with tfkube.Client(server.url, saved["token"]) as client:
        assert client.me().name == name
