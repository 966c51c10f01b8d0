"""The server's read layer (`tfkube.server.queries`) on a real SQLite database with the
server's own schema: another team's things are not found by any `find`, lists hold only
what the actor may see, and a job list costs the same few queries however long its page
(what keeps the dashboard's 1,000-job list fast)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.orm import Session

from tfkube.engines import Health, WorkloadStatus
from tfkube.server import queries
from tfkube.server.core.db import make_engine, migrate, session_factory
from tfkube.server.core.scopes import Actor, Role, Scope
from tfkube.server.core.tables import (
    ApiToken,
    Artifact,
    Blob,
    Job,
    JobEvent,
    Membership,
    ModelServer,
    Notebook,
    Team,
    User,
)

T0 = 1_700_000_000.0
JOBS_IN_A = 120


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Session]:
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    migrate(engine)
    try:
        with session_factory(engine)() as session:
            _seed(session)
            yield session
    finally:
        engine.dispose()


def _seed(db: Session) -> None:
    """Team a (alice member, vic viewer), team b (bea member), root a site admin."""
    users = {
        n: User(id=i, name=n, password_hash="x", site_admin=n == "root", created_at=T0)
        for i, n in enumerate(["alice", "vic", "bea", "root"], start=1)
    }
    db.add_all(users.values())
    db.add_all(
        [
            Team(id=1, name="a", namespace="tfkube-a", quota={}, created_at=T0),
            Team(id=2, name="b", namespace="tfkube-b", quota={}, created_at=T0),
        ]
    )
    db.flush()
    db.add_all(
        [
            Membership(user_id=1, team_id=1, role="member"),
            Membership(user_id=2, team_id=1, role="viewer"),
            Membership(user_id=3, team_id=2, role="member"),
        ]
    )
    db.add(Blob(sha256="ab" * 32, size=1, created_at=T0))
    db.flush()
    for team_id, public in ((1, "art-a"), (2, "art-b")):
        db.add(
            Artifact(
                public_id=public, team_id=team_id, name="code", version=1, kind="code",
                sha256="ab" * 32, size=1, files=1, created_by=None, created_at=T0,
            )
        )  # fmt: skip
    phases = ["Succeeded", "Failed", "Running"]
    for i in range(JOBS_IN_A):
        db.add(_job(f"a{i:04d}", 1, f"job-{i}", phases[i % 3], created_by=1 + i % 2, at=T0 + i))
    db.add(_job("b0", 2, "job-b", "Running", created_by=3, at=T0))
    db.flush()
    db.add(JobEvent(job_id="b0", time=T0, message="b's event"))
    for team_id, server_id, job_id in ((1, "ms-a", "a0000"), (2, "ms-b", "b0")):
        db.add(
            ModelServer(
                id=server_id, team_id=team_id, job_id=job_id, job_name="j", name="m",
                model_base_path="/x", resources={}, state="running", handle={},
                created_at=T0,
            )
        )  # fmt: skip
    db.add(Notebook(id="nb-bea", user_id=3, team_id=2, state="stopped", created_at=T0))
    db.add(
        ApiToken(
            public_id="tok-bea", user_id=3, name="t", token_hash="h" * 64, prefix="p",
            created_at=T0,
        )
    )  # fmt: skip
    db.commit()


def _job(job_id: str, team_id: int, name: str, phase: str, created_by: int, at: float) -> Job:
    return Job(
        id=job_id, team_id=team_id, name=name, created_by=created_by, created_at=at, spec="",
        state="ended" if phase != "Running" else "live", request={}, phase=phase,
        replicas=[], updated_at=at,
    )  # fmt: skip


ALICE = Actor(user_id=1, roles={1: Role.MEMBER})
VIC = Actor(user_id=2, roles={1: Role.VIEWER})
BEA = Actor(user_id=3, roles={2: Role.MEMBER})
ROOT = Actor(user_id=4, site_admin=True)
NOBODY = Actor(user_id=5)

FINDS: list[tuple[str, Any]] = [
    ("job a", lambda db, actor: queries.jobs.find(db, actor, "a0000")),
    ("artifact a", lambda db, actor: queries.artifacts.find(db, actor, "art-a")),
    ("team a", lambda db, actor: queries.teams.find(db, actor, "a")),
    ("model server a", lambda db, actor: queries.model_servers.find(db, actor, "ms-a")),
]


@pytest.mark.parametrize(("what", "find"), FINDS, ids=[w for w, _ in FINDS])
@pytest.mark.parametrize(
    ("actor", "sees"),
    [
        pytest.param(ALICE, True, id="member"),
        pytest.param(VIC, True, id="viewer"),
        pytest.param(BEA, False, id="another team's member"),
        pytest.param(NOBODY, False, id="in no team"),
        pytest.param(ROOT, True, id="site admin"),
    ],
)
def test_another_teams_thing_is_not_found(
    db: Session, what: str, find: Any, actor: Actor, sees: bool
) -> None:
    assert (find(db, actor) is not None) is sees


@pytest.mark.parametrize(
    ("find", "found"),
    [
        pytest.param(lambda db: queries.jobs.find(db, ALICE, "missing"), False, id="no such job"),
        pytest.param(lambda db: queries.teams.find(db, ALICE, "zzz"), False, id="no such team"),
        pytest.param(lambda db: queries.notebooks.find_own(db, 3, "nb-bea"), True, id="notebook"),
        pytest.param(lambda db: queries.notebooks.find_own(db, 4, "nb-bea"), False, id="admin's"),
        pytest.param(lambda db: queries.tokens.find_own(db, 3, "tok-bea"), True, id="token"),
        pytest.param(lambda db: queries.tokens.find_own(db, 1, "tok-bea"), False, id="another's"),
        pytest.param(lambda db: queries.users.find(db, ALICE, "alice"), True, id="oneself"),
        pytest.param(lambda db: queries.users.find(db, ALICE, "bea"), False, id="someone else"),
        pytest.param(lambda db: queries.users.find(db, ROOT, "bea"), True, id="admin: anyone"),
    ],
)
def test_ones_own(db: Session, find: Any, found: bool) -> None:
    """Notebooks, tokens and (but for a site admin) users are their owner's alone."""
    assert (find(db) is not None) is found


