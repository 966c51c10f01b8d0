"""Comparing jobs in a real Chromium against a real `tfkube server` (local engine): bob
ticks three of his team's jobs on the jobs list (the ticks survive the list's live
refresh), compares them at a shareable address, and sees their results (the best
marked), their curves overlaid (one line per job) and their arguments diffed; carol, of
another team, gets "not found" at the same address and from the API, which answers the
same comparison as JSON.

The jobs are quick shell jobs (no TensorFlow): each copies TensorBoard event files the
test wrote (real TFRecord files of `Event` protos) and writes its result."""

from __future__ import annotations

import re
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from server._server import Api
from server.conftest import targz, upload, wait_job

from ._browser import LAPTOP, poll, shot, sign_in
from .conftest import PASSWORD, Site, two_teams

RUN = """#!/bin/sh
set -e
curve=a
score=0
for arg in "$@"; do
  case "$arg" in
    --curve=*) curve="${arg#--curve=}" ;;
    --score=*) score="${arg#--score=}" ;;
  esac
done
out="$TFKUBE_LOG_DIR"
mkdir -p "$out/train"
cp "events-$curve.bin" "$out/train/events.out.tfevents.1.host"
echo "{\\"test_accuracy\\": $score, \\"test_loss\\": 1.5}" > "$out/r.tmp"
mv "$out/r.tmp" "$out/result.json"
echo "trained with $*"
"""


def events(scale: float) -> bytes:
    """A TensorBoard event file: loss and accuracy at steps 1-5."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    out = b""
    for step in range(1, 6):
        event = Event(wall_time=time.time() + step, step=step)
        event.summary.value.append(Summary.Value(tag="loss", simple_value=scale / step))
        event.summary.value.append(Summary.Value(tag="accuracy", simple_value=1 - scale / step))
        data = event.SerializeToString()
        length = struct.pack("<Q", len(data))
        out += length + struct.pack("<I", masked_crc32c(length))
        out += data + struct.pack("<I", masked_crc32c(data))
    return out


@dataclass
class World:
    bob: Api
    carol: Api
    jobs: dict[str, str]
    """name -> id of bob's three jobs."""
    theirs: str
    """carol's job's id."""


JOBS = {
    "cmp-a": ["--curve=a", "--score=0.6", "--lr=0.1", "--epochs=3"],
    "cmp-b": ["--curve=b", "--score=0.9", "--lr", "0.2", "--epochs=3"],
    "cmp-c": ["--curve=c", "--score=0.7", "--lr=0.1", "--epochs=3"],
}


@pytest.fixture(scope="module")
def world(site: Site) -> Iterator[World]:
    bob, carol = two_teams(site)
    code = targz(
        {
            "run.sh": RUN,
            "events-a.bin": events(1.0),
            "events-b.bin": events(0.5),
            "events-c.bin": events(2.0),
        }
    )
    bob.ok(upload(bob, "vision", "curves", code), 201)
    carol.ok(upload(carol, "other", "curves", code), 201)
    jobs = {}
    for name, args in JOBS.items():
        body = {"name": name, "workers": 1, "code": "curves", "args": args}
        jobs[name] = str(bob.ok(bob.post("/api/v1/teams/vision/jobs", json=body), 201)["id"])
    body = {"name": "theirs", "workers": 1, "code": "curves", "args": ["--score=0.99"]}
    theirs = str(carol.ok(carol.post("/api/v1/teams/other/jobs", json=body), 201)["id"])
    for job_id in jobs.values():
        wait_job(bob, job_id, {"Succeeded"}, timeout=300)
    wait_job(carol, theirs, {"Succeeded"}, timeout=300)
    try:
        yield World(bob, carol, jobs, theirs)
    finally:
        bob.close()
        carol.close()


def test_the_api_compares_what_the_user_may_see(world: World) -> None:
    ids = [world.jobs[n] for n in JOBS]
    answer = world.bob.ok(world.bob.get("/api/v1/compare", params={"jobs": ",".join(ids)}))
    assert [j["name"] for j in answer["jobs"]] == list(JOBS)
    rows = {r["name"]: r for r in answer["results"]}
    assert rows["test_accuracy"]["values"] == [0.6, 0.9, 0.7]
    assert rows["test_accuracy"]["best"] == 1
    assert rows["test_loss"]["best"] is None  # all the same
    args = {r["name"]: r for r in answer["arguments"]}
    assert args["worker --lr"] == {
        "name": "worker --lr",
        "values": ["0.1", "0.2", "0.1"],
        "differs": True,
    }
    assert args["worker --epochs"]["differs"] is False
    assert answer["scalars"] is None
    # Repeated parameters say the same; scalars on request, in the jobs' order.
    again = world.bob.ok(
        world.bob.get("/api/v1/compare", params=[("jobs", i) for i in ids] + [("scalars", "true")])
    )
    assert again["results"] == answer["results"]
    losses = [
        next(s for s in c["series"] if s["tag"] == "loss")["points"][0]["value"]
        for c in again["scalars"]
    ]
    assert losses == [1.0, 0.5, 2.0]
    # Another team's job is "not found", for carol and for bob alike; a bad selection
    # names the field and the fix.
    r = world.carol.get("/api/v1/compare", params={"jobs": ",".join(ids)})
    assert r.status_code == 404, r.text
    r = world.bob.get("/api/v1/compare", params={"jobs": f"{ids[0]},{world.theirs}"})
    assert r.status_code == 404
    assert world.theirs in r.text
    r = world.bob.get("/api/v1/compare", params={"jobs": ids[0]})
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "jobs"
    assert "give 2 to 10 job ids" in r.json()["errors"][0]["message"]
    r = world.bob.get("/api/v1/compare", params={"jobs": f"{ids[0]},{ids[0]}"})
    assert r.status_code == 422  # one job twice is one job


