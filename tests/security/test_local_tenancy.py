"""Tenancy below the API on the local engine (issue 17, items 1 and 2): a member's job,
tried as an attacker would, against a real `tfkube server` with two teams.

The server runs with a secret in its environment (as a database password would be). A
victim team's job writes an output and keeps running; then the attacker team's member
uploads a code folder whose run.sh is the attack and submits it through the API. Each
attack prints what it got; the test reads the job's log through the API and checks that
nothing of the victim, the server's files or the server's environment is in it, and that
the server's database is as it was. On code without confinement every attack succeeds
(these tests fail there); confined, each is refused by the sandbox, the team's own OS
user or its cgroup. One real TensorFlow job shows that training still works confined.

Needs root and bubblewrap (`make install` installs it as root): skipped without them,
except under CI=true, where that is a failure.
"""

from __future__ import annotations

import os
import shutil
import socket
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import tfkube
from conftest import TAG  # tests/conftest.py
from pyindex import PROBE, TINY, PackageIndex, probing_sdist, tiny_index
from server._server import Api, ServerProc, api_for, env_with, first_admin, free_port
from server.conftest import stop_server

IN_CI = os.environ.get("CI", "").lower() == "true"
SECRET_VAR = "TFKUBE_TEST_DATABASE_PASSWORD"
"""A variable in the server's environment, as a database URL or password would be."""
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mnist-between-graph"
OWN_VARIABLES = {
    *("PATH", "HOME", "USER", "LOGNAME", "PWD", "SHLVL", "_"),  # the sandbox's; sh's own
    *("TF_CONFIG", "CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED"),  # the replica contract
}
PASSED_VARIABLES = {"LANG", "LANGUAGE", "TZ", "TERM", "SSL_CERT_FILE", "SSL_CERT_DIR"}
"""What the local engine keeps of the server's environment for any workload."""


def _require_isolation() -> None:
    """Skip (fail under CI=true) where the local engine cannot isolate teams."""
    problem = None
    if os.geteuid() != 0:
        problem = "not root: the local engine cannot run teams as their own OS users"
    elif shutil.which("bwrap") is None:
        problem = "bubblewrap is not installed (tools/sandbox/ensure-bwrap.sh, as root)"
    if problem is not None:
        if IN_CI:
            pytest.fail(f"CI=true and {problem}", pytrace=False)
        pytest.skip(problem)


@dataclass
class Tenancy:
    server: ServerProc
    admin: Api
    secret: str
    victim: str
    attacker: str
    member: Api
    victim_output: str
    victim_code: str
    victim_job: str
    victim_port: int
    """Where the victim's job serves `victim_served` on its own loopback (as its
    TensorFlow servers listen, without authentication)."""
    victim_served: str
    index: PackageIndex
    """The package index (the test's own, on 127.0.0.1) the server is given with
    `--package-index`: the one place a job's requirements.txt step may reach."""

    @property
    def data(self) -> Path:
        return self.server.data_dir


def _code(folder: Path, run_sh: str, extra: dict[str, str] | None = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "run.sh").write_text("#!/bin/sh\n" + textwrap.dedent(run_sh))
    (folder / "run.sh").chmod(0o755)
    for name, text in (extra or {}).items():
        (folder / name).write_text(text)
    return folder


def _manifest(name: str, resources: dict[str, str] | None = None) -> dict[str, Any]:
    worker: dict[str, Any] = {"replicas": 1, "restartPolicy": "Never"}
    if resources:
        worker["resources"] = resources
    return {
        "apiVersion": "tfkube.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {
            "code": {"source": f"artifact:{name}"},
            "runPolicy": {"backoffLimit": 0},
            "replicas": {"worker": worker},
        },
    }


