"""Searching a job's logs on the server, in a real Chromium against a real `tfkube
server` (local engine): every replica's every start is searched, the hits come in
replica order, and each links to its line, which the job page opens (a window of the
log around it, the line marked) whether the link is clicked on the page or opened as an
address; another team's user gets "not found". A job that writes a 1,000-replica log
folder (3 starts each) of its own is searched through the API and the page, with the
time each bounded answer took printed.

The jobs are shell jobs (no TensorFlow)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from server._server import Api
from server.conftest import targz, upload, wait_job

from ._browser import LAPTOP, poll, shot, sign_in
from .conftest import PASSWORD, Site, two_teams

RUN = """#!/bin/sh
out="$TFKUBE_LOG_DIR"
index="$TFKUBE_INDEX"
case "$index" in
0)
  echo "worker 0 starts"
  echo "needle: worker 0 says hello"
  # The job ends when worker 0 does: wait for the others' last words.
  for i in $(seq 600); do
    [ -f "$out/done-1" ] && [ -f "$out/done-2" ] && break
    sleep 0.2
  done
  echo "worker 0 done"
  ;;
1)
  if [ ! -f "$out/started-1" ]; then
    touch "$out/started-1"
    echo "needle: first start of worker 1 fails"
    exit 3
  fi
  echo "needle again: worker 1 restarted"
  touch "$out/done-1"
  ;;
2)
  i=1
  while [ $i -le 60000 ]; do
    if [ $i -eq 20000 ]; then echo "needle deep in worker 2 <b>not markup</b>"
    else echo "filler line $i of worker 2, nothing to see here"; fi
    i=$((i + 1))
  done
  touch "$out/done-2"
  ;;
esac
"""

CROWD = """#!/bin/sh
set -e
logs="$TFKUBE_LOG_DIR/.tfkube/logs"
i=0
while [ $i -lt 400 ]; do
  echo "step $i: loss=0.$i examples/sec=1234.5 all fine here"
  i=$((i + 1))
done > "$TFKUBE_LOG_DIR/body.txt"
# 2,997 copies in one process (a `cp` each took ~12 s on a loaded 2-core machine).
python3 - "$logs" "$TFKUBE_LOG_DIR/body.txt" <<'PY'
import os, shutil, sys
logs, body = sys.argv[1:]
for r in range(1, 1000):
    os.makedirs(f"{logs}/worker-{r}", exist_ok=True)
    for a in range(3):
        shutil.copyfile(body, f"{logs}/worker-{r}/{a}.log")