def test_tick_jobs_and_compare_them(browser: Any, site: Site, world: World) -> None:
    context = browser.new_context(viewport=LAPTOP, base_url=site.url)
    context.set_default_timeout(30_000)
    page = context.new_page()
    sign_in(page, site.url, "bob", PASSWORD)
    page.goto("/jobs")
    go = page.get_by_role("button", name="Compare", exact=True)
    assert go.is_disabled()
    for name in ("cmp-a", "cmp-b"):
        page.get_by_role("checkbox", name=f"Compare {name}").check()
    # The list refreshes itself; what was ticked stays ticked.
    with page.expect_response(lambda r: r.url.endswith("/jobs") or "/jobs?" in r.url):
        page.evaluate("htmx.trigger('#job-list', 'tick')")
    poll(
        "the ticks after a refresh",
        lambda: page.get_by_role("checkbox", name="Compare cmp-b").is_checked(),
        30,
    )
    page.get_by_role("checkbox", name="Compare cmp-c").check()
    assert "3 jobs ticked" in page.locator("[data-compare-hint]").inner_text()
    shot(page, "60-jobs-ticked-to-compare")
    go.click()
    ids = [world.jobs[n] for n in JOBS]
    page.wait_for_url(re.compile(r".*/compare\?jobs=" + ",".join(ids) + "$"))
    url = page.url

    results = page.locator("table[data-compare-results]")
    heads = [t.strip() for t in results.locator("thead th.job-col").all_text_contents()]
    assert heads == list(JOBS)
    accuracy = results.locator('tr[data-row="test_accuracy"] td')
    assert [t.split()[0] for t in accuracy.all_inner_texts()] == ["0.6", "0.9", "0.7"]
    best = results.locator('tr[data-row="test_accuracy"] td.best')
    assert best.count() == 1
    assert best.get_attribute("data-job") == world.jobs["cmp-b"]
    assert results.locator('tr[data-row="test_loss"] td.best').count() == 0

    lr = page.locator('table[data-compare-args] tr[data-row="worker --lr"]')
    assert "differs" in (lr.get_attribute("class") or "")
    assert lr.locator("td").all_inner_texts() == ["0.1", "0.2", "0.1"]
    epochs = page.locator('table[data-compare-args] tr[data-row="worker --epochs"]')
    assert "same" in (epochs.get_attribute("class") or "")

    charts = page.locator("[data-compare-charts]")
    page.locator('[data-compare-charts][data-loaded="true"]').wait_for()
    loss = charts.locator('figure.chart[data-tag="loss"]')
    loss.wait_for()
    assert loss.get_attribute("data-points") == "15"  # 5 points of each of the 3 jobs
    legend = words(loss.locator(".u-legend"))
    assert all(name in legend for name in JOBS), legend
    assert "3 of 3 jobs" in loss.locator("figcaption").inner_text()
    shot(page, "61-compare")

    # The address is the comparison: another of bob's team sees it; carol does not.
    other = browser.new_context(viewport=LAPTOP, base_url=site.url)
    carol = other.new_page()
    sign_in(carol, site.url, "carol", PASSWORD)
    response = carol.goto(url)
    assert response is not None
    assert response.status == 404
    assert "Not found" in carol.inner_text("main")
    response = carol.goto(f"/compare?jobs={world.theirs}")
    assert response is not None
    assert response.status == 400
    assert "Choose 2 to 10 jobs" in carol.inner_text("main")
    other.close()
    context.close()


def words(locator: Any) -> str:
    return " ".join((locator.text_content() or "").split())


def test_the_page_needs_no_script_to_choose(site: Site, world: World) -> None:
    """Without JavaScript the list's form sends jobs=a&jobs=b: the same page."""
    client = httpx.Client(base_url=site.url, timeout=60)
    try:
        r = client.post("/api/v1/auth/login", json={"name": "bob", "password": PASSWORD})
        assert r.status_code == 200, r.text
        ids = [world.jobs["cmp-a"], world.jobs["cmp-c"]]
        page = client.get("/compare", params=[("jobs", i) for i in ids])
        assert page.status_code == 200, page.text[-2000:]
        assert "Comparing 2 jobs" in page.text
    finally:
        client.close()