@pytest.fixture(scope="module")
def tenancy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenancy]:
    _require_isolation()
    tmp = tmp_path_factory.mktemp("tenancy")
    tag = uuid.uuid4().hex
    secret = f"hunter2-{uuid.uuid4().hex}"
    env = {**env_with(TAG, tag, tmp / "home"), SECRET_VAR: secret}
    index = tiny_index(tmp / "index")
    server = ServerProc(
        tmp / "data", free_port(), None, env, extra=["--cpus", "8", "--package-index", index.url]
    )
    server.start()
    admin = first_admin(server)
    member = None
    try:
        victim, attacker = f"victim-{tag[:6]}", f"attacker-{tag[:6]}"
        for team in (victim, attacker):
            admin.new_team(team)
        victim_member, attacker_member = admin.new_user(), admin.new_user()
        admin.add_member(victim, victim_member, "member")
        admin.add_member(attacker, attacker_member, "member")
        member = api_for(server.url, attacker_member)
        output, code = f"VICTIM-OUTPUT-{tag}", f"VICTIM-CODE-{tag}"
        served, port = f"VICTIM-SERVED-{tag}", free_port()
        folder = _code(
            tmp / "victim",
            f"""\
            mkdir "$HOME/served" && echo "{served}" > "$HOME/served/secret.txt"
            python3 -m http.server --bind 127.0.0.1 --directory "$HOME/served" {port} \
              > /dev/null 2>&1 &
            python3 -c '
            import socket, time
            for _ in range(300):
                try:
                    socket.create_connection(("127.0.0.1", {port}), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.1)
            '
            echo "{output}" > "$TFKUBE_LOG_DIR/victim-output.txt"
            echo victim up
            exec sleep 86399
            """,
            {"secret.py": f"KEY = '{code}'\n"},
        )
        victim_api = api_for(server.url, victim_member)
        with tfkube.Client(server.url, victim_api.token, team=victim) as c:
            c.upload(folder, "victim")
            job = c.submit(_manifest("victim"))
        victim_api.close()
        written = server.data_dir / "teams" / victim / "outputs" / job.id / "victim-output.txt"
        deadline = time.monotonic() + 60
        while not written.exists():
            assert time.monotonic() < deadline, server.log.read_text()[-3000:]
            time.sleep(0.2)
        yield Tenancy(
            server,
            admin,
            secret,
            victim,
            attacker,
            member,
            output,
            code,
            job.id,
            port,
            served,
            index,
        )
    finally:
        if member is not None:
            member.close()
        stop_server(server, admin, tag)
        index.stop()


def attack(
    t: Tenancy, tmp_path: Path, run_sh: str, resources: dict[str, str] | None = None
) -> tuple[Any, str]:
    """Run `run_sh` as the attacker team's job through the API: -> (the ended job, its
    worker's log)."""
    name = f"attack-{uuid.uuid4().hex[:6]}"
    folder = _code(tmp_path / name, run_sh)
    with tfkube.Client(t.server.url, t.member.token, team=t.attacker) as c:
        c.upload(folder, name)
        job = c.submit(_manifest(name, resources))
        done = c.wait(job.id, timeout=120, poll=0.3)
        log = "\n".join(c.logs(job.id, "worker-0"))
    return done, log


def attack_log(t: Tenancy, tmp_path: Path, run_sh: str) -> str:
    """The log of an attack that ends well (what it printed is the finding)."""
    done, log = attack(t, tmp_path, run_sh)
    assert done.phase == "Succeeded", (done.message, log)
    return log


def test_a_job_cannot_read_another_teams_code_or_outputs(tenancy: Tenancy, tmp_path: Path) -> None:
    t = tenancy
    victim = t.data / "teams" / t.victim
    log = attack_log(
        t,
        tmp_path,
        f"""\
        V="$TFKUBE_LOG_DIR/../../../{t.victim}"
        cat "$V"/outputs/*/victim-output.txt {victim}/outputs/*/victim-output.txt
        cat "$V"/engine/jobs/*/work/*/code/secret.py {victim}/engine/jobs/*/work/*/code/secret.py
        cat "$V"/engine/jobs/*/code-token {victim}/engine/jobs/*/code-token | sed 's/^/TOKEN /'
        ls {t.data}/blobs | sed 's/^/BLOB /'
        true
        """,
    )
    assert t.victim_output not in log
    assert t.victim_code not in log
    assert "TOKEN " not in log
    assert "BLOB " not in log


def test_a_job_cannot_read_the_servers_database_or_data_dir(
    tenancy: Tenancy, tmp_path: Path
) -> None:
    t = tenancy
    log = attack_log(
        t,
        tmp_path,
        f"""\
        head -c 15 "$TFKUBE_LOG_DIR/../../../../tfkube.db"; echo
        head -c 15 {t.data}/tfkube.db; echo
        ls "$TFKUBE_LOG_DIR/../../../.." {t.data} | sed 's/^/LISTED /'
        true
        """,
    )
    assert "SQLite format 3" not in log
    assert "LISTED tfkube.db" not in log
    assert "LISTED blobs" not in log  # (`teams` is there: the way to its own folders)


