"""Benchmark: the platform server under many people polling, on SQLite and PostgreSQL.

For each database: a real `tfkube server` process (local engine, `--cpus 1` so the burst's
jobs do not swamp this machine), a team with a member, 1,000 finished jobs written into its
database (1 PS + 2 workers each, three events each, as the sync loop leaves them), then:

  poll   `--clients` (50) concurrent clients, each alternating GET /api/v1/jobs/<a random
         job> (as the member: token, memberships, job, labels) and GET /healthz (one trivial
         query, no authentication), for `--seconds`. Status latency is reported as a ratio
         to /healthz measured in the same loop under the same load (target: p99 within 3x).
  burst  while the clients keep polling, `--burst` (100) submissions by the four fields,
         all sent at once: submissions/s, and the polls' latency during the burst.
  memory the server process's peak RSS (VmHWM) at the end.

    .venv/bin/python benchmarks/server_load/run.py [--databases sqlite,postgresql]
        [--jobs 1000] [--clients 50] [--seconds 20] [--burst 100]

PostgreSQL is the tests' throwaway cluster (tools/postgres/throwaway.py, installed by
tools/postgres/ensure.sh when missing). Prints a Markdown table (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import io
import os
import random
import statistics
import sys
import tarfile
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[2]
TAG = "TFK_BENCH_TAG"


def load(name: str, path: Path) -> ModuleType:
    """A helper module by path (tools/ and tests/ are not packages)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


postgres_tools = load("tfkube_tools_postgres", ROOT / "tools/postgres/throwaway.py")
server_tools = load("tfkube_test_server", ROOT / "tests/server/_server.py")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Samples:
    status: list[float] = field(default_factory=list)
    healthz: list[float] = field(default_factory=list)
    errors: int = 0


def code_archive() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        data = b"#!/bin/sh\ntrue\n"
        info = tarfile.TarInfo("run.sh")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def seed(database_url: str, count: int, team: str, owner: str, artifact: str) -> list[str]:
    """`count` finished jobs written as the sync loop leaves them; -> their ids."""
    from sqlalchemy import select

    from tfkube.planner import Replica
    from tfkube.planner import ReplicaState as S
    from tfkube.server.core.db import make_engine, session_factory
    from tfkube.server.core.tables import Artifact, Job, JobEvent, Team, User
    from tfkube.spec import dump_job, parse_job
    from tfkube.wire import replicas_json

    engine = make_engine(database_url)
    spec = dump_job(
        parse_job(
            {
                "apiVersion": "tfkube.io/v1alpha1",
                "kind": "TFJob",
                "metadata": {"name": "seeded"},
                "spec": {
                    "replicas": {"ps": {"replicas": 1}, "worker": {"replicas": 2}},
                    "code": {"source": "http://127.0.0.1:1/api/v1/code/x", "sha256": "ab" * 32},
                },
            }
        )
    )
    ids = []
    try:
        with session_factory(engine)() as db:
            team_id = db.scalars(select(Team.id).where(Team.name == team)).one()
            user_id = db.scalars(select(User.id).where(User.name == owner)).one()
            artifact_id = db.scalars(
                select(Artifact.id).where(Artifact.public_id == artifact)
            ).one()
            now = time.time() - count * 60
            for i in range(count):
                job_id = uuid.uuid4().hex[:16]
                ids.append(job_id)
                ok = i % 10 != 0
                replicas = replicas_json(
                    Replica(
                        role=role,
                        index=index,
                        state=(S.SUCCEEDED if ok else S.FAILED) if role == "worker" else S.STOPPED,
                        restarts=0 if ok else 3,
                        exit_code=0 if ok else 1,
                        address=f"127.0.0.1:{20000 + i % 1000}",
                        message="" if ok else "exit code 1: ValueError: bad input",
                        last_line="done" if ok else "ValueError: bad input",
                    )
                    for role, index in (("ps", 0), ("worker", 0), ("worker", 1))
                )
                at = now + i * 60
                db.add(
                    Job(
                        id=job_id,
                        team_id=team_id,
                        name=f"seeded-{i}",
                        created_by=user_id,
                        created_at=at,
                        spec=spec.replace("name: seeded", f"name: seeded-{i}"),
                        artifact_id=artifact_id,
                        code_sha256="ab" * 32,
                        state="ended",
                        request={"cpu": 1.5, "memory": 0, "gpu": 0},
                        phase="Succeeded" if ok else "Failed",
                        reason=None if ok else "BackoffLimitExceeded",
                        message=None if ok else "worker-0 failed 4 times",
                        restarts=0 if ok else 3,
                        replicas=replicas,
                        output_dir=None,
                        started_at=at + 1,
                        finished_at=at + 50,
                        updated_at=at + 50,
                    )
                )
                for j, message in enumerate(("job submitted", "started", "ended")):
                    db.add(JobEvent(job_id=job_id, time=at + j, message=message))
            db.commit()
    finally:
        engine.dispose()
    return ids


async def poller(
    client: httpx.AsyncClient, ids: list[str], token: str, until: list[float], out: Samples
) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    rng = random.Random()
    while time.monotonic() < until[0]:
        for kind in ("status", "healthz"):
            path = f"/api/v1/jobs/{rng.choice(ids)}" if kind == "status" else "/healthz"
            started = time.perf_counter()
            try:
                r = await client.get(path, headers=headers if kind == "status" else None)
                ok = r.status_code == 200
            except httpx.HTTPError:
                ok = False
            elapsed = time.perf_counter() - started
            if not ok:
                out.errors += 1
                continue
            (out.status if kind == "status" else out.healthz).append(elapsed)