PY
echo "Traceback: the one line to find" >> "$logs/worker-777/1.log"
echo "crowd ready"
"""


@dataclass
class World:
    bob: Api
    carol: Api
    job: str
    crowd: str


@pytest.fixture(scope="module")
def world(site: Site) -> Iterator[World]:
    bob, carol = two_teams(site)
    bob.ok(upload(bob, "vision", "logs", targz({"run.sh": RUN})), 201)
    bob.ok(upload(bob, "vision", "crowd", targz({"run.sh": CROWD})), 201)
    body = {"name": "logs", "workers": 3, "code": "logs"}
    job = str(bob.ok(bob.post("/api/v1/teams/vision/jobs", json=body), 201)["id"])
    body = {"name": "crowd", "workers": 1, "code": "crowd"}
    crowd = str(bob.ok(bob.post("/api/v1/teams/vision/jobs", json=body), 201)["id"])
    wait_job(bob, job, {"Succeeded"}, timeout=300)
    wait_job(bob, crowd, {"Succeeded"}, timeout=300)
    try:
        yield World(bob, carol, job, crowd)
    finally:
        bob.close()
        carol.close()


def test_the_api_searches_every_replica_and_every_start(world: World) -> None:
    url = f"/api/v1/jobs/{world.job}/logs/search"
    found = world.bob.ok(world.bob.get(url, params={"q": "NEEDLE"}))
    got = [(h["replica"], h["attempt"], h["line"]) for h in found["hits"]]
    assert [(r, a) for r, a, _ in got] == [
        ("worker-0", 0),
        ("worker-1", 0),
        ("worker-1", 1),
        ("worker-2", 0),
    ]
    # Each hit's line number is its line in the kept file (where the launcher's own
    # lines come first).
    for hit in found["hits"]:
        params = {"attempt": hit["attempt"]}
        text = world.bob.get(f"/api/v1/jobs/{world.job}/logs/{hit['replica']}", params=params)
        assert text.text.split("\n")[hit["line"] - 1] == hit["text"]
    assert "needle deep" in found["hits"][-1]["text"]
    assert found["next"] is None
    assert found["searched_files"] == found["total_files"] == 4
    deep = found["hits"][-1]
    text = world.bob.get(
        f"/api/v1/jobs/{world.job}/logs/worker-2",
        params={"attempt": 0, "offset": deep["offset"], "limit": 200},
    ).text
    assert text.startswith(deep["text"] + "\n")
    assert len(text.encode()) == 200
    # One hit per answer: the cursor goes on where the last one stopped.
    paged, cursor = [], None
    while True:
        params = {"q": "needle", "limit": 1, **({"cursor": cursor} if cursor else {})}
        page = world.bob.ok(world.bob.get(url, params=params))
        paged += [(h["replica"], h["attempt"], h["line"]) for h in page["hits"]]
        cursor = page["next"]
        if cursor is None:
            break
    assert paged == got
    for params, field in (
        ({"q": " "}, "q"),
        ({"q": "x" * 201}, "q"),
        ({"q": "a\x00b"}, "q"),
        ({"q": "a", "cursor": "worker-0:x"}, "cursor"),
        ({"q": "a", "limit": 0}, "limit"),
    ):
        r = world.bob.get(url, params=params)
        # (A control character in a query is refused before the route, with a 400.)
        assert r.status_code in (400, 422), (params, r.text)
        assert r.json()["errors"][0]["field"] == field
    assert world.carol.get(url, params={"q": "needle"}).status_code == 404


def test_a_thousand_replicas_logs_are_searched_in_bounded_answers(world: World) -> None:
    url = f"/api/v1/jobs/{world.crowd}/logs/search"
    began = time.perf_counter()
    hits, answers, slowest, cursor = [], 0, 0.0, None
    while True:
        t0 = time.perf_counter()
        params = {"q": "traceback", **({"cursor": cursor} if cursor else {})}
        page = world.bob.ok(world.bob.get(url, params=params))
        slowest = max(slowest, time.perf_counter() - t0)
        answers += 1
        hits += page["hits"]
        assert page["searched_bytes"] <= 17 * 2**20
        cursor = page["next"]
        if cursor is None:
            break
    took = time.perf_counter() - began
    assert [(h["replica"], h["attempt"], h["line"]) for h in hits] == [("worker-777", 1, 401)]
    assert page["total_files"] == 3 * 999 + 1
    assert page["searched_files"] == page["total_files"]
    print(
        f"\nthrough the API, 2,998 logs of 1,000 replicas: {answers} answers, {took:.2f} s, "
        f"the slowest {slowest:.2f} s"
    )


def test_search_from_the_job_page_and_open_a_hit(browser: Any, site: Site, world: World) -> None:
    context = browser.new_context(viewport=LAPTOP, base_url=site.url)
    context.set_default_timeout(30_000)
    page = context.new_page()
    sign_in(page, site.url, "bob", PASSWORD)
    page.goto(f"/jobs/{world.job}")
    page.locator('[data-logs][data-loaded="true"]').wait_for()
    page.get_by_label("Search every log").fill("needle")
    page.get_by_role("button", name="Search", exact=True).click()
    hits = page.locator("[data-log-hits-list] li")
    poll("four hits", lambda: hits.count() == 4, 30)
    assert "every log searched" in page.locator("[data-log-hits-status]").inner_text()
    assert page.get_by_role("button", name="Search further").is_hidden()
    deep = world.bob.ok(
        world.bob.get(f"/api/v1/jobs/{world.job}/logs/search", params={"q": "needle deep"})
    )["hits"][0]["line"]
    labels = [t.strip() for t in hits.locator("a").all_inner_texts()]
    assert [label.rsplit(" · line ", 1)[0] for label in labels] == [
        "worker-0 · start #1",
        "worker-1 · start #1",
        "worker-1 · start #2",
        "worker-2 · start #1",
    ]
    assert labels[3].endswith(f" · line {deep:,}")
    # A log line that looks like markup is shown as text.
    assert "<b>not markup</b>" in hits.nth(3).locator("code").inner_text()
    shot(page, "70-log-search")

    # The deep hit: beyond the last MiB the panel shows at first, opened at its line.
    hits.nth(3).locator("a").click()
    marked = page.locator("pre.log mark[data-log-mark]")
    marked.wait_for()
    assert marked.get_attribute("data-log-mark") == str(deep)
    assert marked.inner_text() == "needle deep in worker 2 <b>not markup</b>"
    assert page.locator("#log-replica").input_value() == "worker-2"
    assert f"Line {deep:,} of worker-2" in page.locator("[data-log-status]").inner_text()
    before = page.locator("pre.log").inner_text().split("\n")
    i = before.index("needle deep in worker 2 <b>not markup</b>")
    assert before[i - 1] == "filler line 19999 of worker 2, nothing to see here"
    assert before[i + 1] == "filler line 20001 of worker 2, nothing to see here"
    visible = page.evaluate(
        """() => { const pre = document.querySelector('pre.log');
                   const m = pre.querySelector('mark').getBoundingClientRect();
                   const p = pre.getBoundingClientRect();
                   return m.top >= p.top && m.bottom <= p.bottom; }"""
    )
    assert visible, "the marked line is scrolled into the log's view"
    assert re.search(rf"replica=worker-2&attempt=0&at=\d+&line={deep}#logs$", page.url)
    shot(page, "71-log-hit-opened")

    # The restarted replica's first start, by its address alone (a shared link).
    hits.nth(1).locator("a").click()
    marked.filter(has_text="first start of worker 1 fails").wait_for()
    link = hits.nth(1).locator("a").get_attribute("href")
    assert link is not None
    fresh = context.new_page()
    fresh.goto(link)
    fresh.locator("pre.log mark[data-log-mark]").filter(has_text="first start").wait_for()
    assert fresh.locator("#log-attempt").input_value() == "0"
    fresh.close()

    # 1,000 replicas' logs: the page asks again until every log was searched.
    page.goto(f"/jobs/{world.crowd}")
    page.get_by_label("Search every log").fill("traceback")
    page.get_by_role("button", name="Search", exact=True).click()
    status = page.locator("[data-log-hits-status]")
    poll("every log searched", lambda: "every log searched: 2,998" in status.inner_text(), 120)
    assert hits.count() == 1
    hits.first.locator("a").click()
    page.locator("pre.log mark[data-log-mark]").filter(has_text="Traceback").wait_for()
    assert page.locator("#log-replica").input_value() == "worker-777"
    shot(page, "72-log-search-1000-replicas")

    # Another team's user: not found, page and API alike.
    other = browser.new_context(viewport=LAPTOP, base_url=site.url)
    carol = other.new_page()
    sign_in(carol, site.url, "carol", PASSWORD)
    response = carol.goto(link)
    assert response is not None
    assert response.status == 404
    other.close()
    context.close()