def test_a_job_cannot_write_the_servers_database(tenancy: Tenancy, tmp_path: Path) -> None:
    t = tenancy
    sql = f"UPDATE users SET site_admin=1 WHERE name='{t.member.name}'"
    log = attack_log(
        t,
        tmp_path,
        f"""\
        sqlite3 "$TFKUBE_LOG_DIR/../../../../tfkube.db" "{sql}" && echo WROTE
        sqlite3 {t.data}/tfkube.db "{sql}" && echo WROTE
        true
        """,
    )
    assert "WROTE" not in log
    me = t.member.ok(t.member.get("/api/v1/users/me"))
    assert me["site_admin"] is False
    assert t.member.get("/api/v1/users").status_code == 403


def test_a_job_reaches_neither_other_jobs_nor_the_server_over_the_network(
    tenancy: Tenancy, tmp_path: Path
) -> None:
    """Another team's job listens on its loopback (as TensorFlow's gRPC servers do, with
    no authentication); the server listens on the host's. A job has a network namespace
    of its own: it reaches neither, and sees no other listener."""
    t = tenancy
    server_port = int(t.server.url.rsplit(":", 1)[1].split("/")[0])
    log = attack_log(
        t,
        tmp_path,
        f"""\
        python3 -c '
        import urllib.request
        for name, port, path in (("VICTIM", {t.victim_port}, "/secret.txt"),
                                 ("SERVER", {server_port}, "/")):
            try:
                got = urllib.request.urlopen(f"http://127.0.0.1:{{port}}{{path}}", timeout=5)
                print("REACHED", name, got.read(200))
            except Exception as exc:
                print("REFUSED", name, type(exc).__name__, exc)
        '
        grep -c " 0A " /proc/net/tcp /proc/net/tcp6 | sed 's/^/LISTENERS /'
        true
        """,
    )
    assert t.victim_served not in log
    assert "REACHED" not in log, log
    assert "REFUSED VICTIM" in log, log
    assert "REFUSED SERVER" in log, log
    # The job's own namespace: its TensorFlow server's port at most, not the host's.
    assert "LISTENERS /proc/net/tcp:0" in log or "LISTENERS /proc/net/tcp:1" in log, log


def test_a_job_sees_neither_other_processes_nor_their_environment(
    tenancy: Tenancy, tmp_path: Path
) -> None:
    t = tenancy
    log = attack_log(
        t,
        tmp_path,
        f"""\
        for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done | sed 's/^/PROC /'
        for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done 2>/dev/null | grep {SECRET_VAR}
        echo "COUNT $(ls -d /proc/[0-9]* | wc -l)"
        true
        """,
    )
    assert t.secret not in log
    assert "sleep 86399" not in log  # the victim's replica
    assert "server --data-dir" not in log  # the server itself
    count = int(next(line for line in log.splitlines() if line.startswith("COUNT ")).split()[1])
    assert count <= 10, log  # bwrap's init, the launcher, run.sh and what it runs


def test_a_job_does_not_get_the_servers_environment(tenancy: Tenancy, tmp_path: Path) -> None:
    t = tenancy
    log = attack_log(t, tmp_path, "env | sed 's/^/ENV /'\n")
    assert t.secret not in log
    names = {line[4:].split("=", 1)[0] for line in log.splitlines() if line.startswith("ENV ")}
    assert {"PATH", "HOME", "TFKUBE_JOB", "TFKUBE_LOG_DIR"} <= names
    # Nothing of the server's environment but the engine's allow-list (locale, terminal,
    # CA bundle) and what the administrator passed (the suite's tag: --workload-env).
    allowed = {*OWN_VARIABLES, *PASSED_VARIABLES, TAG}
    others = {n for n in names if n not in allowed and not n.startswith(("TFKUBE_", "LC_"))}
    assert not others, others


