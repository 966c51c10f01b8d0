"""A job's result file is the workload's word, never trusted (issue 22).

A real `tfkube server` (local engine, SQLite). Team A's jobs (a shell `run.sh`, no
TensorFlow) each leave one hostile `$TFKUBE_LOG_DIR/result.json`: 4 MiB of valid JSON, a
thousand names, markup for a name, text and NaN for numbers, a link to team B's result,
a FIFO. One job writes a good file, so the test cannot pass by showing nothing. For each,
the API's job body, the jobs list (kept when the job ended), the job page and the jobs
page must show none of what the file says (only why it was refused), answer promptly,
and keep the page intact: a server that loads the file as it is fails here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from server._server import Api, api_for, login
from server.conftest import start_server, stop_server, targz, upload, wait_job

B_SECRET = "team_b_secret_metric"
MARKUP = "<img src=x onerror=alert(1)>"


def script(body: str) -> str:
    return f'#!/bin/sh\nset -e\nout="$TFKUBE_LOG_DIR"\n{body}\necho done\n'


def hostile(victim_result: str) -> dict[str, tuple[str, str]]:
    """name -> (run.sh body, what the job page must say about it)."""
    big = (
        "python3 -c \"import json,sys; d={'accuracy': 0.99}; "
        "d.update(('pad%d' % i, 'x' * 200) for i in range(20000)); "
        'json.dump(d, sys.stdout)" > "$out/result.json"'
    )
    many = (
        "python3 -c \"import json,sys; json.dump({'m%d' % i: i for i in range(1000)}, "
        'sys.stdout)" > "$out/result.json"'
    )
    return {
        "big": (big, "larger than"),
        "many": (many, "more than 32 names"),
        "markup": (
            f'printf \'%s\' \'{{"{MARKUP}": 1, "accuracy": 0.99}}\' > "$out/result.json"',
            "is not a result name",
        ),
        "text": ('echo \'{"accuracy": "0.99"}\' > "$out/result.json"', "give a number"),
        "nan": ('echo \'{"accuracy": NaN}\' > "$out/result.json"', "not a finite number"),
        "linked": (f'ln -s {victim_result} "$out/result.json"', "was not read"),
        "fifo": ('mkfifo "$out/result.json"', "was not read"),
    }


class World:
    def __init__(self, server: Any, admin: Api) -> None:
        self.server, self.admin = server, admin
        self.team_a, self.team_b = admin.new_team(), admin.new_team()
        self.user_a, user_b = admin.new_user(), admin.new_user()
        admin.add_member(self.team_a, self.user_a, "member")
        admin.add_member(self.team_b, user_b, "member")
        self.a, self.b = api_for(server.url, self.user_a), api_for(server.url, user_b)

    def submit(self, api: Api, team: str, name: str, body: str) -> str:
        api.ok(upload(api, team, name, targz({"run.sh": script(body)})), 201)
        job = api.ok(
            api.post(f"/api/v1/teams/{team}/jobs", json={"name": name, "workers": 1, "code": name}),
            201,
        )
        return str(job["id"])


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    server, admin, tag = start_server(tmp_path_factory.mktemp("results"), "sqlite", None)
    w = None
    try:
        w = World(server, admin)
        victim = w.submit(
            w.b, w.team_b, "victim", f'echo \'{{"{B_SECRET}": 42}}\' > "$out/result.json"'
        )
        wait_job(w.b, victim, {"Succeeded"}, timeout=180)
        victim_result = server.data_dir / "teams" / w.team_b / "outputs" / victim / "result.json"
        assert B_SECRET in victim_result.read_text()
        cases = hostile(str(victim_result))
        jobs = {name: w.submit(w.a, w.team_a, name, body) for name, (body, _said) in cases.items()}
        jobs["good"] = w.submit(
            w.a, w.team_a, "good", 'echo \'{"accuracy": 0.875}\' > "$out/result.json"'
        )
        for job_id in jobs.values():
            wait_job(w.a, job_id, {"Succeeded"}, timeout=180)
        yield {"w": w, "jobs": jobs, "said": {n: s for n, (_b, s) in cases.items()}}
    finally:
        if w is not None:
            w.a.close()
            w.b.close()
        stop_server(server, admin, tag)


def test_the_api_keeps_only_a_good_result(world: dict[str, Any]) -> None:
    a, jobs, said = world["w"].a, world["jobs"], world["said"]
    good = a.ok(a.get(f"/api/v1/jobs/{jobs['good']}"))
    assert good["result"] == {"accuracy": 0.875}
    for name, reason in said.items():
        started = time.monotonic()
        body = a.ok(a.get(f"/api/v1/jobs/{jobs[name]}"))
        assert time.monotonic() - started < 10, f"{name}: the job body took too long"
        assert body["result"] is None, f"{name}: {body['result']!r}"
        assert reason in (body["result_problem"] or ""), f"{name}: {body['result_problem']!r}"
        assert B_SECRET not in str(body)
    listed = a.ok(a.get("/api/v1/jobs", params={"team": world["w"].team_a}))
    kept = {j["name"]: j["result"] for j in listed["items"]}
    assert kept.pop("good") == {"accuracy": 0.875}
    assert set(kept.values()) == {None}, kept
    assert listed["result_keys"] == ["accuracy"]  # no column from a refused file


def test_the_pages_show_the_reason_never_the_file(world: dict[str, Any]) -> None:
    w, jobs, said = world["w"], world["jobs"], world["said"]
    client, _csrf = login(w.server.url, w.user_a)
    try:
        for name, reason in said.items():
            started = time.monotonic()
            page = client.get(f"/jobs/{jobs[name]}")
            assert time.monotonic() - started < 10, f"{name}: the page took too long"
            assert page.status_code == 200, name
            html = page.text
            assert "data-result-problem" in html, name
            assert reason in _unescaped(html), name
            assert "data-metric=" not in html, f"{name}: a result card from a refused file"
            assert MARKUP not in html  # the name is shown as text, never as markup
            assert B_SECRET not in html
            assert "pad1999" not in html
            assert html.rstrip().endswith("</html>"), f"{name}: the page is cut short"
        good = client.get(f"/jobs/{jobs['good']}").text
        assert 'data-metric="accuracy">0.875<' in good
        listing = client.get("/jobs", params={"team": w.team_a, "sort": "-result.accuracy"})
        assert listing.status_code == 200
        assert MARKUP not in listing.text
        assert B_SECRET not in listing.text
        assert listing.text.count('data-result="accuracy"') == len(jobs)  # one column
    finally:
        client.close()


def test_a_sort_by_a_name_no_file_may_hold_is_refused(world: dict[str, Any]) -> None:
    a = world["w"].a
    for bad in ("result." + "x" * 65, "result.", "secret"):
        answer = a.get("/api/v1/jobs", params={"sort": bad})
        assert answer.status_code == 422, (bad, answer.text)
    assert a.get("/api/v1/jobs", params={"sort": "-result.accuracy"}).status_code == 200


def _unescaped(html: str) -> str:
    import html as h

    return h.unescape(html)