def test_job_list_holds_the_actors_teams_newest_first_with_counts(db: Session) -> None:
    listing = queries.jobs.list_jobs(db, ALICE, limit=10)
    assert listing.total == JOBS_IN_A
    assert listing.phases == {"Succeeded": 40, "Failed": 40, "Running": 40}
    assert [j.id for j in listing.items] == [f"a{i:04d}" for i in range(119, 109, -1)]
    assert {j.team for j in listing.items} == {"a"}
    assert queries.jobs.list_jobs(db, BEA).total == 1
    assert queries.jobs.list_jobs(db, ROOT).total == JOBS_IN_A + 1
    assert queries.jobs.list_jobs(db, NOBODY).total == 0


@pytest.mark.parametrize(
    ("filters", "total", "phases"),
    [
        pytest.param(
            {"phase": "Running"},
            40,
            {"Succeeded": 40, "Failed": 40, "Running": 40},
            id="phase: counts stay",
        ),
        pytest.param(
            {"owner": "vic"}, 60, {"Succeeded": 20, "Failed": 20, "Running": 20}, id="owner"
        ),
        pytest.param({"q": "job-11"}, 11, {"Succeeded": 3, "Failed": 3, "Running": 5}, id="text"),
        pytest.param({"name": "job-7"}, 1, {"Failed": 1}, id="name"),
        pytest.param({"team": "b"}, 0, {}, id="another team"),
        pytest.param({"q": "%"}, 0, {}, id="no wildcard"),
    ],
)
def test_job_list_filters(
    db: Session, filters: dict[str, str], total: int, phases: dict[str, int]
) -> None:
    listing = queries.jobs.list_jobs(db, ALICE, **filters)  # type: ignore[arg-type]
    assert (listing.total, listing.phases) == (total, phases)


def test_job_list_costs_the_same_queries_however_long_its_page(db: Session) -> None:
    """Counts, the result names the jobs report (the list's columns), the page, and one
    query each for the page's team, owner and artifact names: no query per row."""
    seen: list[str] = []
    engine = db.get_bind()

    def count(*args: Any) -> None:
        seen.append(args[2])

    event.listen(engine, "before_cursor_execute", count)
    try:
        sizes = {}
        for limit in (1, 50, 500):
            seen.clear()
            db.expunge_all()
            listing = queries.jobs.list_jobs(db, ROOT, limit=limit, offset=0)
            sizes[limit] = (len(listing.items), len(seen))
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert sizes == {1: (1, 6), 50: (50, 6), 500: (JOBS_IN_A + 1, 6)}


def test_a_list_sorts_by_a_result_with_the_jobs_without_it_last(db: Session) -> None:
    """`sort=result.<name>`: by the kept number (job_metrics), either way, jobs that
    reported no such number last; `result_keys` names the numbers the filter's jobs
    report, the most common first; a job of another team counts for nothing."""
    from tfkube.server.core.tables import JobMetric
    from tfkube.server.queries.jobs import Sort

    scores = {"a0000": 0.5, "a0001": 0.9, "a0002": 0.7, "b0": 0.99}
    for job_id, score in scores.items():
        row = queries.jobs.get(db, job_id)
        assert row is not None
        row.result = {"accuracy": score, **({"step": 1} if job_id == "a0001" else {})}
        db.add(JobMetric(job_id=job_id, name="accuracy", value=score))
    db.add(JobMetric(job_id="a0001", name="step", value=1.0))
    db.commit()

    def first(text: str, n: int = 4) -> list[str]:
        listed = queries.jobs.list_jobs(db, ALICE, limit=n, sort=Sort.parse(text))
        return [j.id for j in listed.items]

    assert first("-result.accuracy") == ["a0001", "a0002", "a0000", f"a{JOBS_IN_A - 1:04d}"]
    assert first("result.accuracy")[:3] == ["a0000", "a0002", "a0001"]
    assert first("-result.nothing") == first("-created")  # no job has it: newest first
    listing = queries.jobs.list_jobs(db, ALICE, limit=1)
    assert listing.result_keys == ["accuracy", "step"]
    assert listing.items[0].result is None  # the newest reported nothing
    assert queries.jobs.list_jobs(db, BEA, limit=1).result_keys == ["accuracy"]