def test_a_job_over_its_memory_limit_is_oom_killed(tenancy: Tenancy, tmp_path: Path) -> None:
    t = tenancy
    done, log = attack(
        t,
        tmp_path,
        "python3 -c \"b = b'x' * (512 << 20); print('ALLOCATED', flush=True)\"\n",
        resources={"memory": "64Mi"},
    )
    assert done.phase == "Failed", (done.message, log)
    assert "ALLOCATED" not in log
    worker = next(r for r in done.replicas or [] if r.key == "worker-0")
    assert worker.exit_code == 137
    assert "OOMKilled" in (worker.message or ""), worker


def test_a_jobs_requirements_install_into_the_teams_own_cache(
    tenancy: Tenancy, tmp_path: Path
) -> None:
    """Fetched code's requirements.txt (a tiny wheel, from the server's package index) is
    installed by the prepare step, confined, into the team's own cache: never the
    machine-wide one that every team's jobs would read."""
    t = tenancy
    name = f"deps-{uuid.uuid4().hex[:6]}"
    folder = _code(
        tmp_path / name,
        "python3 -c 'import tfkube_test_tiny, sys; print(\"IMPORTED\", sys.prefix)'\n",
        {"requirements.txt": f"{TINY}\n"},
    )
    with tfkube.Client(t.server.url, t.member.token, team=t.attacker) as c:
        c.upload(folder, name)
        job = c.submit(_manifest(name))
        done = c.wait(job.id, timeout=300, poll=0.5)
        assert done.phase == "Succeeded", (done.message, done.replicas)
        log = "\n".join(c.logs(job.id, "worker-0"))
    cache = t.data / "teams" / t.attacker / "engine" / "venvs"
    assert f"IMPORTED {cache}/" in log
    assert cache.stat().st_uid != 0
    assert cache.stat().st_mode & 0o077 == 0


def test_requirements_that_do_not_install_end_the_job_before_a_replica_runs(
    tenancy: Tenancy, tmp_path: Path
) -> None:
    """The prepare step fails (the index has no such package): the job ends with the reason and
    the installer's words, and its run.sh never ran."""
    t = tenancy
    name = f"baddeps-{uuid.uuid4().hex[:6]}"
    folder = _code(
        tmp_path / name,
        "echo RAN\n",
        {"requirements.txt": "tfkube-no-such-package-zz9==1.0\n"},
    )
    with tfkube.Client(t.server.url, t.member.token, team=t.attacker) as c:
        c.upload(folder, name)
        job = c.submit(_manifest(name))
        done = c.wait(job.id, timeout=300, poll=0.5)
        log = "\n".join(c.logs(job.id, "worker-0"))
    assert done.phase == "Failed", (done.message, log)
    assert done.reason == "RequirementsFailed", (done.reason, done.message)
    assert "requirements.txt" in (done.message or ""), done.message
    assert "RAN" not in log.replace("tfkube-no-such", "")


PROBED = """\
python3 -c '
import tfkube_test_probe, tfkube_test_tiny
print("INSTALLED", tfkube_test_tiny.GREETING)
for label, got in tfkube_test_probe.RESULT.items():
    print("PROBE", label, "=", got)
'
"""


def test_a_packages_build_code_reaches_only_the_package_index(
    tenancy: Tenancy, tmp_path: Path
) -> None:
    """requirements.txt names a package built from source: its build code runs in the
    prepare step and tries to fetch a secret from a service of the test's on the host's
    loopback and to reach the server's API, directly and through the step's proxy. The
    step runs in the job's network namespace, whose one way out is the package-index
    proxy: each attempt is refused (no listener inside, 403 from the proxy), while the
    packages it asked for install from the index. On the host's network (the code
    before) the build read the secret."""
    t = tenancy
    secret = f"BUILD-SECRET-{uuid.uuid4().hex}"
    httpd, host_port = _served_on_host_loopback(secret, tmp_path / "served")
    api_port = int(t.server.url.rsplit(":", 1)[1].split("/")[0])
    probing_sdist(
        t.index.folder, PROBE, [("secret", "127.0.0.1", host_port), ("api", "127.0.0.1", api_port)]
    )
    name = f"probe-{uuid.uuid4().hex[:6]}"
    # The index named in requirements.txt too, as an attacker would to get the build run
    # wherever the step runs.
    folder = _code(
        tmp_path / name,
        PROBED,
        {"requirements.txt": f"--index-url {t.index.url}\n{TINY}\n{PROBE}\n"},
    )
    try:
        with tfkube.Client(t.server.url, t.member.token, team=t.attacker) as c:
            c.upload(folder, name)
            job = c.submit(_manifest(name))
            done = c.wait(job.id, timeout=300, poll=0.5)
            log = "\n".join(c.logs(job.id, "worker-0"))
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert done.phase == "Succeeded", (done.message, log)
    assert secret not in log, log
    assert "INSTALLED hello from the index" in log, log
    assert f"/files/{PROBE.replace('-', '_')}-1.0.tar.gz" in t.index.requests
    for label in ("secret", "api"):
        assert f"PROBE {label} = UNREACHABLE" in log, log
        assert f"PROBE {label} via proxy = PROXY SAID HTTP/1.1 403" in log, log
    assert "REACHED" not in log, log