async def load_phase(
    url: str, token: str, ids: list[str], team: str, clients: int, seconds: float, burst: int
) -> tuple[Samples, Samples, float, list[str]]:
    """-> (polls before the burst, polls during it, submissions/s, the burst's job ids)."""
    limits = httpx.Limits(max_connections=clients + burst, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as client:
        for _ in range(20):  # warm up: connections, caches, the first queries
            await client.get("/healthz")
        steady, during = Samples(), Samples()
        until = [time.monotonic() + seconds]
        tasks = [
            asyncio.create_task(poller(client, ids, token, until, steady)) for _ in range(clients)
        ]
        await asyncio.gather(*tasks)
        # The burst, while the clients keep polling.
        until = [time.monotonic() + 3600]
        tasks = [
            asyncio.create_task(poller(client, ids, token, until, during)) for _ in range(clients)
        ]
        await asyncio.sleep(1.0)
        headers = {"Authorization": f"Bearer {token}"}
        run = uuid.uuid4().hex[:4]

        async def submit(i: int) -> str:
            r = await client.post(
                f"/api/v1/teams/{team}/jobs",
                json={"name": f"burst-{run}-{i}", "workers": 1, "code": "bench"},
                headers=headers,
            )
            assert r.status_code == 201, r.text
            return str(r.json()["id"])

        started = time.perf_counter()
        try:
            made = await asyncio.gather(*(submit(i) for i in range(burst)))
            rate = burst / (time.perf_counter() - started)
        finally:
            until[0] = 0.0
            await asyncio.gather(*tasks, return_exceptions=True)
    return steady, during, rate, list(made)


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_one(database: str, args: argparse.Namespace, pg: Any) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix=f"tfkube-bench-{database}-"))
    url = pg.create_database() if pg is not None else None
    tag = uuid.uuid4().hex
    env = {**os.environ, TAG: tag, "TFKUBE_HOME": str(tmp / "home")}
    server = server_tools.ServerProc(
        tmp / "data", server_tools.free_port(), url, env, ["--cpus", "1"]
    )
    server.start()
    burst_ids: list[str] = []
    admin = None
    try:
        r = httpx.post(
            f"{server.url}/api/v1/setup",
            json={"token": server.setup_token, "name": "admin", "password": server_tools.PASSWORD},
        )
        assert r.status_code == 201, r.text
        admin = server_tools.api_for(server.url, "admin")
        member = admin.new_user("member")
        admin.add_member("default", member, "member")
        token = server_tools.token_for(server.url, member)
        uploaded = admin.ok(
            admin.post(
                "/api/v1/teams/default/artifacts",
                params={"name": "bench", "filename": "bench.tar.gz"},
                content=code_archive(),
                headers={"Content-Type": "application/octet-stream"},
            ),
            201,
        )
        db_url = url or f"sqlite:///{tmp / 'data' / 'tfkube.db'}"
        if db_url.startswith("postgresql://"):
            db_url = "postgresql+psycopg://" + db_url.split("://", 1)[1]
        ids = seed(db_url, args.jobs, "default", member, uploaded["id"])
        steady, during, rate, burst_ids = asyncio.run(
            load_phase(server.url, token, ids, "default", args.clients, args.seconds, args.burst)
        )
        assert server.proc is not None
        rss = peak_rss_mib(server.proc.pid)
    finally:
        if admin is not None:
            for job_id in burst_ids:  # what the queue has not started never will
                admin.post(f"/api/v1/jobs/{job_id}/stop")
            admin.close()
        server.stop()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and tagged(tag):
            time.sleep(0.2)
        for proc in tagged(tag):
            proc.kill()
    return {
        "database": database,
        "steady": steady,
        "during": during,
        "rate": rate,
        "rss": rss,
    }


def tagged(tag: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get(TAG) == tag:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def row(result: dict[str, Any], args: argparse.Namespace) -> str:
    def ms(values: list[float], q: float) -> float:
        return percentile(values, q) * 1000

    s, d = result["steady"], result["during"]
    ratio50 = ms(s.status, 0.5) / ms(s.healthz, 0.5)
    ratio99 = ms(s.status, 0.99) / ms(s.healthz, 0.99)
    burst99 = ms(d.status, 0.99) / ms(d.healthz, 0.99)
    polls = len(s.status) + len(s.healthz)
    return (
        f"| {result['database']} | {args.jobs:,} | {args.clients} | "
        f"{polls / args.seconds:.0f} | "
        f"{ms(s.healthz, 0.5):.1f} / {ms(s.healthz, 0.99):.1f} | "
        f"{ms(s.status, 0.5):.1f} / {ms(s.status, 0.99):.1f} | "
        f"**{ratio50:.2f}** / **{ratio99:.2f}** | "
        f"{ms(d.status, 0.99):.1f} ({burst99:.2f}x) | "
        f"**{result['rate']:.1f}** | {result['rss']:.0f} | {s.errors + d.errors} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--burst", type=int, default=100)
    args = parser.parse_args()
    databases = [d.strip() for d in args.databases.split(",") if d.strip()]
    pg = postgres_tools.start_postgres() if "postgresql" in databases else None
    results = []
    try:
        for database in databases:
            print(f"{database}: running ...", file=sys.stderr, flush=True)
            results.append(run_one(database, args, pg if database == "postgresql" else None))
    finally:
        if pg is not None:
            pg.stop()
    print(
        "| database | jobs in DB | clients | polls/s | /healthz p50 / p99 (ms) | "
        "status p50 / p99 (ms) | **status / healthz** p50 / p99 | status p99 during the burst "
        "(ratio) | **submissions/s** | peak RSS (MiB) | errors |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for result in results:
        print(row(result, args))
    print(f"\n(status latency medians: {[statistics.median(r['steady'].status) for r in results]})")


if __name__ == "__main__":
    main()