def test_events_and_views(db: Session) -> None:
    row = queries.jobs.get(db, "b0")
    assert row is not None
    view = queries.jobs.view(db, row, detail=False)
    assert (view.team, view.owner, view.replicas) == ("b", "bea", None)
    assert [e.message for e in queries.jobs.events(db, "b0")] == ["b's event"]
    assert queries.jobs.events(db, "b0", after=10**9) == []


def test_lists_hold_only_what_the_actor_may_see(db: Session) -> None:
    seen = WorkloadStatus(Health.READY)
    assert [a.team for a in queries.artifacts.list_artifacts(db, ALICE)] == ["a"]
    assert [a.team for a in queries.artifacts.list_artifacts(db, ROOT)] == ["a", "b"]
    assert [t.name for t in queries.teams.list_teams(db, BEA)] == ["b"]
    servers = queries.model_servers.list_servers(db, ALICE, lambda _: seen, "http://s")
    assert [(s.id, s.status, s.team) for s in servers] == [("ms-a", "Ready", "a")]
    assert queries.users.owners(db, ALICE) == ["alice", "vic"]
    assert queries.users.owners(db, ROOT) == ["alice", "bea", "root", "vic"]
    assert [m.user for m in queries.teams.members(db, 1)] == ["alice", "vic"]


@pytest.mark.parametrize(
    ("actor", "scope", "members_only", "names"),
    [
        pytest.param(ALICE, Scope.JOBS_WRITE, False, ["a"], id="member writes"),
        pytest.param(VIC, Scope.JOBS_WRITE, False, [], id="viewer does not"),
        pytest.param(VIC, Scope.JOBS_READ, False, ["a"], id="viewer reads"),
        pytest.param(ROOT, Scope.JOBS_WRITE, False, ["a", "b"], id="admin everywhere"),
        pytest.param(ROOT, Scope.NOTEBOOKS, True, [], id="admin's own: none"),
        pytest.param(BEA, Scope.NOTEBOOKS, True, ["b"], id="member's own"),
    ],
)
def test_teams_where_the_actor_holds_a_scope(
    db: Session, actor: Actor, scope: Scope, members_only: bool, names: list[str]
) -> None:
    assert queries.teams.names_allowed(db, actor, scope, members_only=members_only) == names


def test_usage_counts_running_and_queued(db: Session) -> None:
    usage = queries.teams.usage(db, 1)
    assert (usage.running, usage.queued) == (40, 0)


@pytest.mark.parametrize(
    ("team_id", "search", "names", "total"),
    [
        (1, "", ["bea", "root"], 2),  # not alice nor vic: members already
        (2, "", ["alice", "root", "vic"], 3),
        (2, "i", ["alice", "vic"], 2),
        (2, "%", [], 0),  # a LIKE wildcard is a character like any other
        (2, "nobody", [], 0),
    ],
)
def test_the_people_a_team_admin_may_add(
    db: Session, team_id: int, search: str, names: list[str], total: int
) -> None:
    assert queries.users.addable(db, team_id, search) == (names, total)


def test_the_people_picker_shows_a_bounded_page_and_counts_the_rest(db: Session) -> None:
    assert queries.users.addable(db, 2, "", limit=1) == (["alice"], 3)
    db.get(User, 4).disabled = True  # type: ignore[union-attr]
    assert queries.users.addable(db, 2, "") == (["alice", "vic"], 2)


def test_disruptions_are_counted_per_team_for_metrics(db: Session) -> None:
    """`tfkube_job_disruptions{team}` (and the other per-team sums) from the jobs' rows."""
    from prometheus_client.core import Metric

    from tfkube.server.metrics import _JobsCollector

    for job_id, disrupted, restarted in (("b0", 2, 1), ("a0002", 1, 0), ("a0005", 1, 3)):
        row = db.get(Job, job_id)
        assert row is not None
        row.disruptions, row.restarts = disrupted, restarted
    db.commit()
    sums = {(t, p): rest for t, p, *rest in queries.jobs.counts_by_team(db)}
    assert sums[("b", "Running")] == [1, 1, 0, 2]
    assert sums[("a", "Running")] == [JOBS_IN_A // 3, 3, 0, 2]

    collected: dict[str, Metric] = {
        m.name: m for m in _JobsCollector(lambda: Session(db.get_bind())).collect()
    }
    by_team = {s.labels["team"]: s.value for s in collected["tfkube_job_disruptions"].samples}
    assert by_team == {"a": 2.0, "b": 2.0}
    restarts = {s.labels["team"]: s.value for s in collected["tfkube_replica_restarts"].samples}
    assert restarts == {"a": 3.0, "b": 1.0}