@pytest.mark.tf
def test_training_works_confined(tenancy: Tenancy) -> None:
    """The between-graph example (1 PS + 2 workers) trains to the end as the team's user."""
    t = tenancy
    with tfkube.Client(t.server.url, t.member.token, team=t.attacker) as c:
        c.upload(EXAMPLE, "mnist")
        job = c.submit(name="mnist", workers=2, ps=1, code="mnist", args=["--train_steps=200"])
        done = c.wait(job.id, timeout=600, poll=1.0)
        assert done.phase == "Succeeded", (done.reason, done.message)
        files = {f.path for f in c.outputs(job.id)}
        assert "checkpoint" in files
        assert any(line.startswith("tfkube-example: result") for line in c.logs(job.id, "worker-0"))
    outputs = t.data / "teams" / t.attacker / "outputs" / job.id
    assert (outputs / ".tfkube" / "logs" / "worker-1" / "0.log").is_file()
    # Each replica's CPU and memory, sampled from its cgroups by the supervisor (root),
    # kept beside the logs as the team's files.
    for replica in ("ps-0", "worker-0", "worker-1"):
        assert (outputs / ".tfkube" / "usage" / f"{replica}.jsonl").is_file(), replica
    with tfkube.Client(t.server.url, t.member.token, team=t.attacker) as c:
        usage = c.usage(job.id)
    assert usage.available
    memory = {s.replica: max(p[2] for p in s.points) for s in usage.replicas}
    assert all(used > 50_000_000 for used in memory.values()), memory
    owners = {p.stat().st_uid for p in outputs.rglob("*")}
    assert len(owners) == 1, owners  # all written by one user: the team's, not root
    assert 0 not in owners
    assert outputs.stat().st_mode & 0o077 == 0  # other teams' users cannot even list it


NOTEBOOK_ATTACK = """
import glob, json, os, sqlite3
data = {data!r}
for path in [data + "/tfkube.db", *glob.glob(data + "/teams/{victim}/outputs/*/victim-output.txt")]:
    try:
        print("READ", path, open(path, "rb").read(40), flush=True)
    except OSError as exc:
        print("REFUSED", path, type(exc).__name__, flush=True)
try:
    db = sqlite3.connect(data + "/tfkube.db")
    db.execute("UPDATE users SET site_admin=1 WHERE name='{me}'")
    db.commit()
    print("WROTE", flush=True)
except Exception as exc:
    print("REFUSED db", type(exc).__name__, flush=True)
print("PIDS", json.dumps([p for p in os.listdir("/proc") if p.isdigit()]), flush=True)
print("ENV", json.dumps(sorted(os.environ)), flush=True)
print("UID", os.getuid(), flush=True)
"""


