"""Priorities on the local engine (issue 21, point 3): a site admin gives a team a higher
priority; its job, which does not fit beside a lower team's training job, stops that job
and runs; the stopped job is queued again and resumes from its checkpoint once there is
room. It counts 1 preemption and 0 restarts (never a failure), in the API, its events,
`tfkube status`, /metrics and the dashboard's jobs list. Real TensorFlow, a real server on
SQLite (PostgreSQL runs the migration with the rest of the API suite)."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import tfkube

from ._postgres import Postgres
from ._server import Api, ServerProc, api_for, login
from .conftest import start_server, stop_server

pytestmark = pytest.mark.tf
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mnist-between-graph"
STEPS = 1000
"""The lower job's steps: at --step_sleep=0.02, at least 19 s of training are left after
its first checkpoint (step 50) for the urgent job to preempt it (it was 1,500: 10 s more
of sleeping that proved nothing more)."""


@pytest.fixture(scope="module")
def two_cpus(
    tmp_path_factory: pytest.TempPathFactory, postgres: Postgres | None
) -> Iterator[tuple[ServerProc, Api]]:
    tmp = tmp_path_factory.mktemp("preemption")
    server, admin, tag = start_server(tmp, "sqlite", None, ["--cpus", "2"])
    try:
        yield server, admin
    finally:
        stop_server(server, admin, tag)


def _member(server: ServerProc, admin: Api, team: str) -> Api:
    user = admin.new_user()
    admin.add_member(team, user, "admin")
    return api_for(server.url, user)


def test_a_higher_priority_preempts_and_the_lower_job_resumes_from_its_checkpoint(
    two_cpus: tuple[ServerProc, Api], tmp_path: Path
) -> None:
    server, admin = two_cpus
    low, high = admin.new_team(), admin.new_team()
    low_api, high_api = _member(server, admin, low), _member(server, admin, high)
    try:
        # Only a site admin sets a priority; a team's own admin cannot raise theirs.
        refused = high_api.patch(f"/api/v1/teams/{high}", json={"priority": 10})
        assert refused.status_code == 403, refused.text
        changed = admin.ok(admin.patch(f"/api/v1/teams/{high}", json={"priority": 10}))
        assert changed["priority"] == 10
        assert admin.ok(admin.get(f"/api/v1/teams/{low}"))["priority"] == 0

        with tfkube.Client(server.url, low_api.token, team=low) as c:
            c.upload(EXAMPLE, "mnist")
            args = [f"--train_steps={STEPS}", "--step_sleep=0.02", "--checkpoint_steps=50"]
            training = c.submit(name="mnist", workers=1, ps=1, code="mnist", args=args)
            # 1 PS + 1 worker hold 1 of the 2 CPUs; wait for its first checkpoint.
            deadline = time.monotonic() + 300
            while "checkpoint" not in {f.path for f in c.outputs(training.id)}:
                assert time.monotonic() < deadline, c.get(training.id)
                time.sleep(1.0)

        name = f"urgent-{uuid.uuid4().hex[:6]}"
        code = tmp_path / name
        code.mkdir()
        (code / "run.sh").write_text("#!/bin/sh\necho URGENT-RAN\nsleep 2\n")
        (code / "run.sh").chmod(0o755)
        manifest = {
            "apiVersion": "tfkube.io/v1alpha1",
            "kind": "TFJob",
            "metadata": {"name": name},
            "spec": {
                "code": {"source": f"artifact:{name}"},
                "replicas": {"worker": {"replicas": 1, "resources": {"cpu": "2"}}},
            },
        }
        with tfkube.Client(server.url, high_api.token, team=high) as c:
            c.upload(code, name)
            submitted = time.time()
            urgent = c.submit(manifest)
            done = c.wait(urgent.id, timeout=300, poll=0.5)
            assert done.phase == "Succeeded", (done.reason, done.message)
            assert "URGENT-RAN" in "\n".join(c.logs(urgent.id, "worker-0"))
            urgent_started = min(
                e.time for e in c.events(urgent.id) if "started worker-0" in e.message
            )

        with tfkube.Client(server.url, low_api.token, team=low) as c:
            events = [e.message for e in c.events(training.id)]
            assert any(f"preempted by job {name} of team {high}" in m for m in events), events
            resumed = c.wait(training.id, timeout=600, poll=1.0)
            assert resumed.phase == "Succeeded", (resumed.reason, resumed.message)
            assert resumed.preemptions == 1
            assert resumed.restarts == 0  # a preemption is not a restart, nor a failure
            log = "\n".join(c.logs(training.id, "worker-0"))
            assert re.search(r"tfkube-example: restoring model\.ckpt-\d+", log), log[-3000:]
            assert resumed.result is not None
            assert float(resumed.result["global_step"]) >= STEPS
            timeline = c.events(training.id)
        preempted = next(e.time for e in timeline if "preempted by job" in e.message)
        back = min(
            e.time for e in timeline if e.time > preempted and "started worker-0" in e.message
        )
        print(
            f"PREEMPTION: submit -> preempted {preempted - submitted:.1f} s; preempted -> the "
            f"urgent job running {urgent_started - preempted:.1f} s; its end -> the preempted "
            f"job's chief started again {back - (done.finished_at or 0):.1f} s"
        )
        metrics = admin.get("/metrics").text
        assert f'tfkube_job_preemptions{{team="{low}"}} 1.0' in metrics
        # The dashboard's jobs list says it beside the restarts (0).
        browser, _ = login(server.url, low_api.name)
        try:
            listing = browser.get("/jobs", params={"team": low}).text
        finally:
            browser.close()
        row = re.search(rf'id="job-{training.id}".*?</tr>', listing, re.S)
        assert row, listing
        assert re.search(r'<td class="num hide-sm">0<span class="sub" data-preemptions="1"',
                         row.group(0)), row.group(0)  # fmt: skip
        assert "preempted 1\u00d7" in row.group(0)
    finally:
        low_api.close()
        high_api.close()
