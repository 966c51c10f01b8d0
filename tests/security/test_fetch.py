"""No fetching on a member's behalf toward loopback or internal ranges; one error for
every refused target; a slow URL holds up nobody else (issue 17, item 6).

Real `tfkube server` processes (local engine, SQLite) and small HTTP servers of the
test's own, all on 127.0.0.0/8 (nothing else is ever dialled: private ranges are
table-tested without a connection in tests/unit/test_fetch_policy.py).

- default server: a member's job with code at a loopback URL (an open port with a real
  archive, a closed port, `localhost`, `[::1]`, `0.0.0.0`, `127.1`, `2130706433`) is
  refused at submit with one and the same text, and the open port never sees a request;
- `--allow-fetch-from 127.0.0.2/32`: code on 127.0.0.2 is fetched and the job runs (its
  replicas then fetch it from the server over loopback, as uploaded code); a redirect from
  there to 127.0.0.1 is refused; a URL that sends a byte every 2 s is cut by the minimum
  rate, in its member's own request, while another team's job starts at once.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from server._server import Api, ServerProc, api_for, free_port
from server.conftest import start_server, stop_server, targz, upload, wait_job

RUN_SH = "#!/bin/sh\necho fetched-code-ran\n"
ARCHIVE = targz({"run.sh": RUN_SH})
SLOW_SECONDS = 40.0
"""How long the slow URL keeps dripping (a byte every 2 s) unless cut."""


@dataclass
class Origin:
    """A small HTTP server on one loopback address: an archive, a redirect, a slow drip."""

    host: str
    redirect_to: str = ""
    hits: Counter[str] = field(default_factory=Counter)
    stop: threading.Event = field(default_factory=threading.Event)
    server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://{self.host}:{self.server.server_address[1]}"

    def start(self) -> None:
        origin = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                origin.hits[self.path] += 1
                origin.hits[f"host:{self.headers['Host']}"] += 1
                if self.path == "/code.tar.gz":
                    self._send(ARCHIVE)
                elif self.path == "/redirect":
                    self.send_response(302)
                    self.send_header("Location", origin.redirect_to)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif self.path == "/slow.tar.gz":
                    self._drip()
                else:
                    self.send_error(404)

            def _send(self, data: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _drip(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                ends = time.monotonic() + SLOW_SECONDS
                try:
                    while time.monotonic() < ends and not origin.stop.is_set():
                        self.wfile.write(b"\x1f")
                        self.wfile.flush()
                        origin.stop.wait(2.0)
                except OSError:
                    return

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((self.host, 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stop.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture(scope="module")
def origins() -> Iterator[tuple[Origin, Origin]]:
    """(on 127.0.0.1, on 127.0.0.2); the second redirects to the first."""
    here, allowed = Origin("127.0.0.1"), Origin("127.0.0.2")
    here.start()
    allowed.redirect_to = f"{here.url}/code.tar.gz"
    allowed.start()
    try:
        yield here, allowed
    finally:
        here.close()
        allowed.close()


@dataclass
class Site:
    server: ServerProc
    admin: Api
    tag: str
    members: dict[str, Api] = field(default_factory=dict)

    def member_of(self, team: str) -> Api:
        if team not in self.members:
            self.admin.new_team(team)
            user = self.admin.new_user()
            self.admin.add_member(team, user, "member")
            self.members[team] = api_for(self.server.url, user)
        return self.members[team]

    def close(self) -> None:
        for api in self.members.values():
            api.close()
        stop_server(self.server, self.admin, self.tag)


def _site(tmp: Path, extra: list[str]) -> Site:
    server, admin, tag = start_server(tmp, "sqlite", None, extra)
    return Site(server, admin, tag)


@pytest.fixture(scope="module")
def default_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    site = _site(tmp_path_factory.mktemp("fetch-default"), [])
    try:
        yield site
    finally:
        site.close()


@pytest.fixture(scope="module")
def allowing_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    site = _site(tmp_path_factory.mktemp("fetch-allow"), ["--allow-fetch-from", "127.0.0.2/32"])
    try:
        yield site
    finally:
        site.close()


def _submit(api: Api, team: str, name: str, code: str, **kw: Any) -> Any:
    if "://" not in code:  # an uploaded artifact: the quick form
        body: dict[str, Any] = {"name": name, "workers": 1, "code": code}
    else:
        spec = {"replicas": {"worker": {"replicas": 1}}, "code": {"source": code}}
        body = {
            "manifest": {
                "apiVersion": "tfkube.io/v1alpha1",
                "kind": "TFJob",
                "metadata": {"name": name},
                "spec": spec,
            }
        }
    return api.post(f"/api/v1/teams/{team}/jobs", json=body, **kw)


def _message(r: Any) -> str:
    assert r.status_code == 422, (r.status_code, r.text[:300])
    (error,) = [e for e in r.json()["errors"] if e["field"] == "spec.code.source"]
    return str(error["message"])


def test_loopback_urls_are_refused_with_one_text(
    default_site: Site, origins: tuple[Origin, Origin]
) -> None:
    here, _ = origins
    api = default_site.member_of("fetchers")
    port = here.url.rsplit(":", 1)[1]
    closed = free_port()
    urls = [
        f"{here.url}/code.tar.gz",  # open, a real archive
        f"http://127.0.0.1:{closed}/code.tar.gz",  # closed
        f"http://localhost:{port}/code.tar.gz",
        f"http://[::1]:{port}/code.tar.gz",
        f"http://0.0.0.0:{port}/code.tar.gz",
        f"http://127.1:{port}/code.tar.gz",
        f"http://2130706433:{port}/code.tar.gz",
        f"http://[::ffff:127.0.0.1]:{port}/code.tar.gz",
    ]
    texts = {url: _message(_submit(api, "fetchers", f"j{i}", url)) for i, url in enumerate(urls)}
    assert len(set(texts.values())) == 1, texts
    assert "does not fetch from this address" in next(iter(texts.values()))
    assert here.hits["/code.tar.gz"] == 0, "the server connected to a refused address"


def test_an_allowed_range_is_fetched_and_the_job_runs(
    allowing_site: Site, origins: tuple[Origin, Origin]
) -> None:
    _, allowed = origins
    api = allowing_site.member_of("fetchers")
    before = allowed.hits["/code.tar.gz"]
    r = _submit(api, "fetchers", "allowed", f"{allowed.url}/code.tar.gz")
    assert r.status_code == 201, r.text
    job = wait_job(api, r.json()["id"], {"Succeeded", "Failed"}, timeout=180)
    assert job["phase"] == "Succeeded", job
    log = api.get(f"/api/v1/jobs/{job['id']}/logs/worker-0").text
    assert "fetched-code-ran" in log
    assert allowed.hits["/code.tar.gz"] == before + 1  # once, by the server; never by replicas


def test_a_redirect_to_a_refused_address_is_refused(
    allowing_site: Site, origins: tuple[Origin, Origin]
) -> None:
    here, allowed = origins
    api = allowing_site.member_of("fetchers")
    message = _message(_submit(api, "fetchers", "redirected", f"{allowed.url}/redirect"))
    assert "does not fetch from this address" in message
    assert allowed.hits["/redirect"] >= 1
    assert here.hits["/code.tar.gz"] == 0


def test_a_name_is_resolved_once_and_its_address_is_dialled(
    origins: tuple[Origin, Origin], tmp_path: Path
) -> None:
    """DNS rebinding: the name answers an allowed address first and a refused one after;
    the fetch connects to the address it judged and never asks again."""
    from tfkube.server.core.fetch import FetchPolicy, fetch
    from tfkube.server.core.forwarded import parse_networks

    here, allowed = origins
    answers = iter([["127.0.0.2"], ["127.0.0.1"], ["127.0.0.1"]])
    asked: list[str] = []

    def rebinding(host: str, port: int) -> list[str]:
        asked.append(host)
        return next(answers)

    policy = FetchPolicy(allowed=parse_networks(["127.0.0.2/32"]), resolver=rebinding)
    port = allowed.url.rsplit(":", 1)[1]
    before = allowed.hits["/code.tar.gz"]
    fetch(f"http://rebind.test:{port}/code.tar.gz", tmp_path / "code", policy)
    assert (tmp_path / "code").read_bytes() == ARCHIVE
    assert asked == ["rebind.test"]
    assert allowed.hits["/code.tar.gz"] == before + 1
    assert allowed.hits[f"host:rebind.test:{port}"] >= 1
    assert here.hits["/code.tar.gz"] == 0


def test_a_slow_url_holds_up_no_other_team(
    allowing_site: Site, origins: tuple[Origin, Origin]
) -> None:
    """Team A's code URL sends a byte every 2 s. Team B's job, submitted right after,
    must start at once (it waited 21 s in the finding); A is told within the grace of
    the minimum rate, in its own request."""
    _, allowed = origins
    a = allowing_site.member_of("slow-a")
    b = allowing_site.member_of("slow-b")
    b.ok(upload(b, "slow-b", "quick", targz({"run.sh": "#!/bin/sh\necho quick\n"})), 201)
    answer: dict[str, Any] = {}

    def submit_slow() -> None:
        started = time.monotonic()
        answer["response"] = _submit(a, "slow-a", "slow", f"{allowed.url}/slow.tar.gz", timeout=120)
        answer["seconds"] = time.monotonic() - started

    slow = threading.Thread(target=submit_slow)
    slow.start()
    deadline = time.monotonic() + 10
    while allowed.hits["/slow.tar.gz"] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert allowed.hits["/slow.tar.gz"] == 1, "the slow URL was never fetched"
    time.sleep(1.0)  # A's fetch is under way (on main's code: queued, then in the sync loop)
    submitted = time.monotonic()
    job = b.ok(_submit(b, "slow-b", "quick", "quick"), 201)
    while b.ok(b.get(f"/api/v1/jobs/{job['id']}"))["queued"]:
        assert time.monotonic() - submitted < 60, "team B's job never left the queue"
        time.sleep(0.1)
    waited = time.monotonic() - submitted
    slow.join(90)
    print(
        f"\nteam B's job waited {waited:.1f} s in the queue; team A was answered after "
        f"{answer.get('seconds', float('nan')):.1f} s"
    )
    assert waited < 8.0, f"team B's job waited {waited:.1f} s behind team A's slow URL"
    message = _message(answer["response"])
    assert "bytes/s" in message, message
    assert answer["seconds"] < 30.0