def test_a_notebook_kernel_is_confined_as_its_team(tenancy: Tenancy) -> None:
    """A member's notebook runs code of their choosing: its kernel reads neither the
    server's database nor another team's outputs, cannot write the database, sees no
    other process and none of the server's environment, and runs as its team's user."""
    from server.test_notebooks import run_cell

    t = tenancy
    opened = t.member.ok(t.member.post(f"/api/v1/teams/{t.attacker}/notebook", timeout=180))
    base = opened["url"].removesuffix("/lab")
    kernel = t.member.post(f"{base}/api/kernels", json={"name": "python3"}, timeout=120)
    assert kernel.status_code == 201, kernel.text
    ws = base.replace("http", "ws", 1) + f"/api/kernels/{kernel.json()['id']}/channels"
    code = NOTEBOOK_ATTACK.format(data=str(t.data), victim=t.victim, me=t.member.name)
    printed = run_cell(ws, t.member.token, code, timeout=300)
    assert "READ" not in printed, printed
    assert "WROTE" not in printed, printed
    assert printed.count("REFUSED") >= 2, printed  # the database, and the write
    assert t.member.ok(t.member.get("/api/v1/users/me"))["site_admin"] is False
    pids = eval(printed.split("PIDS ", 1)[1].splitlines()[0])  # a list of ints it printed
    assert len(pids) <= 8, pids  # its own sandbox's few processes, not the machine's
    names = set(eval(printed.split("ENV ", 1)[1].splitlines()[0]))
    assert SECRET_VAR not in names
    assert not any(
        n.startswith("TFKUBE_") and n not in {"TFKUBE_URL", "TFKUBE_TOKEN", "TFKUBE_TEAM"}
        for n in names
    ), names
    uid = int(printed.split("UID ", 1)[1].split()[0])
    assert uid not in (0, os.getuid()), uid
    t.member.post(f"/api/v1/notebooks/{opened['id']}/stop")


NOTEBOOK_REACH = """
import socket, urllib.request
import tfkube
for name, port in (("BOARD", {board}), ("HOST", {host})):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        print("REACHED", name, flush=True)
    except OSError as exc:
        print("REFUSED", name, type(exc).__name__, exc, flush=True)
try:
    got = urllib.request.urlopen("http://127.0.0.1:{host}/secret.txt", timeout=5)
    print("READ", got.read(300), flush=True)
except OSError as exc:
    print("NOT READ", type(exc).__name__, flush=True)
with tfkube.Client() as c:
    print("API", c.me().name, flush=True)
listening = sum(
    1 for f in ("/proc/net/tcp", "/proc/net/tcp6") for line in open(f) if line.split()[3] == "0A"
)
print("LISTENERS", listening, flush=True)
"""


def _in_a_notebook(t: Tenancy, cell: str) -> tuple[dict[str, Any], str]:
    """Run `cell` in the attacker member's notebook (opened, started if need be): ->
    (the notebook as the API answered, what the cell printed)."""
    from server.test_notebooks import run_cell

    opened = t.member.ok(t.member.post(f"/api/v1/teams/{t.attacker}/notebook", timeout=180))
    base = opened["url"].removesuffix("/lab")
    kernel = t.member.post(f"{base}/api/kernels", json={"name": "python3"}, timeout=120)
    assert kernel.status_code == 201, kernel.text
    ws = base.replace("http", "ws", 1) + f"/api/kernels/{kernel.json()['id']}/channels"
    return opened, run_cell(ws, t.member.token, cell, 300)


def _served_on_host_loopback(secret: str, folder: Path) -> tuple[Any, int]:
    """An HTTP server of the test's own on the host's loopback, serving `secret` (as
    another team's TensorBoard, a database or any local service listens): -> (it, port)."""
    import functools
    import http.server
    import threading

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "secret.txt").write_text(secret)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, int(httpd.server_address[1])


def test_a_notebook_reaches_nothing_on_the_hosts_loopback_but_the_servers_api(
    tenancy: Tenancy, tmp_path: Path
) -> None:
    """A member's notebook runs code of their choosing as its team. Another team's
    TensorBoard (which trusts the server's proxy to check who asks) and any other service
    on the host's loopback (here one of the test's own, serving a secret) are out of its
    reach: it has a network namespace of its own, holding only loopback. What it does
    reach is the server's API, through its relay, with its user's token (its
    `tfkube.Client()`); and it is reached only through the server's proxy."""
    import psutil

    t = tenancy
    # The victim team's TensorBoard, opened by a site admin (a Bearer call, as the CLI).
    page = t.admin.get(f"/proxy/tensorboard/{t.victim_job}/", timeout=180)
    assert page.status_code == 200, page.text[:300]
    boards = [
        p.info["cmdline"]
        for p in psutil.process_iter(["cmdline"])
        if "tensorboard.main" in " ".join(p.info["cmdline"] or [])
        and t.victim_job in " ".join(p.info["cmdline"] or [])
    ]
    assert boards, "the victim's TensorBoard is not running"
    board = int(next(a.split("=", 1)[1] for a in boards[0] if a.startswith("--port=")))
    # The TensorBoard has a network of its own too: not even the host reaches its port.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", board), timeout=5).close()
    secret = f"HOST-SECRET-{uuid.uuid4().hex}"
    httpd, host = _served_on_host_loopback(secret, tmp_path / "served")
    try:
        opened, printed = _in_a_notebook(t, NOTEBOOK_REACH.format(board=board, host=host))
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert secret not in printed, printed
    assert "REACHED" not in printed, printed
    assert "REFUSED BOARD" in printed, printed
    assert "REFUSED HOST" in printed, printed
    assert f"API {t.member.name}" in printed, printed  # its own client still works
    # Its own loopback: JupyterLab, its kernel's few ports and the API's relay; not the
    # host's listeners.
    assert int(printed.split("LISTENERS ", 1)[1].split()[0]) <= 10, printed
    t.member.post(f"/api/v1/notebooks/{opened['id']}/stop")


NOTEBOOK_PIP = """
import os, socket, subprocess, sys, urllib.request
home = os.environ["HOME"]
done = subprocess.run(
    [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
     "--target", home + "/pkgs", "TINY"],
    capture_output=True, text=True,
)
print("PIP", done.returncode, done.stderr[-800:].replace("\\n", " "), flush=True)
sys.path.insert(0, home + "/pkgs")
import tfkube_test_tiny
print("IMPORTED", tfkube_test_tiny.GREETING, flush=True)
for name, port in (("HOST", HOST_PORT), ("API", API_PORT)):
    with socket.create_connection(("127.0.0.1", PROXY_PORT), timeout=5) as s:
        s.sendall(("CONNECT 127.0.0.1:%d HTTP/1.1\\r\\n\\r\\n" % port).encode())
        print("PROXY", name, s.recv(300).decode(errors="replace").split("\\r\\n")[0], flush=True)
try:
    socket.create_connection(("127.0.0.1", HOST_PORT), timeout=5).close()
    print("REACHED HOST", flush=True)
except OSError as exc:
    print("REFUSED HOST", type(exc).__name__, flush=True)
try:
    got = urllib.request.urlopen("http://127.0.0.1:%d/secret.txt" % HOST_PORT, timeout=5)
    print("READ", got.read(300), flush=True)
except OSError as exc:
    print("NOT READ", exc, flush=True)
"""


def test_a_notebook_installs_from_the_package_index_and_reaches_nothing_else(
    tenancy: Tenancy, tmp_path: Path
) -> None:
    """A notebook's `pip install` goes through its relay's package proxy (HTTPS_PROXY and
    PIP_INDEX_URL in its environment) to the server's `--package-index` (here the test's
    own on 127.0.0.1); the same proxy answers 403 for the host's loopback secret and the
    server's port, and nothing on the host's loopback is reached directly either. On
    the code before, `pip install` reached no index at all."""
    from tfkube.engines.local._egress import PORT

    t = tenancy
    secret = f"NOTEBOOK-SECRET-{uuid.uuid4().hex}"
    httpd, host = _served_on_host_loopback(secret, tmp_path / "served")
    api_port = int(t.server.url.rsplit(":", 1)[1].split("/")[0])
    cell = (
        NOTEBOOK_PIP.replace("TINY", TINY)
        .replace("HOST_PORT", str(host))
        .replace("API_PORT", str(api_port))
        .replace("PROXY_PORT", str(PORT))
    )
    try:
        opened, printed = _in_a_notebook(t, cell)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert "PIP 0" in printed, printed
    assert "IMPORTED hello from the index" in printed, printed
    assert secret not in printed, printed
    assert "PROXY HOST HTTP/1.1 403" in printed, printed
    assert "PROXY API HTTP/1.1 403" in printed, printed
    assert "REFUSED HOST" in printed, printed
    assert "NOT READ" in printed, printed
    t.member.post(f"/api/v1/notebooks/{opened['id']}/stop")


def test_a_link_planted_in_a_notebook_home_never_steers_the_servers_writes(
    tenancy: Tenancy, tmp_path: Path
) -> None:
    """The team's artifacts reach a notebook's home at each start. A member who replaces
    `team-artifacts` in their home by a link to another team's folder must not make the
    server (root) unpack, remove or write anything there."""
    from server.test_notebooks import run_cell

    t = tenancy
    target = t.data / "teams" / t.victim  # the victim team's own folder
    with tfkube.Client(t.server.url, t.member.token, team=t.attacker) as c:
        c.upload(_code(tmp_path / "art", "echo hi\n"), f"art-{uuid.uuid4().hex[:6]}")
    opened = t.member.ok(t.member.post(f"/api/v1/teams/{t.attacker}/notebook", timeout=180))
    base = opened["url"].removesuffix("/lab")
    kernel = t.member.post(f"{base}/api/kernels", json={"name": "python3"}, timeout=120)
    assert kernel.status_code == 201, kernel.text
    ws = base.replace("http", "ws", 1) + f"/api/kernels/{kernel.json()['id']}/channels"
    plant = (
        "import os\n"
        "home = os.environ['HOME']\n"
        "dest = os.path.join(home, 'team-artifacts')\n"
        "if os.path.lexists(dest): os.rename(dest, dest + '-' + str(os.getpid()))\n"
        f"os.symlink({str(target)!r}, dest)\n"
        "print('PLAN' + 'TED', os.readlink(dest), flush=True)\n"
    )
    assert "PLANTED" in run_cell(ws, t.member.token, plant, timeout=120)
    t.member.ok(t.member.post(f"/api/v1/notebooks/{opened['id']}/stop"))
    with tfkube.Client(t.server.url, t.member.token, team=t.attacker) as c:  # a new version
        c.upload(_code(tmp_path / "art2", "echo again\n"), f"art-{uuid.uuid4().hex[:6]}")
    again = t.member.ok(t.member.post(f"/api/v1/teams/{t.attacker}/notebook", timeout=180))
    assert again["state"] == "running"
    assert not (target / "code").exists()  # the server unpacked nothing through the link
    t.member.post(f"/api/v1/notebooks/{again['id']}/stop")


def test_services_run_as_their_team_and_see_no_server_files(
    tenancy: Tenancy, tmp_path: Path
) -> None:
    """A job's TensorBoard (its pages and plugins read what the job wrote) runs as the
    job's team, not as the server, and its file system holds no server data dir."""
    import psutil

    t = tenancy
    done, _ = attack(t, tmp_path, "echo nothing to see\n")
    page = t.member.get(f"/proxy/tensorboard/{done.id}/", timeout=180)
    assert page.status_code == 200, page.text[:300]
    boards = [
        p
        for p in psutil.process_iter(["cmdline", "uids"])
        if "tensorboard.main" in " ".join(p.info["cmdline"] or [])
        and done.id in " ".join(p.info["cmdline"] or [])
        and p.info["uids"].real != 0
    ]
    assert boards, "the job's TensorBoard does not run as its team's user"
    seen_root = Path(f"/proc/{boards[0].pid}/root")  # its file system, as it sees it
    outputs = t.data / "teams" / t.attacker / "outputs" / done.id
    assert (seen_root / str(outputs).lstrip("/")).is_dir()  # what it reads: there
    assert not (seen_root / str(t.data).lstrip("/") / "tfkube.db").exists()
    assert not (seen_root / str(t.data).lstrip("/") / "blobs").exists()


def test_without_isolation_the_server_keeps_one_team(tmp_path: Path) -> None:
    """A machine that cannot isolate (here: bubblewrap hidden from the server by a mount
    namespace): the server says why at start and refuses a second team."""
    _require_isolation()
    hide = 'mount --bind /dev/null /usr/bin/bwrap && exec "$@"'
    tag = uuid.uuid4().hex
    server = ServerProc(
        tmp_path / "data",
        free_port(),
        None,
        env_with(TAG, tag, tmp_path / "home"),
        prefix=["unshare", "--mount", "--propagation", "private", "sh", "-c", hide, "sh"],
    )
    server.start()
    admin = first_admin(server)
    try:
        refused = admin.post("/api/v1/teams", json={"name": "second", "quota": {}})
        assert refused.status_code == 409, refused.text
        assert "tenancy needs isolation on this machine" in refused.json()["detail"]
        assert "bwrap" in refused.json()["detail"]
        assert "teams cannot be isolated from each other" in server.log.read_text()
        assert [t["name"] for t in admin.ok(admin.get("/api/v1/teams"))] == ["default"]
    finally:
        stop_server(server, admin, tag)
